// A live pseudo-session (realtime ASR or diarization) for one stream UUID. It keeps the
// session's state and nothing of the wire: its channel carries the frames (framed HTTP or
// Socket.IO), the client's retry policy runs each frame's attempts. `send()` resolves only when
// the service accepted the frame, and frames go out one at a time in call order; completion is
// only an observed record with `is_final: true`. A session is never resumed: failures end it,
// and a caller (sttStream) starts over with a fresh UUID.

import { EventEmitter } from 'node:events';
import {
  IncompleteStreamError,
  InvalidArgumentError,
  localServiceError,
  ProtocolError,
  SpeechServiceError,
} from '../protocol/errors.ts';
import {
  CLOSING_PCM_BYTES,
  encodeFrame,
  FRAME_FLAG_IS_FINAL,
  FRAME_HEADER_BYTES,
} from '../protocol/frame.ts';
import type { Language } from '../protocol/languages.ts';
import type { Limits } from '../protocol/limits.ts';
import type { OperationName } from '../protocol/operations.ts';
import { checkChoiceOption, checkNumberOption, MAX_TIMER_MS } from '../protocol/options.ts';
import { validateAsrRecord, validateDiarizationRecord } from '../protocol/records.ts';
import { idToBytes, randomUuid } from '../protocol/uuid.ts';
import type { Validation } from '../protocol/validate.ts';
import { type Admission, isAdmissionRejection } from './admission.ts';
import type { RetryPolicy } from './attempts.ts';
import { DEFAULT_DEADLINES } from './deadlines.ts';
import type { ChannelFactory, LiveChannel } from './live-channel.ts';
import type { LiveSessionEvents } from './live-events.ts';
import {
  LIVE_TRANSPORTS,
  type LiveKind,
  type LiveRecord,
  type LiveTransport,
  liveOperation,
  liveWorkload,
} from './live-types.ts';
import { anySignal, untilAborted } from './retry.ts';

export type { LiveKind, LiveRecord, LiveTransport } from './live-types.ts';

/**
 * Default wait for the final record once the final frame was accepted, counted again from each
 * record that arrives meanwhile (a service still working toward it is not silent).
 */
export const DEFAULT_LIVE_FINAL_MS = 30_000;

/** Default bound on ending a failed or aborted session at the service. */
export const DEFAULT_LIVE_END_MS = 5_000;

/**
 * Answers after which the service no longer holds the stream live (or will not take a frame
 * for it). Not 408 and 409: a 409 also answers a second start of a live id, and either may come
 * from something other than the stream's own state (a proxy, an injected fault); a closing
 * frame after them costs one request, answered 409 when the stream is indeed gone.
 */
const STREAM_GONE_STATUSES = new Set([401, 403, 422]);

/** Resending a frame refused with 429: after its Retry-After, else this backoff. */
const FRAME_RETRY_BACKOFF = { baseMs: 250, maxMs: 10_000 };

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
   * Longest wait for the `is_final` record once the final frame was accepted, counted again
   * from each record that comes meanwhile: past it the session fails with
   * `IncompleteStreamError` (a lost final record, a connection gone quiet). Time the consumer
   * holds off records (`pause()`, a full `records()` buffer) is not counted. Default the
   * client's `timeouts.liveFinalMs` (30 s).
   */
  finalTimeoutMs?: number;
  /**
   * Longest the session's opening may take: waiting again in the admission queue after
   * refusals, and its first frame's attempts (not the wait for a first slot in the client's own
   * queue). Default the client's `deadlines.liveStart` (120 s).
   */
  startDeadlineMs?: number;
  /**
   * A session that ends without its final record (abort, destroy, a failure) is ended at the
   * service, so it gives back its concurrency slot at once instead of after the service's
   * expiry: over Socket.IO its connection is closed (the service drops its streams); over HTTP
   * an exchange under way is aborted (the service cancels the stream) and a closing frame
   * (is_final, 20 ms of silence) is sent. This bounds that closing. Default 5 s.
   */
  endTimeoutMs?: number;
}

