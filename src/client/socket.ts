// The client's Socket.IO transport: one websocket connection per client, opened on first use
// with `x-api-key` and `Origin` headers, results routed to operations by id, and every
// operation failed (typed) when the connection drops: live streams restart, never resume.

import { io, type Socket } from 'socket.io-client';
import type { ServiceConfig } from '../protocol/config.ts';
import { ERROR_CODES, isServiceErrorCode } from '../protocol/error-codes.ts';
import { redactSecrets, SpeechServiceError, TransportError } from '../protocol/errors.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { FrameAck, SocketErrorPayload, SocketEventNames } from '../protocol/socket-events.ts';

export interface Route {
  /** A result event for this id (transcription_result, diarization_result, tts_audio). */
  onResult(event: string, payload: unknown): void;
  /** An `error` event naming this id. */
  onError(err: SpeechServiceError): void;
  /** The connection dropped. */
  onDisconnect(err: TransportError): void;
}

/** A Socket.IO error payload as a typed error; the status comes from the code catalog. */
export function errorFromSocketPayload(
  payload: unknown,
  operation: OperationName,
  secrets: readonly string[],
): SpeechServiceError {
  const body = (
    typeof payload === 'object' && payload !== null ? payload : {}
  ) as Partial<SocketErrorPayload> & {
    status?: number;
    message?: string;
  };
  const code = typeof body.code === 'string' && body.code ? body.code : 'SOCKET_ERROR';
  const catalog = isServiceErrorCode(code) ? ERROR_CODES[code] : undefined;
  const retryAfter = (body as { retry_after?: number }).retry_after;
  return new SpeechServiceError({
    status: typeof body.status === 'number' ? body.status : (catalog?.status ?? 0),
    code,
    retryable: typeof body.retryable === 'boolean' ? body.retryable : (catalog?.retryable ?? false),
    retryAfterMs: typeof retryAfter === 'number' ? retryAfter * 1000 : undefined,
    detail:
      typeof body.detail === 'string'
        ? body.detail
        : typeof body.message === 'string'
          ? body.message
          : undefined,
    requestId: typeof body.request_id === 'string' ? body.request_id : undefined,
    jobId: typeof body.job_id === 'string' ? body.job_id : undefined,
    data:
      typeof body.data === 'object' && body.data !== null
        ? (body.data as unknown as Record<string, unknown>)
        : undefined,
    operation,
    secrets,
  });
}

export class SocketTransport {
  readonly #config: ServiceConfig;
  readonly events: SocketEventNames;
  readonly #connectTimeoutMs: number;
  #socket: Socket | undefined;
  /** The socket being connected, so close() can stop it. */
  #opening: Socket | undefined;
  #connecting: Promise<Socket> | undefined;
  readonly #routes = new Map<string, Route>();
  #closed = false;

  constructor(config: ServiceConfig, events: SocketEventNames, options: { connectTimeoutMs?: number } = {}) {
    this.#config = config;
    this.events = events;
    this.#connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
  }

