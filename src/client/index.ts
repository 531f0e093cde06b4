// The client: every operation of the service over HTTP and Socket.IO.

export {
  Admission,
  type AdmissionOptions,
  type AdmissionRejection,
  isAdmissionRejection,
  type Slot,
  type WorkloadStats,
} from './admission.ts';
export {
  type Attempt,
  type AttemptPlan,
  Deadline,
  RetryPolicy,
  type RetryPolicyOptions,
} from './attempts.ts';
export {
  type AmbiguousSubmitPolicy,
  BatchApi,
  BatchResultLostError,
  type BatchSubmitOptions,
  type BatchSubmitResult,
  BatchWaitTimeoutError,
  type GetLegacyOptions,
  type GetOptions,
  UnreadableSubmitAnswerError,
  type WaitOptions,
} from './batch.ts';
export { type ClientOptions, createClient, type LiveApi, SpeechClient } from './client.ts';
export { DEFAULT_DEADLINES, type OperationDeadlines } from './deadlines.ts';
export { FastApi, type FastOptions } from './fast.ts';
export { DEFAULT_TIMEOUTS, type HttpTimeouts } from './http.ts';
export type { StreamFactory, UploadInput } from './input.ts';
export {
  type LiveDeps,
  type LiveKind,
  type LiveRecord,
  LiveSession,
  type LiveSessionOptions,
  type LiveState,
  type LiveTransport,
  type SendOptions,
} from './live.ts';
export type { ChannelFactory, ChannelListener, ChannelOptions, LiveChannel } from './live-channel.ts';
export { type BackoffOptions, backoffDelay, DEFAULT_RETRY, type RetryOptions } from './retry.ts';
export { type SynthesizeOptions, TtsApi, type TtsSynthesis, type VoiceReferenceInput } from './tts.ts';