/**
 * What a {@link LiveSession} shares with its client.
 * @internal
 */
export interface LiveDeps {
  /** Opens the session's channel to the service. */
  channel: ChannelFactory;
  /** Runs each frame's attempts: a slot for the first, 429s sent again after Retry-After. */
  policy: RetryPolicy;
  /** Paused for a frame's admission-type 429 after the start (a per-key rate limit). */
  admission?: Pick<Admission, 'pause'>;
  limits: Pick<Limits, 'realtimeAsrFrameBytes' | 'realtimeDiarizationFrameBytes' | 'sessionExpirySec'>;
  /** Default Socket.IO acknowledgement wait. */
  socketAckTimeoutMs?: number;
  /** Default wait for the final record after the final frame (`finalTimeoutMs`). */
  liveFinalTimeoutMs?: number;
  /** Default `startDeadlineMs`. */
  startDeadlineMs?: number;
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

/** Bad options fail when the session is made (typed), not as another behaviour later. */
function checkSessionOptions(options: LiveSessionOptions): void {
  const caller = 'live session';
  checkChoiceOption(caller, 'transport', options.transport, LIVE_TRANSPORTS);
  checkNumberOption(caller, 'maxRateRetries', options.maxRateRetries, { integer: true, infinite: true });
  checkNumberOption(caller, 'highWaterMark', options.highWaterMark, { integer: true, min: 1 });
  for (const name of ['ackTimeoutMs', 'finalTimeoutMs', 'endTimeoutMs'] as const)
    checkNumberOption(caller, name, options[name], { above: true, max: MAX_TIMER_MS });
  checkNumberOption(caller, 'startDeadlineMs', options.startDeadlineMs, { above: true, infinite: true });
}

/**
 * Events: `record` (each record, in arrival order), `final` (the `is_final` record),
 * `error` (the session failed; also the rejection of `done`), `rate-limited` (a frame refused
 * with 429 SESSION_BYTE_RATE_EXCEEDED, sent again after its Retry-After).
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
   * answer saying the stream is gone (401, 403, 422, a lost connection), came since.
   */
  #serviceOpen = false;

  #state: LiveState = 'idle';
  readonly #deps: LiveDeps;
  readonly #channel: LiveChannel;
  readonly #idBytes: Buffer;
  readonly #operation: OperationName;
  readonly #options: Required<
    Pick<
      LiveSessionOptions,
      'maxRateRetries' | 'highWaterMark' | 'validate' | 'finalTimeoutMs' | 'endTimeoutMs' | 'startDeadlineMs'
    >
  >;
  /** Bounds the wait for the final record (see `finalTimeoutMs`). */
  #finalTimer: NodeJS.Timeout | undefined;
  /** The final frame was accepted: its final record is awaited (see `finalTimeoutMs`). */
  #awaitingFinal = false;
  readonly #abort = new AbortController();
  #resolveDone!: (record: LiveRecord<K>) => void;
  #rejectDone!: (err: unknown) => void;
  #error: unknown;
  /** Gives back the admission slot held for the session's lifetime. */
  #releaseSlot: (() => Promise<void>) | undefined;
  /** The last send() in call order; the next one starts when it settles. */
  #queue: Promise<void> = Promise.resolve();
  /** The listener on the caller's session signal, removed when the session ends. */
  #unlisten: (() => void)[] = [];
  #sentFinal = false;
  #sentFrames = 0;
  /** Frames in #transmit (queued behind the consumer, in the policy's backoff, or on the wire). */
  #transmitting = 0;
  #receivedRecords = 0;
  // Async iteration (opt-in via records()).
  #buffer: LiveRecord<K>[] | undefined;
  #wake: (() => void) | undefined;
  /** Waiters for the consumer (sends), woken together by #drained(). */
  #drainWaiters: (() => void)[] = [];
  /** The consumer asked for no more records for now (see pause()). */
  #paused = false;

