// createClient(): one object that performs every operation of the service over HTTP and
// Socket.IO, sharing one keep-alive dispatcher, one Socket.IO connection and one admission
// controller. `close()` releases them all.

import type { Dispatcher } from 'undici';
import { type ConfigOptions, resolveConfig, type ServiceConfig } from '../protocol/config.ts';
import { TransportError } from '../protocol/errors.ts';
import { REALTIME_OPERATIONS, realtimePath } from '../protocol/http-paths.ts';
import {
  type LimitOverrides,
  type Limits,
  resolveLimits,
  type Tier,
  type Workload,
} from '../protocol/limits.ts';
import { checkChoiceOption, checkNumberOption, MAX_TIMER_MS, type NumberRule } from '../protocol/options.ts';
import { resolveSocketEvents, type SocketEventNames } from '../protocol/socket-events.ts';
import {
  Admission,
  type AdmissionOptions,
  type AdmissionRejection,
  type WorkloadStats,
} from './admission.ts';
import { RetryPolicy } from './attempts.ts';
import { type AmbiguousSubmitPolicy, BatchApi } from './batch.ts';
import { DEFAULT_DEADLINES, type OperationDeadlines } from './deadlines.ts';
import { FastApi } from './fast.ts';
import { type HttpTimeouts, HttpTransport } from './http.ts';
import { type LiveKind, LiveSession, type LiveSessionOptions } from './live.ts';
import type { ChannelFactory } from './live-channel.ts';
import { HttpLiveChannel } from './live-http.ts';
import { SocketLiveChannel } from './live-socket.ts';
import { liveOperation } from './live-types.ts';
import { DEFAULT_RETRY, type RetryOptions } from './retry.ts';
import { DEFAULT_SOCKET_ACK_MS, SocketTransport } from './socket.ts';
import { TtsApi } from './tts.ts';

/**
 * Options of {@link createClient}: the service's address and key (from the environment where
 * omitted), limits, concurrency, timeouts and retries.
 */
export interface ClientOptions extends ConfigOptions {
  /** Limits for pre-flight checks (a deployment's may be lower than the interface defaults). */
  limits?: LimitOverrides;
  /** The account tier, for the TTS text limit (unknown: the free limit). */
  tier?: Tier;
  /** The plan's concurrent operations per workload (defaults: 4 TTS, 8 the others). */
  concurrency?: Partial<Record<Workload, number>>;
  /**
   * Admission control beyond the plan's concurrency: `maxRetries`, the admission refusals (429)
   * one operation waits out before its 429 is returned (default 100); `probeAfterMs`, the
   * cool-down before a lowered concurrency is raised again (default 10 s); `backoff`, the pause
   * after a refusal without Retry-After (default 500 ms doubling to 30 s).
   */
  admission?: Pick<AdmissionOptions, 'probeAfterMs' | 'backoff'> & { maxRetries?: number };
  /**
   * HTTP timeouts, plus Socket.IO: `socketConnectMs` (default 10 s) and `socketAckMs`, the
   * wait for an acknowledgement of a live frame, a TTS request or the voice listing (default
   * 30 s; a live session's or a synthesis's `ackTimeoutMs` overrides it). A fast `audio_file`
   * is acknowledged after the whole upload was validated: it waits `uploadHeadersMs` (300 s).
   */
  timeouts?: Partial<HttpTimeouts> & {
    socketConnectMs?: number;
    socketAckMs?: number;
    /**
     * Longest wait for a live session's final record after its final frame, counted again from
     * each record that comes meanwhile (default 30 s).
     */
    liveFinalMs?: number;
  };
  /** Retries of retryable failures (default {@link DEFAULT_RETRY}). */
  retry?: RetryOptions;
  /**
   * The longest each operation may take, attempts, pauses and waits together (defaults
   * {@link DEFAULT_DEADLINES}); a call's own `deadlineMs` wins.
   */
  deadlines?: Partial<OperationDeadlines>;
  /** Batch submissions whose outcome is ambiguous: `fail` (default) or `resubmit`. */
  onAmbiguousSubmit?: AmbiguousSubmitPolicy;
  /** Socket.IO event names, where a deployment differs from speechpipe's defaults. */
  socketEvents?: Partial<SocketEventNames>;
  /** Use your own undici dispatcher (not closed by `close()`). */
  dispatcher?: Dispatcher;
  /** The `User-Agent` header. Default `speechpipe`. */
  userAgent?: string;
}

const closingSignals = new WeakMap<SpeechClient, AbortSignal>();

/**
 * Aborted when `client.close()` is called (reason: `TransportError` `ERR_CLIENT_CLOSED`), so a
 * wait of the client's user that is not an operation (sttStream's pause before a restart) ends
 * with it. `undefined` for an object that is not a `SpeechClient`.
 * @internal
 */
