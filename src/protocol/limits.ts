// Every limit of the interface's Limits table, as named defaults that deployments (and the
// emulator, and client pre-flight) override. A value exactly at a limit is accepted.

import { ConfigError, InvalidArgumentError } from './errors.ts';

/** Account tiers; they differ in the TTS text limit. */
export type Tier = 'free' | 'standard' | 'enterprise';
/** Every `Tier`. */
export const TIERS: readonly Tier[] = ['free', 'standard', 'enterprise'];

/** Workloads counted separately for per-account concurrency. */
export type Workload = 'batch' | 'fast' | 'realtime_asr' | 'diarization' | 'tts';
/** Every `Workload`. */
export const WORKLOADS: readonly Workload[] = ['batch', 'fast', 'realtime_asr', 'diarization', 'tts'];

/** Every limit of the interface's Limits table, under a name with its unit (`Bytes`, `Sec`, `Ms`, or a count). */
export interface Limits {
  /** Batch request bytes (bound `request_bytes`). */
  batchRequestBytes: number;
  /** Batch decoded audio seconds (bound `audio_duration`). */
  batchAudioDurationSec: number;
  /** Audio parts per batch request (bound `file_parts`). */
  batchFileParts: number;
  /** Multipart parts per batch request (bound `multipart_parts`). */
  batchMultipartParts: number;
  /** Bytes allowed after the recording before validation gives up (bound `unvalidatable_tail_bytes`). */
  batchUnvalidatableTailBytes: number;
  /** Fast upload bytes (bound `fast_audio_bytes`). */
  fastAudioBytes: number;
  /** Fast decoded seconds (bound `fast_audio_duration`). */
  fastAudioDurationSec: number;
  /** Realtime ASR frame body bytes (bound `realtime_asr_frame_bytes`). */
  realtimeAsrFrameBytes: number;
  /** Realtime diarization frame body bytes (bound `realtime_diarization_frame_bytes`). */
  realtimeDiarizationFrameBytes: number;
  /** Total audio seconds per live session (bound `session_audio_duration`). */
  sessionAudioDurationSec: number;
  /** Sustained live audio rate, as a multiple of real time. */
  sessionAudioRateRealtime: number;
  /** Burst allowance of the live audio rate, bytes (bound `session_audio_rate_burst`). */
  sessionAudioRateBurstBytes: number;
  /** Seconds without accepted audio or inference response before a live session expires. */
  sessionExpirySec: number;
  /** Idle retirement window, seconds (bound `session_idle`). */
  sessionIdleSec: number;
  /** Longest wait of a non-final framed HTTP response before it ends (session kept). */
  nonFinalResponseWindowMs: number;
  /** TTS request body bytes. */
  ttsRequestBytes: number;
  /** TTS text length in code points, per tier (bound `tts_input_characters`). */
  ttsInputCharacters: Record<Tier, number>;
  /** Reference transcript characters (bound `tts_voice_reference_text_characters`). */
  ttsVoiceReferenceTextCharacters: number;
  /** Voice references per request (bound `tts_voice_reference_count`). */
  ttsVoiceReferenceCount: number;
  /** Decoded reference audio bytes (bound `tts_voice_reference_bytes`). */
  ttsVoiceReferenceBytes: number;
  /** Reference audio seconds (bound `tts_voice_reference_duration`). */
  ttsVoiceReferenceDurationSec: number;
  /** Non-resetting synthesis deadline before binary output begins. */
  ttsSynthesisDeadlineMs: number;
  /** Concurrent operations per billable account, per workload (plan-dependent). */
  accountConcurrency: Record<Workload, number>;
}

/** The interface's limit values (frozen); `accountConcurrency` is ours except its examples, 4 for TTS and 8 for realtime ASR. */
export const DEFAULT_LIMITS: Readonly<Limits> = Object.freeze({
  batchRequestBytes: 536_870_912,
  batchAudioDurationSec: 14_400,
  batchFileParts: 1,
  batchMultipartParts: 8,
  batchUnvalidatableTailBytes: 524_288,
  fastAudioBytes: 67_108_864,
  fastAudioDurationSec: 1_800,
  realtimeAsrFrameBytes: 16_777_216,
  realtimeDiarizationFrameBytes: 16_777_216,
  sessionAudioDurationSec: 14_400,
  sessionAudioRateRealtime: 4,
  sessionAudioRateBurstBytes: 16_777_216,
  sessionExpirySec: 60,
  sessionIdleSec: 900,
  nonFinalResponseWindowMs: 2_000,
  ttsRequestBytes: 16_777_216,
  ttsInputCharacters: Object.freeze({ free: 500, standard: 1_000, enterprise: 1_000 }),
  ttsVoiceReferenceTextCharacters: 500,
  ttsVoiceReferenceCount: 1,
  ttsVoiceReferenceBytes: 2_097_152,
  ttsVoiceReferenceDurationSec: 15,
  ttsSynthesisDeadlineMs: 25_000,
  // The interface's examples: 4 for TTS and 8 for realtime ASR; the rest are our defaults.
  accountConcurrency: Object.freeze({ batch: 8, fast: 8, realtime_asr: 8, diarization: 8, tts: 4 }),
});

