// Paths of the HTTP operations. Batch lives under /v1; the Realtime HTTP operations live under
// a prefix (see `ServiceConfig.realtimeHttpPrefix`); the emulator serves both spellings.

import type { Language } from './languages.ts';

export const REALTIME_OPERATIONS = {
  sttStream: 'stt-stream',
  /** Compatibility alias of `stt-stream`. */
  realtimeAsr: 'realtime-asr',
  diarizationStream: 'diarization-stream',
  fastStt: 'stt',
  tts: 'tts',
} as const;

export type RealtimeOperation = (typeof REALTIME_OPERATIONS)[keyof typeof REALTIME_OPERATIONS];

/** Prefixes under which the Realtime HTTP operations are reachable. */
export const REALTIME_HTTP_PREFIXES = ['/realtime/http', '/http'] as const;

export const batchSubmitPath = (lang: Language): string => `/v1/transcribe/${encodeURIComponent(lang)}`;
export const batchJobPath = (jobId: string): string => `/v1/transcribe/${encodeURIComponent(jobId)}`;
export const batchJobLegacyPath = (jobId: string, lang: string): string =>
  `/v1/transcribe/${encodeURIComponent(jobId)}/${encodeURIComponent(lang)}`;
export const realtimePath = (prefix: string, operation: RealtimeOperation): string =>
  `${prefix}/${operation}`;