export function closingSignalOf(client: SpeechClient): AbortSignal | undefined {
  return closingSignals.get(client);
}

/** Opens live sessions (`client.live`); a session starts at its first `send()`. */
export interface LiveApi {
  /** A realtime ASR session (records: ASR records). */
  stt(options?: LiveSessionOptions): LiveSession<'stt'>;
  /** A realtime diarization session (records: diarization records). */
  diarization(options?: LiveSessionOptions): LiveSession<'diarization'>;
  /** A realtime session of either kind. */
  open<K extends LiveKind>(kind: K, options?: LiveSessionOptions): LiveSession<K>;
}

/**
 * A client of the speech service: every operation over HTTP and Socket.IO, sharing one
 * keep-alive dispatcher, one Socket.IO connection and one admission controller. Release them
 * with `close()`.
 */
export class SpeechClient {
  /** The resolved service configuration (address, key, paths). */
  readonly config: ServiceConfig;
  /** The limits used for pre-flight checks. */
  readonly limits: Limits;
  /** Batch transcription. */
  readonly batch: BatchApi;
  /** Fast transcription. */
  readonly fast: FastApi;
  /** Realtime ASR and diarization sessions. */
  readonly live: LiveApi;
  /** Speech synthesis and voices. */
  readonly tts: TtsApi;
  readonly #http: HttpTransport;
  readonly #socket: SocketTransport;
  readonly #admission: Admission;
  /** Aborted by close(): live sessions used after it fail with ERR_CLIENT_CLOSED. */
  readonly #closing = new AbortController();
  /** Live sessions in use, failed by close() (they leave the set when they end). */
  readonly #sessions = new Set<LiveSession>();
  /** Failed or aborted sessions being ended at the service; close() waits for them. */
  readonly #ending = new Set<Promise<void>>();
  #closed = false;

