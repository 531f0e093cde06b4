// Paths of the HTTP operations. Batch lives under /v1; the Realtime HTTP operations live under
// a prefix (see `ServiceConfig.realtimeHttpPrefix`); the emulator serves both spellings.

import type { Language } from './languages.ts';

/** Names of the Realtime HTTP operations, the last path segment under the realtime prefix. */
export const REALTIME_OPERATIONS = {
  /** Framed live ASR (`POST /http/stt-stream`). */
  sttStream: 'stt-stream',
  /** Compatibility alias of `stt-stream`. */
  realtimeAsr: 'realtime-asr',
  /** Framed live diarization. */
  diarizationStream: 'diarization-stream',
  /** Fast transcription of one complete file. */
  fastStt: 'stt',
  /** Text-to-speech, answered with TTS service frames. */
  tts: 'tts',
} as const;

/** A Realtime HTTP operation name (a value of `REALTIME_OPERATIONS`). */
export type RealtimeOperation = (typeof REALTIME_OPERATIONS)[keyof typeof REALTIME_OPERATIONS];

/** Prefixes under which the Realtime HTTP operations are reachable. */
export const REALTIME_HTTP_PREFIXES = ['/realtime/http', '/http'] as const;

/** Path of a batch submission, `/v1/transcribe/{lang}`. */
export const batchSubmitPath = (lang: Language): string => `/v1/transcribe/${encodeURIComponent(lang)}`;
/** Path of the V2 job lookup (recommended), `/v1/transcribe/{job_id}`. */
export const batchJobPath = (jobId: string): string => `/v1/transcribe/${encodeURIComponent(jobId)}`;
/** Path of the V1 legacy job lookup, `/v1/transcribe/{job_id}/{lang}`. */
export const batchJobLegacyPath = (jobId: string, lang: string): string =>
  `/v1/transcribe/${encodeURIComponent(jobId)}/${encodeURIComponent(lang)}`;
/** Path of a Realtime HTTP operation under `prefix` (such as `ServiceConfig.realtimeHttpPrefix`). */
export const realtimePath = (prefix: string, operation: RealtimeOperation): string =>
  `${prefix}/${operation}`;
