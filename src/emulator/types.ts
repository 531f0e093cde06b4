// Public types of the service emulator: options, keys, fault rules, statistics and the handle
// `startEmulator` resolves to.

import type { Language } from '../protocol/languages.ts';
import type { LimitOverrides, Tier, Workload } from '../protocol/limits.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { RecognizerStats } from './engine/recognizer.ts';
import type { ServerLimits } from './server-limits.ts';

/** What a key may do (interface, Authentication rule 3). */
export type Capability = 'batch' | 'realtime_asr' | 'diarization' | 'tts';

export const CAPABILITIES: readonly Capability[] = ['batch', 'realtime_asr', 'diarization', 'tts'];

/**
 * What the generated engine's transcripts are, said where a user meets them (the commands'
 * startup lines): a newcomer reading its words as a recognition takes the product for broken.
 */
export const GENERATED_WORDS =
  "with the generated engine, words are generated from the audio's speech regions, not recognised from what was said, and speakers change at pauses";

/** What the PocketSphinx engine's transcripts are, said where `GENERATED_WORDS` is. */
export const RECOGNIZED_WORDS =
  'with the pocketsphinx engine, English (and auto) words are recognised by PocketSphinx from what was said, ar and codeswitch words are generated, and speakers change at pauses';

/** The sentence saying what an engine's words are. */
export const engineWords = (engine: 'generated' | 'pocketsphinx'): string =>
  engine === 'pocketsphinx' ? RECOGNIZED_WORDS : GENERATED_WORDS;

/** An API key the emulator accepts, and what it may do. */
export interface EmulatorKey {
  /** The key, as sent in `x-api-key`. */
  key: string;
  /** Billable account: concurrency is shared by every key of an account. */
  account: string;
  /** The account tier (the TTS text limit). */
  tier: Tier;
  /** The operations the key may use; others are refused with 403. */
  capabilities: Capability[];
}

/** A key as `EmulatorOptions.keys` takes it: `capabilities` default all four, as in the accounts file. */
export type EmulatorKeyOptions = Omit<EmulatorKey, 'capabilities'> & { capabilities?: Capability[] };

/** What a fault rule does to a request it matches. */
export type FaultAction =
  /** Answer `status` with an error body of `code` and `detail` (or with `rawBody`), at `stage`. */
  | {
      type: 'status';
      status: number;
      code?: string;
      detail?: string;
      /** `Retry-After` header value (seconds or an HTTP date). */
      retryAfter?: number | string;
      /** Send this body verbatim instead of an error body (an intermediary's HTML page). */
      rawBody?: string;
      contentType?: string;
      /**
       * `before` (default): before authentication. `afterValidation`: where the operation admits
       * itself, after its own validation and before admission and its effect (TTS: after the
       * voice, content policy and model, before synthesis; the 500/503 voice and moderation
       * codes). `afterEffect`: perform the operation's effect first (a job is created, a frame
       * accepted).
       */
      stage?: 'before' | 'afterValidation' | 'afterEffect';
    }
  /** Hold the request `ms` milliseconds, then handle it as usual. */
  | { type: 'delay'; ms: number }
  /**
   * Destroy the connection: before handling (default), after the operation's effect, after
   * `afterBytes` response body bytes or after `afterRecords` NDJSON records.
   */
  | { type: 'reset'; stage?: 'before' | 'afterEffect'; afterBytes?: number; afterRecords?: number }
  /** A 200 NDJSON stream ends without its `is_final: true` record. */
  | { type: 'endWithoutFinal' }
  /** A TTS body ends before its final frame (after `afterBytes` body bytes, if given). */
  | { type: 'truncateTts'; afterBytes?: number }
  /** Never respond (until the client gives up or the emulator closes). */
  | { type: 'stall' }
  /** Send the response body at most `bytesPerSecond`. */
  | { type: 'slowBody'; bytesPerSecond: number }
  /** The operation's own failure (batch job ends `failed`, live 500, TTS 500 ...). */
  | { type: 'fail' };

/**
 * A fault to inject: which requests it matches, how many times, and what it does
 * (`Emulator.faults.add`, `EmulatorOptions.faults`).
 */
