// The client's Socket.IO transport: one websocket connection per client, opened on first use
// with `x-api-key` and `Origin` headers, results routed to operations by id, and every
// operation failed (typed) when the connection drops: live streams restart, never resume.

import type { Socket } from 'socket.io-client';
import type { ServiceConfig } from '../protocol/config.ts';
import {
  errorFromErrorBody,
  InvalidArgumentError,
  redactSecrets,
  type SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { FrameAck, SocketEventNames } from '../protocol/socket-events.ts';

export interface Route {
  /** The operation this id belongs to, for error labels. */
  operation: OperationName;
  /** A result event for this id (transcription_result, diarization_result, tts_audio). */
  onResult(event: string, payload: unknown): void;
  /** An `error` event naming this id. */
  onError(err: SpeechServiceError): void;
  /** The connection dropped. */
  onDisconnect(err: TransportError): void;
}

/** Default wait for a Socket.IO acknowledgement, as the README says. */
export const DEFAULT_SOCKET_ACK_MS = 30_000;

/**
 * A Socket.IO error payload as a typed error, read as an HTTP error body is. The status is the
 * payload's own, else the code catalog's, else the one an `HTTP_<status>` code names (what a
 * service or proxy without a catalog code sends), so a 429 is seen as one whatever its code.
 */
export function errorFromSocketPayload(
  payload: unknown,
  operation: OperationName,
  secrets: readonly string[],
): SpeechServiceError {
  const body = (typeof payload === 'object' && payload !== null ? payload : {}) as Record<string, unknown>;
  return errorFromErrorBody(body, {
    defaultCode: 'SOCKET_ERROR',
    retryAfterMs: typeof body.retry_after === 'number' ? body.retry_after * 1000 : undefined,
    operation,
    secrets,
  });
}

/** What an acknowledgement callback holds on to: emptied once the operation settles. */
interface AckHolder {
  onAck: ((ack: FrameAck) => void) | undefined;
}

/**
 * An acknowledgement awaited on a connection. The connection fails every one of them at once
 * when it drops or the service sends an error naming no id (see #attach): no listener per
 * emit on the socket.
 */
interface AwaitedAck {
  operation: OperationName;
  fail(err: Error): void;
}

/** socket.io-client 4's ack table and the id its next `emit` with a callback takes. */
interface AckRegistry {
  ids?: unknown;
  acks?: Record<number, unknown>;
}

/**
 * Ids are UUIDs, compared as UUIDs: hex digits in either case name the same id, so a result
 * for `ABC…` reaches the operation that sent `abc…` (and the other way round).
 */
function routeKey(id: string): string {
  return id.toLowerCase();
}

/**
 * socket.io-client (with ws and engine.io), loaded on the first Socket.IO operation: it is about
 * half of what `import 'speechpipe'` would load, and HTTP-only programs never need it. Loaded
 * once: a live session opens a connection of its own, and each import() of a loaded module
 * still goes through the module loader's resolution.
 */
let socketIo: Promise<typeof import('socket.io-client')> | undefined;

/** Made outside emitWithAck so that its scope (the payload) is not captured. */
function ackCallback(holder: AckHolder): (ack: FrameAck) => void {
  return (ack) => holder.onAck?.(ack);
}

export class SocketTransport {
  readonly #config: ServiceConfig;
  readonly events: SocketEventNames;
  readonly #connectTimeoutMs: number;
  /** The acknowledgement wait of operations that do not set their own. */
  readonly ackTimeoutMs: number;
  #socket: Socket | undefined;
  /** The socket being connected and how to fail its waiters, so close() can stop it. */
  #opening: { fail(err: TransportError): void } | undefined;
  #connecting: Promise<Socket> | undefined;
  readonly #routes = new Map<string, Route>();
  /** Per connection: the acknowledgements awaited on it. */
  readonly #awaited = new WeakMap<Socket, Set<AwaitedAck>>();
  #closed = false;

  constructor(
    config: ServiceConfig,
    events: SocketEventNames,
    options: { connectTimeoutMs?: number; ackTimeoutMs?: number } = {},
  ) {
    this.#config = config;
    this.events = events;
    this.#connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    this.ackTimeoutMs = options.ackTimeoutMs ?? DEFAULT_SOCKET_ACK_MS;
  }

  get #secrets(): string[] {
    return [this.#config.apiKey.reveal()];
  }

  /** A connection is open now. */
  get connected(): boolean {
    return this.#socket?.connected === true;
  }

  /** The connected socket, connecting first if needed. */
  connect(operation: OperationName, signal?: AbortSignal): Promise<Socket> {
    if (this.#closed)
      return Promise.reject(new TransportError('ERR_CLIENT_CLOSED', 'the client is closed', { operation }));
    if (this.#socket?.connected) return Promise.resolve(this.#socket);
    this.#connecting ??= this.#open(operation).finally(() => {
      this.#connecting = undefined;
    });
    if (!signal) return this.#connecting;
    const connecting = this.#connecting;
    return new Promise<Socket>((resolve, reject) => {
      if (signal.aborted) {
        reject(signal.reason);
        return;
      }
      // Callers' signals may live long (one per session or app): never leave a listener behind.
      const onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      connecting.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  async #open(operation: OperationName): Promise<Socket> {
    socketIo ??= import('socket.io-client').catch((err: unknown) => {
      socketIo = undefined; // tried again by the next connection
      throw err;
    });
    const { io } = await socketIo;
    if (this.#closed) throw new TransportError('ERR_CLIENT_CLOSED', 'the client is closed', { operation });
    const socket = io(this.#config.origin, {
      path: this.#config.socketPath,
      transports: ['websocket'],
      extraHeaders: { 'x-api-key': this.#config.apiKey.reveal(), Origin: this.#config.origin },
      reconnection: false,
      timeout: this.#connectTimeoutMs,
      forceNew: true,
      // The connection alone does not keep the process alive (a program that made one TTS
      // call and forgot close() still exits); an operation in progress does, by its own timers.
      autoUnref: true,
    });
    return new Promise<Socket>((resolve, reject) => {
      // A socket disconnected while connecting emits neither connect_error nor disconnect:
      // close() fails the waiters itself.
      this.#opening = {
        fail: (err) => {
          this.#opening = undefined;
          clearTimeout(deadline);
          socket.off('connect', onConnect);
          socket.off('connect_error', onError);
          socket.disconnect();
          reject(err);
        },
      };
      // socket.io-client's `timeout` covers only the engine.io handshake: a server that opens
      // the websocket and never answers the namespace CONNECT (a login that never completes)
      // would leave every operation waiting for good. The whole connect has this deadline.
      const deadline = setTimeout(
        () =>
          this.#opening?.fail(
            new TransportError(
              'ERR_TIMEOUT',
              `${operation}: Socket.IO connection not established within ${this.#connectTimeoutMs} ms`,
              { operation, ambiguous: false },
            ),
          ),
        this.#connectTimeoutMs,
      );
      const onConnect = () => {
        this.#opening = undefined;
        clearTimeout(deadline);
        socket.off('connect_error', onError);
        if (this.#closed) {
          socket.disconnect();
          reject(new TransportError('ERR_CLIENT_CLOSED', 'the client is closed', { operation }));
          return;
        }
        this.#attach(socket);
        resolve(socket);
      };
      const onError = (err: Error & { data?: unknown }) => {
        this.#opening = undefined;
        clearTimeout(deadline);
        socket.off('connect', onConnect);
        socket.disconnect();
        if (err.data && typeof err.data === 'object')
          reject(errorFromSocketPayload(err.data, operation, this.#secrets));
        else {
          reject(
            new TransportError(
              'ERR_CONNECT',
              `${operation}: Socket.IO connection failed (${redactSecrets(err.message, this.#secrets)})`,
              {
                operation,
                ambiguous: false,
              },
            ),
          );
        }
      };
      socket.once('connect', onConnect);
      socket.once('connect_error', onError);
    });
  }

  #attach(socket: Socket): void {
    this.#socket = socket;
    const awaited = new Set<AwaitedAck>();
    this.#awaited.set(socket, awaited);
    const e = this.events;
    const dispatch = (event: string) => (payload: unknown) => {
      const id = (payload as { id?: unknown } | null)?.id;
      if (typeof id === 'string') this.#routes.get(routeKey(id))?.onResult(event, payload);
    };
    socket.on(e.transcriptionResult, dispatch(e.transcriptionResult));
    socket.on(e.diarizationResult, dispatch(e.diarizationResult));
    socket.on(e.ttsAudio, dispatch(e.ttsAudio));
    socket.on(e.error, (payload: unknown) => {
      const id = (payload as { id?: unknown } | null)?.id;
      const route = typeof id === 'string' ? this.#routes.get(routeKey(id)) : undefined;
      if (route) route.onError(errorFromSocketPayload(payload, route.operation, this.#secrets));
      else if (typeof id !== 'string') {
        // A connection-level error (for example authentication): every operation fails, and
        // every acknowledgement awaited, which the service will not send then (a key refused
        // the voice listing waited for the timeout, and its 403 became an ambiguous
        // ERR_TIMEOUT). One naming an id is for the operation of that id, whose route ends its
        // own waits.
        for (const r of [...this.#routes.values()])
          r.onError(errorFromSocketPayload(payload, r.operation, this.#secrets));
        for (const ack of [...awaited])
          ack.fail(errorFromSocketPayload(payload, ack.operation, this.#secrets));
      }
    });
    socket.on('disconnect', (reason: string) => {
      if (this.#socket === socket) this.#socket = undefined;
      for (const route of [...this.#routes.values()]) {
        route.onDisconnect(
          new TransportError(
            'ERR_SOCKET_DISCONNECTED',
            `${route.operation}: Socket.IO connection lost (${reason})`,
            { ambiguous: true, operation: route.operation },
          ),
        );
      }
      for (const ack of [...awaited]) {
        ack.fail(
          // close() disconnects too: then the operation ends because the client closed.
          this.#closed
            ? new TransportError('ERR_CLIENT_CLOSED', `${ack.operation}: the client was closed`, {
                operation: ack.operation,
              })
            : new TransportError(
                'ERR_SOCKET_DISCONNECTED',
                `${ack.operation}: connection lost before acknowledgement`,
                { operation: ack.operation, ambiguous: true },
              ),
        );
      }
    });
  }

  /** Receive results and errors for `id`; returns the unsubscribe function. */
  route(id: string, route: Route): () => void {
    const key = routeKey(id);
    // The service tells operations apart by id alone: a second one with the same id would take
    // the first's results, and the first would wait for its final record until its timeout.
    if (this.#routes.has(key))
      throw new InvalidArgumentError(
        `${route.operation}: id ${id} is in use by another operation on this connection (give each its own)`,
      );
    this.#routes.set(key, route);
    return () => {
      if (this.#routes.get(key) === route) this.#routes.delete(key);
    };
  }

  /**
   * Emit with an acknowledgement. Resolves with the ack; rejects on timeout (ambiguous: the
   * service may have acted), disconnect or abort. `timeoutMs` defaults to `ackTimeoutMs`.
   */
  emitWithAck(
    operation: OperationName,
    event: string,
    payload: unknown,
    options: { timeoutMs?: number | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<FrameAck> {
    const timeoutMs = options.timeoutMs ?? this.ackTimeoutMs;
    const socket = this.#socket;
    // Connected (every frame of a live stream after its first): no wait for the connection.
    if (socket?.connected)
      return this.#awaitAck(socket, operation, event, payload, timeoutMs, timeoutMs, options.signal);
    return this.#connectThenEmit(operation, event, payload, timeoutMs, options.signal);
  }

  /** The wait covers the connect (itself bounded by the connect timeout) and the ack. */
  async #connectThenEmit(
    operation: OperationName,
    event: string,
    payload: unknown,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<FrameAck> {
    const started = performance.now();
    const socket = this.#usable(await this.connect(operation, signal), operation);
    const remainingMs = Math.max(0, timeoutMs - (performance.now() - started));
    return this.#awaitAck(socket, operation, event, payload, timeoutMs, remainingMs, signal);
  }

  #awaitAck(
    socket: Socket,
    operation: OperationName,
    event: string,
    payload: unknown,
    /** The caller's wait, which the message names. */
    timeoutMs: number,
    /** What is left of it after connecting. */
    remainingMs: number,
    signal: AbortSignal | undefined,
  ): Promise<FrameAck> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const awaited = this.#awaited.get(socket);
    return new Promise<FrameAck>((resolve, reject) => {
      let settled = false;
      // socket.io keeps an ack callback until its ack or a disconnect, so on a long-lived
      // connection a timed-out or aborted one would stay for good. It reaches the settling
      // closure (and through it the payload: up to 64 MiB of audio) only through `holder`,
      // emptied on settle, and its entry is removed from socket.io's table as well.
      const holder: AckHolder = {
        onAck: (ack) => {
          if (finish()) resolve(ack);
        },
      };
      const registry = socket as unknown as AckRegistry;
      const ackId = registry.ids;
      const finish = (): boolean => {
        if (settled) return false;
        settled = true;
        holder.onAck = undefined;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        awaited?.delete(entry);
        if (typeof ackId === 'number' && registry.acks?.[ackId] === callback) delete registry.acks[ackId];
        return true;
      };
      const entry: AwaitedAck = {
        operation,
        fail: (err) => {
          if (finish()) reject(err);
        },
      };
      const onAbort = () => entry.fail(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      awaited?.add(entry);
      // Our own timer, not socket.timeout(): socket.io's timer can only be cleared by the ack or
      // a disconnect, so an aborted operation would keep the process alive until then.
      const timer = setTimeout(
        () =>
          entry.fail(
            new TransportError('ERR_TIMEOUT', `${operation}: no acknowledgement within ${timeoutMs} ms`, {
              operation,
              ambiguous: true,
            }),
          ),
        remainingMs,
      );
      const callback = ackCallback(holder);
      socket.emit(event, payload, callback);
    });
  }

  /** Emit without an acknowledgement (connects first). */
  async emit(operation: OperationName, event: string, payload: unknown, signal?: AbortSignal): Promise<void> {
    const socket = this.#usable(await this.connect(operation, signal), operation);
    socket.emit(event, payload);
  }

  /**
   * The socket `connect` gave, if it is still connected. It can be gone by the time its waiter
   * runs: close() (called in the same turn as the operation) disconnects it synchronously. An
   * event emitted then would sit in socket.io's send buffer of a socket that never reconnects,
   * and its acknowledgement would be awaited to the timeout (the 5 min upload wait for a fast
   * transcription) as a disconnect that already happened is never signalled again.
   */
  #usable(socket: Socket, operation: OperationName): Socket {
    if (socket.connected) return socket;
    if (this.#closed)
      throw new TransportError('ERR_CLIENT_CLOSED', `${operation}: the client was closed`, { operation });
    // Nothing was sent: not ambiguous.
    throw new TransportError('ERR_SOCKET_DISCONNECTED', `${operation}: Socket.IO connection lost`, {
      operation,
      ambiguous: false,
    });
  }

  /** Turn a negative ack into a typed error. */
  ackError(ack: FrameAck, operation: OperationName): SpeechServiceError | undefined {
    if (ack && typeof ack === 'object' && ack.ok === true) return undefined;
    const error = ack && typeof ack === 'object' && 'error' in ack ? ack.error : ack;
    return errorFromSocketPayload(error, operation, this.#secrets);
  }

  close(): void {
    this.#closed = true;
    const closed = (operation?: OperationName) =>
      new TransportError('ERR_CLIENT_CLOSED', `${operation ? `${operation}: ` : ''}the client was closed`, {
        ...(operation ? { operation } : {}),
      });
    const routes = [...this.#routes.values()];
    this.#routes.clear();
    for (const route of routes) route.onDisconnect(closed(route.operation));
    this.#socket?.disconnect();
    this.#socket = undefined;
    this.#opening?.fail(closed());
  }
}