  /**
   * A client from `options`, else the environment (`API_KEY`, `API_URL`, `API_PATH`); as
   * {@link createClient}.
   */
  constructor(options: ClientOptions = {}) {
    checkTimingOptions(options);
    this.config = resolveConfig(options);
    closingSignals.set(this, this.#closing.signal);
    // The same environment as the configuration: TTS_MAX_INPUT_CHARACTERS_* overrides apply.
    this.limits = resolveLimits(
      options.limits,
      options.env ?? (globalThis.process?.env as Record<string, string | undefined>) ?? {},
    );
    const socketAckTimeoutMs = options.timeouts?.socketAckMs ?? DEFAULT_SOCKET_ACK_MS;
    const retry = { ...DEFAULT_RETRY, ...defined(options.retry) };
    this.#http = new HttpTransport(this.config, {
      timeouts: defined(options.timeouts),
      ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
      userAgent: options.userAgent ?? 'speechpipe',
    });
    this.#socket = new SocketTransport(this.config, resolveSocketEvents(options.socketEvents), {
      connectTimeoutMs: options.timeouts?.socketConnectMs ?? 10_000,
      ackTimeoutMs: socketAckTimeoutMs,
    });
    const { maxRetries, ...admission } = options.admission ?? {};
    this.#admission = new Admission({
      ...admission,
      concurrency: { ...this.limits.accountConcurrency, ...options.concurrency },
    });
    const deadlines = { ...DEFAULT_DEADLINES, ...defined(options.deadlines) };
    const policy = new RetryPolicy({
      admission: this.#admission,
      retry,
      maxAdmissionRetries: maxRetries,
      closed: this.#closing.signal,
    });
    const prefix = this.config.realtimeHttpPrefix;
    this.batch = new BatchApi({
      http: this.#http,
      policy,
      limits: this.limits,
      onAmbiguousSubmit: options.onAmbiguousSubmit ?? 'fail',
      deadlines,
    });
    this.fast = new FastApi({
      http: this.#http,
      socket: this.#socket,
      policy,
      limits: this.limits,
      realtimePrefix: prefix,
      deadlineMs: deadlines.fast,
    });
    this.tts = new TtsApi({
      http: this.#http,
      socket: this.#socket,
      policy,
      limits: this.limits,
      tier: options.tier,
      realtimePrefix: prefix,
      socketAckTimeoutMs,
      deadlines,
    });
    const socketOptions = {
      connectTimeoutMs: options.timeouts?.socketConnectMs ?? 10_000,
      ackTimeoutMs: socketAckTimeoutMs,
    };
    const socketEvents = this.#socket.events;
    // The one place the transport is chosen: a session only sees its channel.
    const channel: ChannelFactory = (kind, transport, listener, o) =>
      transport === 'http'
        ? new HttpLiveChannel(
            {
              http: this.#http,
              operation: liveOperation(kind, transport),
              path: realtimePath(
                prefix,
                kind === 'stt' ? REALTIME_OPERATIONS.sttStream : REALTIME_OPERATIONS.diarizationStream,
              ),
            },
            listener,
          )
        : new SocketLiveChannel(
            {
              connection: () => new SocketTransport(this.config, socketEvents, socketOptions),
              operation: liveOperation(kind, transport),
              event: kind === 'stt' ? socketEvents.audioStream : socketEvents.diarizationStream,
              resultEvent: kind === 'stt' ? socketEvents.transcriptionResult : socketEvents.diarizationResult,
              streamId: o.streamId,
              acks: o.acks,
              ackTimeoutMs: o.ackTimeoutMs,
            },
            listener,
          );
    const deps = {
      channel,
      policy,
      startDeadlineMs: deadlines.liveStart,
      admission: this.#admission,
      limits: this.limits,
      socketAckTimeoutMs,
      ...(options.timeouts?.liveFinalMs !== undefined
        ? { liveFinalTimeoutMs: options.timeouts.liveFinalMs }
        : {}),
      closed: this.#closing.signal,
      sessions: this.#sessions,
      ending: this.#ending,
    };
    this.live = {
      open: <K extends LiveKind>(kind: K, o?: LiveSessionOptions) => new LiveSession(kind, deps, o),
      stt: (o) => new LiveSession('stt', deps, o),
      diarization: (o) => new LiveSession('diarization', deps, o),
    };
  }

  /** Queue depth, running operations, concurrency and pauses per workload. */
  admissionStats(): WorkloadStats[] {
    return this.#admission.stats();
  }

  /**
   * Call `listener` on every admission rejection (429 with Retry-After: the workload pauses
   * here); a cluster worker passes it on so that every worker pauses. Returns its removal.
   */
  onAdmissionRejected(listener: (rejection: AdmissionRejection) => void): () => void {
    return this.#admission.onRejection(listener);
  }

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Release sockets, pools and timers; queued operations fail with `ERR_CLIENT_CLOSED`. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort(new TransportError('ERR_CLIENT_CLOSED', 'the client was closed'));
    for (const session of [...this.#sessions]) session.abort(this.#closing.signal.reason);
    // Their streams are ended at the service first (bounded by each one's endTimeoutMs), so
    // closing a client does not leave the account's slots held until the service's expiry.
    await Promise.all([...this.#ending]);
    this.#admission.close();
    this.#socket.close();
    await this.#http.close();
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return `SpeechClient { apiUrl: ${this.config.apiUrl}, apiKey: [redacted]${this.#closed ? ', closed' : ''} }`;
  }

  /** The service address, with the key redacted (so that logging the client never shows it). */
  toJSON(): Record<string, unknown> {
    return { apiUrl: this.config.apiUrl, apiKey: '[redacted]' };
  }
}

/** `record` without its `undefined` entries (which would hide the defaults they are spread over). */
function defined<T extends object>(record: T | undefined): Partial<T> {
  return Object.fromEntries(Object.entries(record ?? {}).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Timeouts and retry options are checked here, not at the first request: undici refuses a NaN
 * or negative timeout with an error that read as a lost connection (and was retried), takes 0
 * as "no timeout" (a stalled service hung the caller), and a NaN `maxAttempts` retried forever.
 * @throws RangeError
 */
function checkTimingOptions(options: ClientOptions): void {
  const check = (name: string, value: unknown, rule: NumberRule) =>
    checkNumberOption('createClient', name, value, { ...rule, range: true });
  for (const [name, value] of Object.entries(options.timeouts ?? {}))
    check(`timeouts.${name}`, value, { above: true, max: MAX_TIMER_MS });
  for (const [name, value] of Object.entries(options.deadlines ?? {}))
    check(`deadlines.${name}`, value, { above: true, infinite: true });
  const { retry = {}, admission = {} } = options;
  check('retry.maxAttempts', retry.maxAttempts, { integer: true, min: 1 });
  for (const name of ['baseMs', 'maxMs', 'factor'] as const) {
    check(`retry.${name}`, retry[name], {});
    check(`admission.backoff.${name}`, admission.backoff?.[name], {});
  }
  check('admission.maxRetries', admission.maxRetries, { integer: true });
  check('admission.probeAfterMs', admission.probeAfterMs, { above: true, max: MAX_TIMER_MS });
  checkChoiceOption('createClient', 'onAmbiguousSubmit', options.onAmbiguousSubmit, ['fail', 'resubmit']);
}

/** A client from options, else `API_KEY`, `API_URL`, `API_PATH`. */
export function createClient(options: ClientOptions = {}): SpeechClient {
  return new SpeechClient(options);
}