export interface FaultRule {
  /** The operation it matches, or `*` for every one. */
  operation: OperationName | '*';
  /** Only requests made with this API key. */
  key?: string;
  /** Only from the n-th matching request on (1-based). */
  nth?: number;
  /** At most this many applications (default 1 when `nth` is set, else unlimited). */
  times?: number;
  /** What it does to a matching request. */
  action: FaultAction;
}

/**
 * Simulated processing time: `instant`, or `perRequestMs` per request plus `perAudioSecondMs` per
 * second of audio (both default 0).
 */
export type LatencyModel = 'instant' | { perRequestMs?: number; perAudioSecondMs?: number };

/** Options of {@link startEmulator}. */
export interface EmulatorOptions {
  /** Default 0 (any free port). */
  port?: number;
  /** Default `127.0.0.1`. */
  host?: string;
  /**
   * Default: one random key, account `default`, tier `standard`, every capability. A key must be
   * visible ASCII without surrounding spaces (as a header carries it) and listed once (RangeError).
   */
  keys?: EmulatorKeyOptions[];
  /** Limit overrides (fractional seconds allowed, so tests can shrink windows). */
  limits?: LimitOverrides;
  /**
   * Deployment settings read as the service reads them: `TTS_MAX_INPUT_CHARACTERS_FREE`,
   * `_STANDARD`, `_ENTERPRISE` (`limits` wins over them). Default none, so that tests do not
   * depend on the environment; the `speechpipe emulator` command passes `process.env`.
   */
  env?: Record<string, string | undefined>;
  /** Simulated processing time. Default `instant`. */
  latency?: LatencyModel;
  /** Batch job schedule: time spent `queued`, then `processing`. */
  jobTiming?: { queuedMs?: number; processingMs?: number };
  /**
   * An ended job (`done`, `failed`, `cleared`) is forgotten this long after its last status
   * change, and later reads are 404. Default one hour; `Infinity` keeps every job.
   */
  jobRetentionMs?: number;
  /** Concurrent HTTP pseudo-sessions per account in this process (429 `SESSION_SLOTS_EXHAUSTED`). */
  sessionSlots?: number;
  /** Per-key request rate (429 `RATE_LIMIT_EXCEEDED`); default off. */
  rateLimit?: false | { requestsPerSecond: number; burst: number };
  /** `false` rejects the TTS text with 400 `TTS_INPUT_NOT_ALLOWED`. Default: a small blocklist. */
  contentPolicy?: (text: string) => boolean;
  /** Registered transcripts: SHA-256 hex of an uploaded file, or a live stream UUID, to text. */
  transcripts?: Record<string, string>;
  /** Fault rules in force from the start (more can be added with `Emulator.faults.add`). */
  faults?: FaultRule[];
  /**
   * The admin endpoint under `/_emulator/` on the same port (statistics, fault rules over HTTP,
   * for tests in other languages); it answers loopback clients only and takes no API key.
   * Default `true`.
   */
  admin?: boolean;
  /** Default `['/socket.io', '/realtime/socket.io']`. */
  socketPaths?: string[];
  /**
   * The HTTP server's own limits, as a production server has them: header (20 s), request
   * (15 min) and keep-alive (5 s) timeouts, a cap on open connections (1000), a minimum
   * upload rate (16 KiB/s over 10 s; a slower body is cut and what it held released), and a
   * send timeout (120 s without a byte of an answer taken by a client that does not read it:
   * the connection is closed and what its request held released).
   */
  server?: Partial<ServerLimits>;
  /**
   * TTS audio: `espeak` (espeak-ng on the PATH, else the synthesis fails), `synthetic` (a
   * deterministic synthetic voice), or `auto` (espeak-ng when on the PATH, else synthetic). Default
   * `auto`.
   */
  tts?: { engine?: 'auto' | 'espeak' | 'synthetic' };
  /**
   * Where ASR words come from. `generated` (default): drawn from a fixed vocabulary for each
   * speech region, deterministic and instant. `pocketsphinx`: recognized by PocketSphinx (Debian's
   * `pocketsphinx` and `pocketsphinx-en-us`; a `ConfigError` when they are not installed) for
   * `en` and `auto`, in child processes; other languages keep generated words. `auto`:
   * PocketSphinx when it is installed, else generated. A registered transcript always wins.
   */
  engine?: 'generated' | 'pocketsphinx' | 'auto';
  /**
   * PocketSphinx processes decoding at once (default: one per core). Work beyond them waits in
   * a queue, shown in `stats().recognizer`.
   */
  recognizerProcesses?: number;
  /**
   * ASR model keys per language; the first is the language's default. An empty list means no
   * default (an omitted `asr` then gives 400 `ASR_MODEL_NOT_FOUND`).
   */
  asrModels?: Partial<Record<Language, string[]>>;
  /** TTS model keys; the first is the default. Default `['nebula']`. */
  ttsModels?: string[];
}

