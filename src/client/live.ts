// A live pseudo-session (realtime ASR or diarization) for one stream UUID, over framed HTTP
// (one POST per frame, serialized per stream) or Socket.IO (one emit per frame, acknowledged).
// `send()` resolves only when the service accepted the frame, and frames go out one at a time in
// call order; completion is only an observed record with `is_final: true`. A session is never
// resumed: failures end it, and a caller (sttStream) starts over with a fresh UUID.

import { EventEmitter } from 'node:events';
import {
  IncompleteStreamError,
  InvalidArgumentError,
  localServiceError,
  ProtocolError,
  SpeechServiceError,
} from '../protocol/errors.ts';
import { encodeFrame, FRAME_HEADER_BYTES } from '../protocol/frame.ts';
import { REALTIME_OPERATIONS, realtimePath } from '../protocol/http-paths.ts';
import type { Language } from '../protocol/languages.ts';
import type { Limits } from '../protocol/limits.ts';
import { NdjsonDecoder } from '../protocol/ndjson.ts';
import type { OperationName } from '../protocol/operations.ts';
import {
  type AsrRecord,
  type DiarizationRecord,
  validateAsrRecord,
  validateDiarizationRecord,
} from '../protocol/records.ts';
import { idToBytes, randomUuid } from '../protocol/uuid.ts';
import type { Validation } from '../protocol/validate.ts';
import { type Admission, isAdmissionRejection, type Slot } from './admission.ts';
import { decoded, type HttpTransport } from './http.ts';
import type { LiveSessionEvents } from './live-events.ts';
import { backoffDelay, sleep, untilAborted } from './retry.ts';
import type { SocketTransport } from './socket.ts';

/** Default wait for the final record once the final frame was accepted. */
export const DEFAULT_LIVE_FINAL_MS = 60_000;

/** Default bound on ending a failed or aborted session at the service. */
export const DEFAULT_LIVE_END_MS = 5_000;

/**
 * Answers after which the service no longer holds the stream live (or will not take a frame
 * for it). Not 408 and 409: a 409 also answers a second start of a live id, and either may come
 * from something other than the stream's own state (a proxy, an injected fault); a closing
 * frame after them costs one request, answered 409 when the stream is indeed gone.
 */
const STREAM_GONE_STATUSES = new Set([401, 403, 422]);

/** A live session's service: `stt` (realtime ASR) or `diarization`. */
export type LiveKind = 'stt' | 'diarization';
/** How a live session talks to the service: HTTP requests, one per frame, or Socket.IO. */
export type LiveTransport = 'http' | 'socketio';
/**
 * The record type of a live session of kind `K`: ASR records for `stt`, diarization records otherwise.
 */
export type LiveRecord<K extends LiveKind> = K extends 'stt' ? AsrRecord : DiarizationRecord;

/** Options of a live session (`client.live.stt()`, `diarization()`, `open()`). */
export interface LiveSessionOptions {
  /** Default `http`. */
  transport?: LiveTransport;
  /** Default `auto`. */
  language?: Language;
  /** The stream UUID; a fresh one by default. */
  streamId?: string;
  /** Aborts the session (as {@link LiveSession.abort} with the signal's reason). */
  signal?: AbortSignal;
  /**
   * Times a frame is sent again after a 429 (a frame refused with 429 was not accepted; the
   * session stays live). Default 20.
   */
  maxRateRetries?: number;
  /** Records held for the async iterator before `send()` waits for the consumer. Default 256. */
  highWaterMark?: number;
  /** Socket.IO: wait for the service to acknowledge each frame (backpressure). Default true. */
  socketAcks?: boolean;
  /** Socket.IO acknowledgement wait. Default the client's `timeouts.socketAckMs` (30 s). */
  ackTimeoutMs?: number;
  /** Validate each record against the interface's shape (a bad one fails the session). Default true. */
  validate?: boolean;
  /**
   * Longest wait for the `is_final` record once the final frame was accepted: past it the
   * session fails with `IncompleteStreamError` (a lost final record, a connection that went
   * quiet). Default the client's `timeouts.liveFinalMs` (60 s).
   */
  finalTimeoutMs?: number;
  /**
   * A session that ends without its final record (abort, destroy, a failure) is ended at the
   * service, so it gives back its concurrency slot at once instead of after the service's
   * expiry: an in-flight HTTP exchange is aborted (the service cancels the stream), otherwise a
   * closing frame (is_final, 20 ms of silence) is sent. This bounds that closing exchange.
   * Default 5 s.
   */
  endTimeoutMs?: number;
}