  /**
   * Made by the client; use `client.live.stt()`, `diarization()` or `open()`.
   * @internal
   */
  constructor(kind: K, deps: LiveDeps, options: LiveSessionOptions = {}) {
    super();
    checkSessionOptions(options);
    this.kind = kind;
    this.#deps = deps;
    this.transport = options.transport ?? 'http';
    this.language = options.language ?? 'auto';
    this.id = (options.streamId ?? randomUuid()).toLowerCase();
    this.#idBytes = idToBytes(this.id);
    this.#operation = liveOperation(kind, this.transport);
    this.#options = {
      maxRateRetries: options.maxRateRetries ?? 20,
      highWaterMark: options.highWaterMark ?? 256,
      validate: options.validate ?? true,
      finalTimeoutMs: options.finalTimeoutMs ?? deps.liveFinalTimeoutMs ?? DEFAULT_LIVE_FINAL_MS,
      endTimeoutMs: options.endTimeoutMs ?? DEFAULT_LIVE_END_MS,
      startDeadlineMs: options.startDeadlineMs ?? deps.startDeadlineMs ?? DEFAULT_DEADLINES.liveStart,
    };
    this.#channel = deps.channel(
      kind,
      this.transport,
      {
        record: (value) => this.#deliver(value),
        failed: (err, gone) => {
          if (gone) this.#serviceOpen = false;
          this.#fail(err);
        },
      },
      {
        streamId: this.id,
        acks: options.socketAcks ?? true,
        ackTimeoutMs: options.ackTimeoutMs ?? deps.socketAckTimeoutMs ?? 30_000,
      },
    );
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
    if (this.#state === 'finished') throw this.#endedEarly();
    this.#checkSize(pcm);
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

  #checkSize(pcm: Uint8Array): void {
    const stt = this.kind === 'stt';
    const limit = stt
      ? this.#deps.limits.realtimeAsrFrameBytes
      : this.#deps.limits.realtimeDiarizationFrameBytes;
    const bytes = FRAME_HEADER_BYTES + pcm.length;
    if (bytes <= limit) return;
    throw localServiceError('PAYLOAD_TOO_LARGE', `frame of ${bytes} bytes exceeds ${limit}`, {
      data: {
        limit,
        observed: bytes,
        unit: 'bytes',
        bound: stt ? 'realtime_asr_frame_bytes' : 'realtime_diarization_frame_bytes',
      },
      operation: this.#operation,
    });
  }

  /**
   * One frame through the client's retry policy. The first takes an admission slot, kept for
   * the session's lifetime; an admission refusal of it waits in the queue. Any 429 means the
   * frame was not accepted (it consumed nothing) and the session stays live: the same frame
   * goes again after Retry-After, which is not a replay, unless the service marks the 429 not
   * retryable. Anything else fails the session.
   */
  async #transmit(frame: Buffer, first: boolean, signal: AbortSignal | undefined): Promise<void> {
    if (this.#error !== undefined) throw this.#error;
    if (this.#state === 'finished') throw this.#endedEarly();
    const workload = liveWorkload(this.kind);
    this.#transmitting++;
    try {
      await this.#waitForConsumer(signal);
      await this.#deps.policy.run({
        operation: this.#operation,
        ...(first ? { workload, deadline: this.#options.startDeadlineMs } : {}),
        signal: anySignal(signal, this.#abort.signal),
        // The client's close() aborts the session (see LiveDeps.sessions).
        signalFollowsClose: true,
        retry: { maxAttempts: this.#options.maxRateRetries + 1, ...FRAME_RETRY_BACKOFF },
        // A 429 the service marks not retryable (a quota spent) is not waited out, nor one whose
        // Retry-After outlasts the stream at the service (no audio for sessionExpirySec ends it).
        retryable: (err) =>
          err instanceof SpeechServiceError &&
          err.status === 429 &&
          err.retryable &&
          (err.retryAfterMs ?? 0) < this.#deps.limits.sessionExpirySec * 1000,
        onRetry: (err, delayMs) => {
          const refusal = err as SpeechServiceError;
          if (refusal.code === 'SESSION_BYTE_RATE_EXCEEDED') this.emit('rate-limited', refusal);
          else if (isAdmissionRejection(refusal)) this.#deps.admission?.pause(workload, delayMs, true);
        },
        run: async (attempt) => {
          if (first) {
            this.#releaseSlot = attempt.keepSlot();
            this.#serviceOpen = true;
          }
          try {
            await this.#channel.send(frame, attempt.signal);
          } catch (err) {
            // A refused start (429) opened nothing at the service.
            if (first && err instanceof SpeechServiceError && err.status === 429) this.#serviceOpen = false;
            throw err;
          }
          if (first) attempt.accepted();
        },
      });
      this.#sentFrames++;
      if ((frame[16]! & FRAME_FLAG_IS_FINAL) !== 0) {
        this.#awaitingFinal = true;
        this.#armFinalWait();
      }
    } catch (err) {
      // The final record came while the final frame was on its way (a service may send a
      // frame's records before its acknowledgement): it answers that frame, which was heard.
      if ((this.#state as LiveState) === 'finished' && (frame[16]! & FRAME_FLAG_IS_FINAL) !== 0) {
        this.#sentFrames++;
        return;
      }
      this.#fail(err);
      // A final record that came while the frame was on its way closed the channel under it.
      throw this.#error ?? this.#endedEarly();
    } finally {
      this.#transmitting--;
    }
  }

  /**
   * A frame after the service ended the stream with its final record, before the final frame:
   * the frame was not heard (or its records will not be), so the stream is incomplete for it.
   */
  #endedEarly(): IncompleteStreamError {
    return new IncompleteStreamError(
      `${this.#operation}: stream ${this.id} ended (its final record came) before the final frame; a frame sent after it was not transcribed`,
      { operation: this.#operation, id: this.id, received: this.#receivedRecords },
    );
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

  /**
   * Read no more records for now (a consumer of `record` events that cannot keep up): no
   * further response is read over HTTP, so the service's sending is held by TCP, and no frame
   * is sent. `resume()` goes on. Iterating with records() does this by itself.
   */
  pause(): void {
    this.#paused = true;
    this.#channel.pause();
    if (this.#awaitingFinal) this.#armFinalWait();
  }

  /** The channel reads records while the consumer takes them (see `highWaterMark`, `pause()`). */
  #flow(): void {
    if (this.#consumerFull) this.#channel.pause();
    else this.#channel.resume();
    if (this.#awaitingFinal) this.#armFinalWait();
  }

  /**
   * Read records again after {@link LiveSession.pause}, and wake sends waiting for the consumer.
   */
  resume(): void {
    this.#paused = false;
    this.#drained();
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
          { issues: check.issues },
        ),
      );
      return;
    }
    const record = value as LiveRecord<K>;
    if (record.id.toLowerCase() !== this.id) return; // not ours
    this.#receivedRecords++;
    if (this.#buffer) {
      this.#buffer.push(record);
      if (this.#buffer.length >= this.#options.highWaterMark) this.#channel.pause();
    }
    this.#wake?.();
    this.emit('record', record);
    if (record.is_final) this.#finish(record);
    else if (this.#awaitingFinal) this.#armFinalWait();
  }

  /** The consumer holds as many records as it wants (or paused): hold off sending. */
  get #consumerFull(): boolean {
    return this.#paused || (this.#buffer !== undefined && this.#buffer.length >= this.#options.highWaterMark);
  }

  /** `signal`: a send's, which ends its wait as it ends the wait for a slot. */
  async #waitForConsumer(signal?: AbortSignal): Promise<void> {
    while (this.#consumerFull && this.#error === undefined && this.#state !== 'finished') {
      const drained = new Promise<void>((resolve) => this.#drainWaiters.push(resolve));
      await untilAborted(drained, anySignal(signal, this.#abort.signal));
    }
  }

  #drained(): void {
    this.#flow();
    for (const wake of this.#drainWaiters.splice(0)) wake();
  }

  /**
   * The final frame was accepted, or a record came since: the final record must come within
   * `finalTimeoutMs`.
   */
  #armFinalWait(): void {
    if (this.#state === 'finished' || this.#error !== undefined) return;
    clearTimeout(this.#finalTimer);
    this.#finalTimer = undefined;
    // While the consumer holds off records, the channel reads none: the silence is ours, not
    // the service's, and the wait starts again once the consumer takes records.
    if (this.#consumerFull) return;
    const ms = this.#options.finalTimeoutMs;
    this.#finalTimer = setTimeout(() => {
      this.#finalTimer = undefined;
      this.#fail(
        new IncompleteStreamError(
          `${this.#operation}: no record with is_final: true for stream ${this.id} within ${ms} ms of the final frame or the last record`,
          { operation: this.#operation, id: this.id, received: this.#receivedRecords },
        ),
      );
    }, ms);
  }

  #finish(record: LiveRecord<K>): void {
    this.#state = 'finished';
    this.#serviceOpen = false;
    // A frame still under way (waiting out a 429's Retry-After, say) will not be heard: it ends
    // now, not when its wait is over, which would hold the session's end as long.
    if (this.#transmitting > 0) this.#abort.abort(this.#endedEarly());
    this.#cleanup();
    this.#wake?.();
    this.#drained();
    this.emit('final', record);
    this.#resolveDone(record);
  }

  #fail(err: unknown): void {
    if (this.#error !== undefined || this.#state === 'finished') return;
    this.#error = err instanceof IncompleteStreamError && err.id === undefined ? this.#withId(err) : err;
    this.#state = 'failed';
    if (err instanceof SpeechServiceError && STREAM_GONE_STATUSES.has(err.status)) this.#serviceOpen = false;
    this.#abort.abort(this.#error);
    this.#cleanup();
    this.#wake?.();
    this.#drained();
    this.#rejectDone(this.#error);
    if (this.listenerCount('error') > 0) this.emit('error', this.#error);
  }

  /** A channel's IncompleteStreamError, said of this stream. */
  #withId(err: IncompleteStreamError): IncompleteStreamError {
    return new IncompleteStreamError(`${err.message} (stream ${this.id})`, {
      operation: this.#operation,
      id: this.id,
      received: this.#receivedRecords,
      cause: err.cause,
    });
  }

  #cleanup(): void {
    clearTimeout(this.#finalTimer);
    this.#finalTimer = undefined;
    this.#deps.sessions?.delete(this);
    for (const unlisten of this.#unlisten.splice(0)) unlisten();
    // The slot is the service's too: it is given back once the stream is over there.
    const release = this.#releaseSlot;
    this.#releaseSlot = undefined;
    if (!this.#serviceOpen) {
      this.#channel.close();
      // A send under way may hold a slot its first attempt was granted as the session ended,
      // which the retry policy gives back as the send settles.
      void Promise.all([release?.(), this.#queue]).then(() => this.#resolveEnded());
      return;
    }
    this.#serviceOpen = false;
    const closing = encodeFrame({
      streamId: this.#idBytes,
      isFinal: true,
      language: this.language,
      pcm: Buffer.alloc(CLOSING_PCM_BYTES),
    });
    const ending = this.#channel.cancel(closing, this.#options.endTimeoutMs);
    const { ending: tracked } = this.#deps;
    tracked?.add(ending);
    void ending.then(async () => {
      tracked?.delete(ending);
      await release?.();
      this.#resolveEnded();
    });
  }
}
