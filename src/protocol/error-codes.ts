// The service's error catalog (interface, "Errors"): status and retryability per code.
// Used to fill in what a body leaves out and to build the same errors locally.

/** Catalog entry of one service error code. */
export interface ErrorCodeInfo {
  /** HTTP status the service uses; `undefined` where the interface does not show it. */
  readonly status: number | undefined;
  /** Whether the service marks the error retryable. */
  readonly retryable: boolean;
}

/** Status and retryability of every error code in the interface's Errors table. */
export const ERROR_CODES = {
  AUTH_UNAUTHORIZED: { status: 401, retryable: false },
  AUTH_FORBIDDEN: { status: 403, retryable: false },
  METHOD_NOT_ALLOWED: { status: undefined, retryable: false },
  VALIDATION_INVALID_LANGUAGE: { status: 400, retryable: false },
  VALIDATION_INVALID_FORMAT: { status: 400, retryable: false },
  VALIDATION_REQUIRED_FIELD: { status: 400, retryable: false },
  // 400 on live frames, 422 on batch submissions.
  VALIDATION_FILE_CORRUPT: { status: 400, retryable: false },
  VALIDATION_INVALID_PARAM: { status: 400, retryable: false },
  VALIDATION_INVALID_UUID: { status: 400, retryable: false },
  ASR_MODEL_NOT_FOUND: { status: 400, retryable: false },
  TTS_VOICE_NOT_FOUND: { status: 400, retryable: false },
  TTS_INPUT_NOT_ALLOWED: { status: 400, retryable: false },
  PAYLOAD_TOO_LARGE: { status: 413, retryable: false },
  AUDIO_DURATION_EXCEEDED: { status: 422, retryable: false },
  FILE_COUNT_EXCEEDED: { status: 422, retryable: false },
  CHARACTER_COUNT_EXCEEDED: { status: 422, retryable: false },
  VOICE_REFERENCE_COUNT_EXCEEDED: { status: 422, retryable: false },
  SESSION_IDLE_TIMEOUT: { status: 408, retryable: false },
  SESSION_EXPIRED: { status: 409, retryable: false },
  RATE_LIMIT_EXCEEDED: { status: 429, retryable: true },
  CONCURRENCY_LIMIT_EXCEEDED: { status: 429, retryable: true },
  SESSION_BYTE_RATE_EXCEEDED: { status: 429, retryable: true },
  SESSION_SLOTS_EXHAUSTED: { status: 429, retryable: true },
  TRANSCRIPTION_JOB_NOT_FOUND: { status: 404, retryable: false },
  SERVER_INTERNAL: { status: 500, retryable: true },
  ASR_TRANSCRIPTION_FAILED: { status: 500, retryable: true },
  DIARIZATION_FAILED: { status: 500, retryable: true },
  TTS_SYNTHESIS_FAILED: { status: 500, retryable: true },
  TTS_VOICE_RESOLUTION_FAILED: { status: 500, retryable: false },
  SERVER_DEPENDENCY_FAILURE: { status: 503, retryable: true },
  TTS_MODERATION_UNAVAILABLE: { status: 503, retryable: true },
  TTS_DEADLINE_EXCEEDED: { status: undefined, retryable: true },
} as const satisfies Record<string, ErrorCodeInfo>;

/** An error code of the interface's catalog (a key of `ERROR_CODES`). */
export type ServiceErrorCode = keyof typeof ERROR_CODES;

/** Whether `code` is a string naming an entry of `ERROR_CODES`. */
export function isServiceErrorCode(code: unknown): code is ServiceErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERROR_CODES, code);
}

/** `data.bound` names of limit rejections and their units (interface, Errors rule 1). */
export const LIMIT_BOUNDS = {
  request_bytes: 'bytes',
  unvalidatable_tail_bytes: 'bytes',
  fast_audio_bytes: 'bytes',
  realtime_asr_frame_bytes: 'bytes',
  realtime_diarization_frame_bytes: 'bytes',
  tts_voice_reference_bytes: 'bytes',
  session_audio_rate_burst: 'bytes',
  audio_duration: 'seconds',
  fast_audio_duration: 'seconds',
  session_audio_duration: 'seconds',
  tts_voice_reference_duration: 'seconds',
  session_idle: 'seconds',
  file_parts: 'files',
  multipart_parts: 'parts',
  tts_input_characters: 'characters',
  tts_voice_reference_text_characters: 'characters',
  tts_voice_reference_count: 'references',
} as const;

/**
 * `data.bound` of a second POST in flight for one diarization stream (429
 * `CONCURRENCY_LIMIT_EXCEEDED`; ours, not the interface's: docs/DECISIONS.md "Overlapping
 * POSTs"). The stream's own POST is still being answered; the account's concurrency is not at
 * issue, so a client waits for it without pausing the workload.
 */
export const STREAM_REQUESTS_IN_FLIGHT_BOUND = 'stream_requests_in_flight';

/** A `data.bound` name of a limit rejection: one of `LIMIT_BOUNDS`, or `account_concurrency_<workload>`. */
export type LimitBound = keyof typeof LIMIT_BOUNDS | `account_concurrency_${string}`;

/** The unit of a `data.bound` name (`bytes`, `seconds`, ...); `operations` for `account_concurrency_*`; `undefined` for an unknown bound. */
export function unitOfBound(bound: string): string | undefined {
  if (bound.startsWith('account_concurrency_')) return 'operations';
  return (LIMIT_BOUNDS as Record<string, string>)[bound];
}