/**
 * What a {@link LiveSession} shares with its client.
 * @internal
 */
export interface LiveDeps {
  http: HttpTransport;
  socket: SocketTransport;
  admission: Admission;
  realtimePrefix: string;
  limits: Pick<Limits, 'realtimeAsrFrameBytes' | 'realtimeDiarizationFrameBytes'>;
  /** Default Socket.IO acknowledgement wait. */
  socketAckTimeoutMs?: number;
  /** Default wait for the final record after the final frame (`finalTimeoutMs`). */
  liveFinalTimeoutMs?: number;
  /** Aborted when the client closes: a session used after it fails with its reason. */
  closed?: AbortSignal;
  /** Sessions being ended at the service (see `endTimeoutMs`), which close() waits for. */
  ending?: Set<Promise<void>>;
  /**
   * The client's sessions in use (sending or iterated), which its close() fails: a session
   * joins on first use and leaves when it ends, so the client keeps no session it does not need
   * (and adds no listener per session to a client-wide signal).
   */
  sessions?: Set<LiveSession>;
}

/**
 * Where a live session is: `idle` (no `send()` yet), `live` (after the first), `finishing` (after
 * the one with `final`), `finished` (the final record received) or `failed` (failed or aborted).
 */
export type LiveState = 'idle' | 'live' | 'finishing' | 'finished' | 'failed';

/** Options of {@link LiveSession.send}. */
export interface SendOptions {
  /** This frame is the last one carrying audio (sets is_final). */
  final?: boolean;
  /**
   * Aborts this send: its wait for a slot and for the chunk's acceptance. Once the send has
   * settled, the signal no longer matters to the session.
   */
  signal?: AbortSignal;
}

/**
 * Events: `record` (each record, in arrival order), `final` (the `is_final` record),
 * `error` (the session failed; also the rejection of `done`).
 */
export class LiveSession<K extends LiveKind = LiveKind> extends EventEmitter<LiveSessionEvents<K>> {
  /** `stt` or `diarization`. */
  readonly kind: K;
  /** HTTP or Socket.IO (`LiveSessionOptions.transport`). */
  readonly transport: LiveTransport;
  /** The stream UUID, lowercase. */
  readonly id: string;
  /** The session's language (`LiveSessionOptions.language`, default `auto`). */
  readonly language: Language;
  /** Resolves with the `is_final` record; rejects when the session fails or is aborted. */
  readonly done: Promise<LiveRecord<K>>;
  /**
   * Resolves once the session is over at the service too: at once after the final record;
   * after a failure or abort, once it was ended there (see `endTimeoutMs`). Never rejects.
   * Its admission slot is held until then, so a next session is not refused for it.
   */
  readonly ended: Promise<void>;
  #resolveEnded!: () => void;
  /**
   * The service may hold the stream live: its start frame went out, and no final record, nor an
   * answer saying the stream is gone (401, 403, 422, a lost Socket.IO connection), came since.
   */
  #serviceOpen = false;

  #state: LiveState = 'idle';
  readonly #deps: LiveDeps;
  readonly #idBytes: Buffer;
  readonly #operation: OperationName;
  readonly #options: Required<
    Pick<
      LiveSessionOptions,
      | 'maxRateRetries'
      | 'highWaterMark'
      | 'socketAcks'
      | 'ackTimeoutMs'
      | 'validate'
      | 'finalTimeoutMs'
      | 'endTimeoutMs'
    >
  >;
  /** Bounds the wait for the final record (see `finalTimeoutMs`). */
  #finalTimer: NodeJS.Timeout | undefined;
  readonly #abort = new AbortController();
  #resolveDone!: (record: LiveRecord<K>) => void;
  #rejectDone!: (err: unknown) => void;
  #error: unknown;
  #slot: Slot | undefined;
  /** The previous HTTP exchange, whose response must end before the next frame is sent. */
  #previous: Promise<void> = Promise.resolve();
  /** The last send() in call order; the next one starts when it settles. */
  #queue: Promise<void> = Promise.resolve();
  /** The listener on the caller's session signal, removed when the session ends. */
  #unlisten: (() => void)[] = [];
  #sentFinal = false;
  #sentFrames = 0;
  #receivedRecords = 0;
  #unroute: (() => void) | undefined;
  // Async iteration (opt-in via records()).
  #buffer: LiveRecord<K>[] | undefined;
  #wake: (() => void) | undefined;
  /** Waiters for the consumer (sends and response reads), woken together by #drained(). */
  #drainWaiters: (() => void)[] = [];
  /** The consumer asked for no more records for now (see pause()). */
  #paused = false;