  get #secrets(): string[] {
    return [this.#config.apiKey.reveal()];
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
    return Promise.race([
      this.#connecting,
      new Promise<never>((_, reject) => {
        if (signal.aborted) reject(signal.reason);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
    ]);
  }

  #open(operation: OperationName): Promise<Socket> {
    const socket = io(this.#config.origin, {
      path: this.#config.socketPath,
      transports: ['websocket'],
      extraHeaders: { 'x-api-key': this.#config.apiKey.reveal(), Origin: this.#config.origin },
      reconnection: false,
      timeout: this.#connectTimeoutMs,
      forceNew: true,
    });
    this.#opening = socket;
    return new Promise<Socket>((resolve, reject) => {
      const onConnect = () => {
        this.#opening = undefined;
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
    const e = this.events;
    const dispatch = (event: string) => (payload: unknown) => {
      const id = (payload as { id?: unknown } | null)?.id;
      if (typeof id === 'string') this.#routes.get(id)?.onResult(event, payload);
    };
    socket.on(e.transcriptionResult, dispatch(e.transcriptionResult));
    socket.on(e.diarizationResult, dispatch(e.diarizationResult));
    socket.on(e.ttsAudio, dispatch(e.ttsAudio));
    socket.on(e.error, (payload: unknown) => {
      const id = (payload as { id?: unknown } | null)?.id;
      const route = typeof id === 'string' ? this.#routes.get(id) : undefined;
      if (route) route.onError(errorFromSocketPayload(payload, 'stt.socket', this.#secrets));
      else if (typeof id !== 'string') {
        // A connection-level error (for example authentication): every operation fails.
        const err = errorFromSocketPayload(payload, 'stt.socket', this.#secrets);
        for (const r of [...this.#routes.values()]) r.onError(err);
      }
    });
    socket.on('disconnect', (reason: string) => {
      if (this.#socket === socket) this.#socket = undefined;
      const err = new TransportError('ERR_SOCKET_DISCONNECTED', `Socket.IO connection lost (${reason})`, {
        ambiguous: true,
      });
      for (const route of [...this.#routes.values()]) route.onDisconnect(err);
    });
  }

  /** Receive results and errors for `id`; returns the unsubscribe function. */
  route(id: string, route: Route): () => void {
    this.#routes.set(id, route);
    return () => {
      if (this.#routes.get(id) === route) this.#routes.delete(id);
    };
  }

  /**
   * Emit with an acknowledgement. Resolves with the ack; rejects on timeout (ambiguous: the
   * service may have acted), disconnect or abort.
   */
  async emitWithAck(
    operation: OperationName,
    event: string,
    payload: unknown,
    options: { timeoutMs: number; signal?: AbortSignal | undefined },
  ): Promise<FrameAck> {
    const socket = await this.connect(operation, options.signal);
    options.signal?.throwIfAborted();
    return new Promise<FrameAck>((resolve, reject) => {
      let settled = false;
      const finish = (fn: () => void) => {
        if (settled) return;
        settled = true;
        options.signal?.removeEventListener('abort', onAbort);
        socket.off('disconnect', onDisconnect);
        fn();
      };
      const onAbort = () => finish(() => reject(options.signal!.reason));
      const onDisconnect = () =>
        finish(() =>
          reject(
            new TransportError(
              'ERR_SOCKET_DISCONNECTED',
              `${operation}: connection lost before acknowledgement`,
              { operation, ambiguous: true },
            ),
          ),
        );
      options.signal?.addEventListener('abort', onAbort, { once: true });
      socket.once('disconnect', onDisconnect);
      socket.timeout(options.timeoutMs).emit(event, payload, (err: Error | null, ack: FrameAck) => {
        if (err) {
          finish(() =>
            reject(
              new TransportError(
                'ERR_TIMEOUT',
                `${operation}: no acknowledgement within ${options.timeoutMs} ms`,
                { operation, ambiguous: true },
              ),
            ),
          );
        } else finish(() => resolve(ack));
      });
    });
  }

  /** Emit without an acknowledgement (connects first). */
  async emit(operation: OperationName, event: string, payload: unknown, signal?: AbortSignal): Promise<void> {
    const socket = await this.connect(operation, signal);
    socket.emit(event, payload);
  }

  /** Turn a negative ack into a typed error. */
  ackError(ack: FrameAck, operation: OperationName): SpeechServiceError | undefined {
    if (ack && typeof ack === 'object' && ack.ok === true) return undefined;
    const error = ack && typeof ack === 'object' && 'error' in ack ? ack.error : ack;
    return errorFromSocketPayload(error, operation, this.#secrets);
  }

  close(): void {
    this.#closed = true;
    const err = new TransportError('ERR_CLIENT_CLOSED', 'the client was closed');
    const routes = [...this.#routes.values()];
    this.#routes.clear();
    for (const route of routes) route.onDisconnect(err);
    this.#socket?.disconnect();
    this.#socket = undefined;
    this.#opening?.disconnect();
  }
}