/** Limits to replace in `resolveLimits`; the per-tier and per-workload tables may be given in part. */
export type LimitOverrides = Partial<Omit<Limits, 'ttsInputCharacters' | 'accountConcurrency'>> & {
  ttsInputCharacters?: Partial<Record<Tier, number>>;
  accountConcurrency?: Partial<Record<Workload, number>>;
};

const TIER_ENV: Record<Tier, string> = {
  free: 'TTS_MAX_INPUT_CHARACTERS_FREE',
  standard: 'TTS_MAX_INPUT_CHARACTERS_STANDARD',
  enterprise: 'TTS_MAX_INPUT_CHARACTERS_ENTERPRISE',
};

/**
 * Limits whose values are counts (bytes, parts, characters, references, operations): whole
 * numbers. The others (seconds, milliseconds, the real-time multiple) may be fractional.
 */
export const COUNT_LIMITS: ReadonlySet<string> = new Set<keyof Limits>([
  'batchRequestBytes',
  'batchFileParts',
  'batchMultipartParts',
  'batchUnvalidatableTailBytes',
  'fastAudioBytes',
  'realtimeAsrFrameBytes',
  'realtimeDiarizationFrameBytes',
  'sessionAudioRateBurstBytes',
  'ttsRequestBytes',
  'ttsInputCharacters',
  'ttsVoiceReferenceTextCharacters',
  'ttsVoiceReferenceCount',
  'ttsVoiceReferenceBytes',
  'accountConcurrency',
]);

/**
 * Limits from the defaults, then `TTS_MAX_INPUT_CHARACTERS_*` in `env`, then `overrides`. An
 * override set to `undefined` keeps the default. Throws `ConfigError` for an environment value
 * that is not a positive integer, and `InvalidArgumentError` for an unknown override, a value
 * that is not a positive finite number, or a fractional count.
 */
export function resolveLimits(
  overrides: LimitOverrides = {},
  env: Record<string, string | undefined> = {},
): Limits {
  const tts = { ...DEFAULT_LIMITS.ttsInputCharacters };
  for (const tier of TIERS) {
    const raw = env[TIER_ENV[tier]];
    if (raw !== undefined && raw !== '') tts[tier] = positiveInteger(raw, TIER_ENV[tier]);
  }
  const limits: Limits = {
    ...DEFAULT_LIMITS,
    ttsInputCharacters: tts,
    accountConcurrency: { ...DEFAULT_LIMITS.accountConcurrency },
  };
  const table = limits as unknown as Record<string, number | Record<string, number>>;
  for (const [key, value] of Object.entries(overrides ?? {})) {
    if (value === undefined) continue;
    if (!Object.hasOwn(DEFAULT_LIMITS, key)) throw new InvalidArgumentError(`unknown limit ${key}`);
    const current = table[key]!;
    const count = COUNT_LIMITS.has(key);
    if (typeof current === 'number') {
      table[key] = checkLimit(value, key, count);
      continue;
    }
    if (typeof value !== 'object' || value === null)
      throw new InvalidArgumentError(`limit ${key} must be an object of ${Object.keys(current).join(', ')}`);
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      if (v === undefined) continue;
      if (!Object.hasOwn(current, k)) throw new InvalidArgumentError(`unknown limit ${key}.${k}`);
      current[k] = checkLimit(v, `${key}.${k}`, count);
    }
  }
  return limits;
}

/** The TTS text limit of a tier; a missing or unknown tier uses the free limit. */
export function ttsInputLimit(limits: Pick<Limits, 'ttsInputCharacters'>, tier: string | undefined): number {
  return tier !== undefined && Object.hasOwn(limits.ttsInputCharacters, tier)
    ? limits.ttsInputCharacters[tier as Tier]
    : limits.ttsInputCharacters.free;
}

function positiveInteger(raw: string, name: string): number {
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < 1)
    throw new ConfigError(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}

function checkLimit(n: unknown, name: string, count: boolean): number {
  if (!(typeof n === 'number' && Number.isFinite(n) && n > 0))
    throw new InvalidArgumentError(`limit ${name} must be a positive number, got ${String(n)}`);
  if (count && !Number.isSafeInteger(n))
    throw new InvalidArgumentError(`limit ${name} counts whole units: it must be an integer, got ${n}`);
  return n;
}