  /**
   * Made by the client; use `client.live.stt()`, `diarization()` or `open()`.
   * @internal
   */
  constructor(kind: K, deps: LiveDeps, options: LiveSessionOptions = {}) {
    super();
    this.kind = kind;
    this.#deps = deps;
    this.transport = options.transport ?? 'http';
    this.language = options.language ?? 'auto';
    this.id = (options.streamId ?? randomUuid()).toLowerCase();
    this.#idBytes = idToBytes(this.id);
    this.#operation = `${kind}.${this.transport === 'http' ? 'http' : 'socket'}` as OperationName;
    this.#options = {
      maxRateRetries: options.maxRateRetries ?? 20,
      highWaterMark: options.highWaterMark ?? 256,
      socketAcks: options.socketAcks ?? true,
      ackTimeoutMs: options.ackTimeoutMs ?? deps.socketAckTimeoutMs ?? 30_000,
      validate: options.validate ?? true,
      finalTimeoutMs: options.finalTimeoutMs ?? deps.liveFinalTimeoutMs ?? DEFAULT_LIVE_FINAL_MS,
      endTimeoutMs: options.endTimeoutMs ?? DEFAULT_LIVE_END_MS,
    };
    this.ended = new Promise((resolve) => (this.#resolveEnded = resolve));
    this.done = new Promise((resolve, reject) => {
      this.#resolveDone = resolve;
      this.#rejectDone = reject;
    });
    this.done.catch(() => {}); // observed through events or awaited by the caller
    const { signal } = options;
    if (deps.closed?.aborted) this.abort(deps.closed.reason);
    else if (signal?.aborted) this.abort(signal.reason);
    else if (signal) {
      const onAbort = () => this.abort(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      this.#unlisten.push(() => signal.removeEventListener('abort', onAbort));
    }
  }

  /** Join the client's sessions in use (see LiveDeps.sessions), or fail if it has closed. */
  #inUse(): void {
    const { closed, sessions } = this.#deps;
    if (this.#state === 'finished' || this.#error !== undefined) return;
    if (closed?.aborted) this.abort(closed.reason);
    else sessions?.add(this);
  }

  /** Where the session is now. */
  get state(): LiveState {
    return this.#state;
  }

  /** Frames accepted so far. */
  get framesSent(): number {
    return this.#sentFrames;
  }

  /**
   * Send one chunk of PCM16LE 16 kHz mono (nonempty, even). Resolves when the service accepted
   * it; the first chunk opens the session (waiting for an admission slot), `final` closes it.
   * Chunks go out one at a time in call order, so send() need not be awaited before the next.
   * An invalid chunk is refused (typed) and leaves the session as it was.
   */
  async send(pcm: Uint8Array, options: SendOptions = {}): Promise<void> {
    this.#inUse();
    if (this.#error !== undefined) throw this.#error;
    if (this.#sentFinal) throw new InvalidArgumentError('send() after the final frame');
    const limit =
      this.kind === 'stt'
        ? this.#deps.limits.realtimeAsrFrameBytes
        : this.#deps.limits.realtimeDiarizationFrameBytes;
    if (FRAME_HEADER_BYTES + pcm.length > limit) {
      throw localServiceError(
        'PAYLOAD_TOO_LARGE',
        `frame of ${FRAME_HEADER_BYTES + pcm.length} bytes exceeds ${limit}`,
        {
          data: {
            limit,
            observed: FRAME_HEADER_BYTES + pcm.length,
            unit: 'bytes',
            bound: this.kind === 'stt' ? 'realtime_asr_frame_bytes' : 'realtime_diarization_frame_bytes',
          },
          operation: this.#operation,
        },
      );
    }
    // Encoding validates the chunk: it comes before any change of state. Up to the queueing
    // below nothing awaits, so concurrent calls take `first` and `final` in call order.
    const first = this.#state === 'idle';
    const frame = encodeFrame({
      streamId: this.#idBytes,
      isStart: first,
      isFinal: options.final === true,
      language: this.language,
      pcm,
    });
    if (first) this.#state = 'live';
    if (options.final) {
      this.#sentFinal = true;
      this.#state = 'finishing';
    }
    const sent = this.#queue.then(() => this.#transmit(frame, first, options.signal));
    this.#queue = sent.catch(() => {});
    return sent;
  }

  async #transmit(frame: Buffer, first: boolean, signal: AbortSignal | undefined): Promise<void> {
    if (this.#error !== undefined) throw this.#error;
    try {
      await this.#waitForConsumer(signal);
      if (first) await this.#open(frame, signal);
      else await this.#sendFrame(frame, signal);
      this.#sentFrames++;
      if ((frame[16]! & 0b10) !== 0) this.#awaitFinal();
    } catch (err) {
      this.#fail(err);
      throw this.#error;
    }
  }

  /**
   * An async iterator over records from now on (call it before sending, or use `record`
   * events). While it holds `highWaterMark` unread records, `send()` waits.
   */
  records(): AsyncIterableIterator<LiveRecord<K>> {
    this.#inUse();
    this.#buffer ??= [];
    const next = async (): Promise<IteratorResult<LiveRecord<K>>> => {
      while (true) {
        const buffer = this.#buffer!;
        if (buffer.length > 0) {
          const value = buffer.shift()!;
          if (buffer.length < this.#options.highWaterMark) this.#drained();
          return { value, done: false };
        }
        if (this.#error !== undefined) throw this.#error;
        if (this.#state === 'finished') return { value: undefined, done: true };
        await new Promise<void>((resolve) => (this.#wake = resolve));
      }
    };
    const iterator: AsyncIterableIterator<LiveRecord<K>> = {
      next,
      return: async () => {
        this.#buffer = undefined;
        this.#drained();
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  /** The records from now on, as {@link LiveSession.records}: `for await (const r of session)`. */
  [Symbol.asyncIterator](): AsyncIterableIterator<LiveRecord<K>> {
    return this.records();
  }

  /** Stop now: cancels what is in flight (the service cancels the session), releases the slot. */
  abort(reason: unknown = new DOMException('The live session was aborted', 'AbortError')): void {
    if (this.#state === 'finished' || this.#state === 'failed') return;
    this.#abort.abort(reason);
    this.#fail(reason);
  }

  // --- opening and admission -------------------------------------------------------------

  get #workload(): 'realtime_asr' | 'diarization' {
    return this.kind === 'stt' ? 'realtime_asr' : 'diarization';
  }

  async #open(frame: Buffer, signal?: AbortSignal): Promise<void> {
    if (this.transport === 'socketio') this.#routeSocket();
    for (let attempt = 0; ; attempt++) {
      const slot = await this.#acquire(attempt, signal);
      if (this.#error !== undefined) {
        // Aborted as the slot came: the session's cleanup has run, and would not release it.
        slot.release();
        throw this.#error;
      }
      this.#slot = slot;
      try {
        this.#serviceOpen = true;
        await this.#sendFrame(frame, signal, true);
        this.#slot?.succeeded(); // undefined if the session failed meanwhile
        return;
      } catch (err) {
        if (!isAdmissionRejection(err) || attempt >= 100) throw err;
        // Nothing was consumed and the id is not live: wait in the queue, then start again.
        this.#serviceOpen = false;
        slot.rejected(err, attempt);
        slot.release();
        this.#slot = undefined;
      }
    }
  }

  /** A slot for the session's lifetime (see #scoped: the send's signal only ends the wait). */
  #acquire(attempt: number, signal?: AbortSignal) {
    return this.#scoped(signal, (scoped) =>
      this.#deps.admission.acquire(this.#workload, { signal: scoped, retrying: attempt > 0 }),
    );
  }

  /**
   * Run `fn` with a signal that the session's abort ends, and the send's `signal` only while
   * `fn` runs. What outlives a send, the slot held for the session and the response read in the
   * background, belongs to the session: a send's signal aborting later (a timeout, say) must not
   * release the slot while the session goes on, nor cut the records of an accepted frame.
   */
  async #scoped<T>(signal: AbortSignal | undefined, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (!signal) return fn(this.#abort.signal);
    const scope = new AbortController();
    const stop = () => scope.abort(signal.reason);
    if (signal.aborted) stop();
    else signal.addEventListener('abort', stop, { once: true });
    try {
      return await fn(AbortSignal.any([this.#abort.signal, scope.signal]));
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }

  #signal(extra?: AbortSignal): AbortSignal {
    return extra ? AbortSignal.any([extra, this.#abort.signal]) : this.#abort.signal;
  }

  // --- frames ------------------------------------------------------------------------------

  /** `opening`: the start frame, whose admission 429s go back to the queue (see #open). */
  async #sendFrame(frame: Buffer, signal?: AbortSignal, opening = false): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        if (this.transport === 'http') await this.#postFrame(frame, signal);
        else await this.#emitFrame(frame, signal);
        return;
      } catch (err) {
        if (!(err instanceof SpeechServiceError) || err.status !== 429) throw err;
        if ((opening && isAdmissionRejection(err)) || attempt >= this.#options.maxRateRetries) throw err;
        // Any 429 means the frame was not accepted (it consumed nothing) and the session stays
        // live: send the same frame after Retry-After. That is not a replay.
        const delay = backoffDelay(attempt, { baseMs: 250, maxMs: 10_000 }, err.retryAfterMs);
        if (err.code === 'SESSION_BYTE_RATE_EXCEEDED') this.emit('rate-limited', err);
        else if (isAdmissionRejection(err)) this.#deps.admission.pause(this.#workload, delay, true);
        await sleep(delay, this.#signal(signal));
      }
    }
  }

  async #postFrame(frame: Buffer, signal?: AbortSignal): Promise<void> {
    // One exchange at a time per stream: records arrive in order, and diarization requires it.
    // The previous answer may be read slowly, or wait for a full consumer: the send's signal
    // ends this wait as it ends the others.
    await untilAborted(this.#previous, signal);
    if (this.#error !== undefined) throw this.#error;
    const op = this.kind === 'stt' ? REALTIME_OPERATIONS.sttStream : REALTIME_OPERATIONS.diarizationStream;
    const isFinal = (frame[16]! & 0b10) !== 0;
    const res = await this.#scoped(signal, (scoped) =>
      this.#deps.http.send({
        operation: this.#operation,
        method: 'POST',
        path: realtimePath(this.#deps.realtimePrefix, op),
        headers: { 'content-type': 'application/octet-stream', accept: 'application/x-ndjson' },
        body: frame,
        signal: scoped,
      }),
    );
    if (res.status !== 200) {
      throw await this.#deps.http.errorOf(res, this.#operation);
    }
    // Accepted. The response's records are read in the background; the next frame waits.
    this.#previous = this.#readRecords(res.body, isFinal);
  }

  async #readRecords(
    body: AsyncIterable<unknown> & { destroy(err?: Error): void },
    isFinalFrame: boolean,
  ): Promise<void> {
    const decoder = new NdjsonDecoder();
    try {
      for await (const chunk of body) {
        for (const value of decoded((out) => decoder.push(chunk as Buffer, out))) this.#deliver(value);
        // Backpressure: the next chunk is read only when the consumer takes records again.
        await this.#waitForConsumer();
        if (this.#state === 'finished' || this.#error !== undefined) {
          body.destroy();
          return;
        }
      }
      for (const value of decoded((out) => decoder.end(out))) this.#deliver(value);
    } catch (err) {
      if (this.#error !== undefined || this.#state === 'finished') return;
      this.#fail(
        err instanceof ProtocolError && err.code !== 'ERR_NDJSON_TRUNCATED'
          ? err
          : new IncompleteStreamError(
              `${this.#operation}: response for stream ${this.id} broke off (${(err as Error).message})`,
              {
                operation: this.#operation,
                id: this.id,
                received: this.#receivedRecords,
                cause: err,
              },
            ),
      );
      return;
    }
    if (isFinalFrame && this.#state !== 'finished' && this.#error === undefined) {
      // The request's final bit and the end of a response are not completion.
      this.#fail(
        new IncompleteStreamError(
          `${this.#operation}: stream ${this.id} ended without a record with is_final: true`,
          {
            operation: this.#operation,
            id: this.id,
            received: this.#receivedRecords,
          },
        ),
      );
    }
  }

  #routeSocket(): void {
    const resultEvent =
      this.kind === 'stt'
        ? this.#deps.socket.events.transcriptionResult
        : this.#deps.socket.events.diarizationResult;
    this.#unroute = this.#deps.socket.route(this.id, {
      operation: this.#operation,
      onResult: (event, payload) => {
        if (event === resultEvent) this.#deliver(payload);
      },
      onError: (err) => this.#fail(err),
      onDisconnect: (err) => {
        // The service drops a connection's streams with it.
        this.#serviceOpen = false;
        this.#fail(
          this.#receivedRecords > 0 || this.#sentFrames > 0
            ? new IncompleteStreamError(`${this.#operation}: connection lost during stream ${this.id}`, {
                operation: this.#operation,
                id: this.id,
                received: this.#receivedRecords,
                cause: err,
              })
            : err,
        );
      },
    });
  }

  async #emitFrame(frame: Buffer, signal?: AbortSignal): Promise<void> {
    const event =
      this.kind === 'stt' ? this.#deps.socket.events.audioStream : this.#deps.socket.events.diarizationStream;
    if (!this.#options.socketAcks) {
      await this.#deps.socket.emit(this.#operation, event, frame, this.#signal(signal));
      return;
    }
    const ack = await this.#deps.socket.emitWithAck(this.#operation, event, frame, {
      timeoutMs: this.#options.ackTimeoutMs,
      signal: this.#signal(signal),
    });
    const err = this.#deps.socket.ackError(ack, this.#operation);
    if (err) throw err;
  }

  // --- records -------------------------------------------------------------------------------

  #deliver(value: unknown): void {
    if (this.#state === 'finished' || this.#error !== undefined) return;
    const check: Validation<unknown> = this.#options.validate
      ? this.kind === 'stt'
        ? validateAsrRecord(value)
        : validateDiarizationRecord(value)
      : { ok: true, value };
    if (!check.ok) {
      this.#fail(
        new ProtocolError(
          'ERR_INVALID_RECORD',
          `${this.#operation}: invalid record: ${check.issues.map((i) => `${i.path} ${i.message}`).join('; ')}`,
          {
            issues: check.issues,
          },
        ),
      );
      return;
    }
    const record = value as LiveRecord<K>;
    if (record.id.toLowerCase() !== this.id) return; // not ours (shared socket)
    this.#receivedRecords++;
    this.#buffer?.push(record);
    this.#wake?.();
    this.emit('record', record);
    if (record.is_final) this.#finish(record);
  }

  /** The consumer holds as many records as it wants (or paused): hold off sending and reading. */
  get #consumerFull(): boolean {
    return this.#paused || (this.#buffer !== undefined && this.#buffer.length >= this.#options.highWaterMark);
  }