/** Live sessions (realtime streams) the emulator opened, by how they ended. */
export interface SessionStats {
  /** Sessions opened. */
  opened: number;
  /** Ended by their final frame. */
  finished: number;
  /** Ended by the service's session expiry (no activity). */
  expired: number;
  /** Ended for idleness (no audio): their next frame gets 408. */
  retired: number;
  /** Cancelled: the client aborted, its Socket.IO connection closed, or the emulator closed. */
  cancelled: number;
  /** Ended by the operation's own failure (a `fail` fault). */
  failed: number;
  /** Live now. */
  active: number;
}

/** The emulator's counters since it started (`Emulator.stats()`). */
export interface EmulatorStats {
  /** Requests (HTTP and Socket.IO) per operation. */
  requests: Record<OperationName, number>;
  /** Error answers by code (including those produced by faults). */
  rejections: Record<string, number>;
  /** Batch jobs created. */
  jobsCreated: number;
  /** Live sessions, by how they ended. */
  sessions: SessionStats;
  /** Live frames accepted into a stream (HTTP and Socket.IO), including with an afterEffect fault. */
  framesAccepted: number;
  /** Request body and Socket.IO payload bytes received. */
  bytesIn: number;
  /** Response body and Socket.IO payload bytes sent. */
  bytesOut: number;
  /** TTS syntheses started. */
  ttsSyntheses: number;
  /** Highest number of concurrent operations seen per workload (all accounts). */
  maxConcurrent: Record<Workload, number>;
  /** Operations in progress per workload now. */
  concurrent: Record<Workload, number>;
  /**
   * Milliseconds of operations held per workload, summed over operations (two at once for a
   * second count 2000): slot utilisation is busyMs / (concurrency × wall time).
   */
  busyMs: Record<Workload, number>;
  /** Fault applications by action type. */
  faultsApplied: Record<string, number>;
  /** Socket.IO connections opened, rejected, and open now. */
  socketConnections: { opened: number; rejected: number; active: number };
  /** The engine that gives ASR words, and the recognizer's processes, queue and work. */
  recognizer: RecognizerStats;
}

/** A TTS voice the emulator offers. */
export interface VoiceInfo {
  /** The voice id (`voiceId` of a synthesis). */
  id: string;
  /** Its display name. */
  name: string;
  /** The languages it speaks. */
  languages: string[];
}

/** A running emulator (what {@link startEmulator} resolves to). */
export interface Emulator {
  /** `http://HOST:PORT` */
  readonly url: string;
  /** The first key. */
  readonly apiKey: string;
  /** The engine that gives the words of English (and `auto`) audio (`EmulatorOptions.engine`). */
  readonly engine: 'generated' | 'pocketsphinx';
  /** A snapshot of the counters. */
  stats(): EmulatorStats;
  /** Fault rules in force. */
  readonly faults: {
    /**
     * Put `rule` in force. Returns its removal.
     * @throws TypeError or RangeError when the rule is invalid.
     */
    add(rule: FaultRule): {
      /** Take the rule out of force (nothing if it is already out). */
      remove(): void;
    };
    /** Take every rule out of force. */
    clear(): void;
  };
  /**
   * Make the emulator answer `text` for an uploaded file (`key`: its SHA-256 hex) or a live stream
   * (`key`: its UUID); keys are case-insensitive.
   * @throws TypeError when `key` is empty or `text` is not a string.
   */
  registerTranscript(key: string, text: string): void;
  /** The TTS voices the emulator lists and synthesizes with. */
  readonly voices: readonly VoiceInfo[];
  /** Close HTTP and Socket.IO servers, connections, timers, child processes and temp files. */
  close(): Promise<void>;
}