  /** `signal`: a send's, which ends its wait as it ends the wait for a slot. */
  async #waitForConsumer(signal?: AbortSignal): Promise<void> {
    while (this.#consumerFull && this.#error === undefined && this.#state !== 'finished') {
      await untilAborted(new Promise<void>((resolve) => this.#drainWaiters.push(resolve)), signal);
    }
  }

  #drained(): void {
    for (const wake of this.#drainWaiters.splice(0)) wake();
  }

  /**
   * Read no more records for now (a consumer of `record` events that cannot keep up): no
   * further response is read over HTTP, so the service's sending is held by TCP, and no frame
   * is sent. `resume()` goes on. Iterating with records() does this by itself.
   */
  pause(): void {
    this.#paused = true;
  }

  /**
   * Read records again after {@link LiveSession.pause}, and wake sends waiting for the consumer.
   */
  resume(): void {
    this.#paused = false;
    this.#drained();
  }

  /** The final frame was accepted: the final record must come within `finalTimeoutMs`. */
  #awaitFinal(): void {
    if (this.#state === 'finished' || this.#error !== undefined) return;
    const ms = this.#options.finalTimeoutMs;
    this.#finalTimer = setTimeout(() => {
      this.#finalTimer = undefined;
      this.#fail(
        new IncompleteStreamError(
          `${this.#operation}: no record with is_final: true for stream ${this.id} within ${ms} ms of the final frame`,
          { operation: this.#operation, id: this.id, received: this.#receivedRecords },
        ),
      );
    }, ms);
  }

  #finish(record: LiveRecord<K>): void {
    this.#state = 'finished';
    this.#serviceOpen = false;
    this.#cleanup();
    this.#wake?.();
    this.#drained();
    this.emit('final', record);
    this.#resolveDone(record);
  }

  #fail(err: unknown): void {
    if (this.#error !== undefined || this.#state === 'finished') return;
    this.#error = err;
    this.#state = 'failed';
    if (err instanceof SpeechServiceError && STREAM_GONE_STATUSES.has(err.status)) this.#serviceOpen = false;
    this.#abort.abort(err);
    this.#cleanup();
    this.#wake?.();
    this.#drained();
    this.#rejectDone(err);
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }

  #cleanup(): void {
    clearTimeout(this.#finalTimer);
    this.#finalTimer = undefined;
    this.#deps.sessions?.delete(this);
    for (const unlisten of this.#unlisten.splice(0)) unlisten();
    this.#unroute?.();
    this.#unroute = undefined;
    // The slot is the service's too: it is given back once the stream is over there.
    const slot = this.#slot;
    this.#slot = undefined;
    if (!this.#serviceOpen) {
      slot?.release();
      this.#resolveEnded();
      return;
    }
    const ending = this.#endAtService();
    const { ending: tracked } = this.#deps;
    tracked?.add(ending);
    void ending.then(async () => {
      tracked?.delete(ending);
      slot?.release();
      await slot?.freed;
      this.#resolveEnded();
    });
  }

  /**
   * End the stream at the service if it may still be live there (see `endTimeoutMs`), with a
   * closing frame. An exchange that was under way was aborted with the session, which cancels
   * the stream if the service had not answered it yet; if it had, the stream is still live. The
   * closing frame settles both: accepted, the stream finishes; 409, it was gone already.
   */
  async #endAtService(): Promise<void> {
    this.#serviceOpen = false;
    const frame = encodeFrame({
      streamId: this.#idBytes,
      isStart: false,
      isFinal: true,
      language: this.language,
      pcm: Buffer.alloc(CLOSING_PCM_BYTES),
    });
    const ctl = new AbortController();
    const timer = setTimeout(
      () => ctl.abort(new Error('ending the session took too long')),
      this.#options.endTimeoutMs,
    );
    try {
      if (this.transport === 'http') {
        const op =
          this.kind === 'stt' ? REALTIME_OPERATIONS.sttStream : REALTIME_OPERATIONS.diarizationStream;
        for (let attempt = 0; ; attempt++) {
          let retryAfterMs: number | undefined;
          try {
            const res = await this.#deps.http.send({
              operation: this.#operation,
              method: 'POST',
              path: realtimePath(this.#deps.realtimePrefix, op),
              headers: { 'content-type': 'application/octet-stream', accept: 'application/x-ndjson' },
              body: frame,
              signal: ctl.signal,
            });
            // Accepted: the stream is finishing (its answer is read and dropped); 409: it was
            // gone already. A 429 (the aborted exchange still counted as in flight) or a 5xx
            // left it live: tried again until the deadline.
            if (res.status < 500 && res.status !== 429) {
              await res.body.dump({ limit: 64 * 1024, signal: ctl.signal });
              break;
            }
            retryAfterMs = (await this.#deps.http.errorOf(res, this.#operation)).retryAfterMs;
          } catch (err) {
            if (ctl.signal.aborted) throw err;
          }
          await sleep(backoffDelay(attempt, { baseMs: 50, maxMs: 1000 }, retryAfterMs), ctl.signal);
        }
      } else {
        const { socket } = this.#deps;
        const event = this.kind === 'stt' ? socket.events.audioStream : socket.events.diarizationStream;
        // As over HTTP: a 429 or a 5xx left the stream live, so the frame goes again until the
        // deadline. A lost connection ended the stream (the service drops a connection's).
        for (let attempt = 0; socket.connected; attempt++) {
          const ack = await socket.emitWithAck(this.#operation, event, frame, {
            timeoutMs: this.#options.endTimeoutMs,
            signal: ctl.signal,
          });
          const refused = socket.ackError(ack, this.#operation);
          if (!refused || (refused.status < 500 && refused.status !== 429)) break;
          await sleep(backoffDelay(attempt, { baseMs: 50, maxMs: 1000 }, refused.retryAfterMs), ctl.signal);
        }
      }
    } catch {
      // Best effort: the service's own expiry ends what could not be ended here.
    } finally {
      clearTimeout(timer);
    }
  }
}

/** 20 ms of silence: the closing frame must carry audio (an empty terminator is invalid). */
const CLOSING_PCM_BYTES = 640;

/** PCM bytes carried by an encoded live frame. */
export function framePcmBytes(frame: Uint8Array): number {
  return Math.max(0, frame.length - FRAME_HEADER_BYTES);
}
