// speechpipe: composable Node streams for the speech service. Every public name is listed here
// by what it is for; helpers the modules share are not exported (docs/DECISIONS.md, "What the
// package exports").

/**
 * The library: the client of the speech service, the stream factories that make pipelines of
 * it, sources and sinks, the archive job, typed errors and the wire codecs.
 * @module speechpipe
 */

// First: on a Node.js too old for the library, the import fails here with an error that says so.
import './protocol/require-node.ts';

// Archive transcription: the `transcribe` command as calls and streams, locally or on a cluster.
export {
  ARCHIVE_FORMATS,
  type ArchiveEvent,
  type ArchiveFormat,
  type ArchiveMode,
  type ArchivePlan,
  type ArchiveRunOptions,
  type ArchiveSettings,
  ArchiveStore,
  type ArchiveStoreOptions,
  type ArchiveSummary,
  type ArchiveWalkOptions,
  type ArchiveWorker,
  type ArchiveWorkerOptions,
  type BreakerOptions,
  type ClusterConnectionOptions,
  DEFAULT_QUEUE_NAME,
  type EnqueueArchiveOptions,
  type EnqueuedArchive,
  enqueueArchive,
  type FileResult,
  openArchiveStore,
  type Reason,
  startArchiveWorker,
  type TranscribeArchiveOptions,
  type TranscribeEachOptions,
  type TranscriptsSink,
  transcribeArchive,
  transcribeEach,
  type WorkerEvent,
  type WriteTranscriptsEvents,
  type WriteTranscriptsOptions,
  walkArchive,
  writeTranscripts,
} from './archive/index.ts';
// Errors of decoding and of ffmpeg.
export { FfmpegError, FfmpegNotFoundError } from './audio/ffmpeg.ts';
export { MediaError, type MediaErrorCode } from './audio/media-error.ts';
// The resampler core of resample().
export { type PcmFormat, Resampler, type ResamplerDesign } from './audio/resampler.ts';
// The client: every operation of the service over HTTP and Socket.IO.
export {
  type AdmissionOptions,
  type AdmissionRejection,
  type AmbiguousSubmitPolicy,
  type BackoffOptions,
  BatchApi,
  BatchResultLostError,
  type BatchSubmitOptions,
  type BatchSubmitResult,
  BatchWaitTimeoutError,
  type ClientOptions,
  createClient,
  DEFAULT_DEADLINES,
  DEFAULT_RETRY,
  DEFAULT_TIMEOUTS,
  FastApi,
  type FastOptions,
  type GetLegacyOptions,
  type GetOptions,
  type HttpTimeouts,
  type LiveApi,
  type LiveKind,
  type LiveRecord,
  LiveSession,
  type LiveSessionOptions,
  type LiveState,
  type LiveTransport,
  type OperationDeadlines,
  type RetryOptions,
  type SendOptions,
  SpeechClient,
  type StreamFactory,
  type SynthesizeOptions,
  TtsApi,
  type TtsSynthesis,
  UnreadableSubmitAnswerError,
  type UploadInput,
  type VoiceReferenceInput,
  type WaitOptions,
  type WorkloadStats,
} from './client/index.ts';
export type { LiveSessionEvents } from './client/live-events.ts';
// Configuration and limits.
export {
  ApiKey,
  type ConfigOptions,
  DEFAULT_REALTIME_HTTP_PREFIX,
  resolveConfig,
  type ServiceConfig,
} from './protocol/config.ts';
// The service's error codes and typed errors.
export {
  ERROR_CODES,
  type ErrorCodeInfo,
  isServiceErrorCode,
  LIMIT_BOUNDS,
  type LimitBound,
  type ServiceErrorCode,
  STREAM_REQUESTS_IN_FLIGHT_BOUND,
} from './protocol/error-codes.ts';
export {
  type CapacityData,
  ConfigError,
  DeadlineExceededError,
  type ErrorBody,
  type ErrorBodyContext,
  type ErrorOrigin,
  errorFromErrorBody,
  errorFromResponse,
  type HeaderSource,
  IncompleteStreamError,
  InvalidArgumentError,
  type LimitData,
  MAX_RETRY_AFTER_MS,
  ProtocolError,
  type ProtocolErrorCode,
  parseRetryAfter,
  type ResponseErrorInput,
  SpeechpipeError,
  type SpeechpipeErrorOptions,
  SpeechServiceError,
  type SpeechServiceErrorInit,
  TransportError,
  type TransportErrorCode,
  type ValidationIssue,
} from './protocol/errors.ts';
// The wire codecs: live frames, NDJSON, TTS frames, WAV, records and jobs.
export {
  decodeFrame,
  type EncodeFrameInput,
  encodeFrame,
  FRAME_FLAG_IS_FINAL,
  FRAME_FLAG_IS_START,
  FRAME_HEADER_BYTES,
  type LiveFrame,
} from './protocol/frame.ts';
export {
  type BatchSubmitAck,
  type DiarizationSegment,
  isTerminalStatus,
  JOB_STATUSES,
  type JobStatus,
  type JobV1,
  type JobV2,
  type JobV2Done,
  type JobV2Envelope,
  type JobV2Pending,
  type LegacyWordOffset,
  parseJobV1,
  parseJobV2,
  parseSubmitAck,
  type TerminalJobStatus,
} from './protocol/jobs.ts';
export { isLanguage, LANGUAGES, type Language } from './protocol/languages.ts';
export {
  DEFAULT_LIMITS,
  type LimitOverrides,
  type Limits,
  resolveLimits,
  TIERS,
  type Tier,
  ttsInputLimit,
  WORKLOADS,
  type Workload,
} from './protocol/limits.ts';
export {
  DEFAULT_MAX_LINE_BYTES,
  encodeNdjson,
  NdjsonDecoder,
  type NdjsonDecoderOptions,
} from './protocol/ndjson.ts';
export { OPERATIONS, type OperationName } from './protocol/operations.ts';
export {
  type AsrRecord,
  type DiarizationRecord,
  type FastRecord,
  type LiveDiarizationSegment,
  parseAsrRecord,
  parseDiarizationRecord,
  parseFastRecord,
  type WordSegment,
} from './protocol/records.ts';
export {
  encodeWav,
  parseWavHeader,
  type WavHeaderInput,
  type WavInfo,
  type WavSampleFormat,
  writeWavHeader,
} from './protocol/riff.ts';
export {
  type AudioFilePayload,
  type FrameAck,
  HTTP_TTS_SAMPLE_RATE,
  LIVE_BYTES_PER_SECOND,
  LIVE_SAMPLE_RATE,
  type ListVoicesAck,
  resolveSocketEvents,
  SOCKET_EVENTS,
  SOCKET_PATHS,
  SOCKET_TTS_SAMPLE_RATE,
  type SocketErrorPayload,
  type SocketEventNames,
  type TtsAudioPayload,
  type TtsRequestPayload,
  type VoiceProfile,
} from './protocol/socket-events.ts';
export { UNKNOWN_SPEAKER } from './protocol/speaker-rule.ts';
export {
  encodeTtsFrame,
  TTS_FRAME_HEADER_BYTES,
  type TtsChunk,
  TtsDemuxer,
  type TtsDemuxerOptions,
} from './protocol/tts-frames.ts';
export { DEFAULT_TTS_MODEL, type TtsRequestBody, type TtsVoiceReference } from './protocol/tts-request.ts';
// Typed events of the streams and emitters.
export type {
  DuplexStreamEvents,
  EventArgs,
  Listener,
  ReadableStreamEvents,
  TypedDuplex,
  TypedReadable,
  TypedStream,
  TypedWritable,
  WithStreamEvents,
  WritableStreamEvents,
} from './protocol/typed-stream.ts';
// Sinks.
export {
  type CaptionDeliveryStats,
  CaptionOutputError,
  type DeliveryItem,
  type DeliverySink,
  type UndeliveredReason,
} from './sinks/caption-delivery.ts';
export { type CaptionOutput, type CaptionOutputHandlers, captionOutput } from './sinks/caption-output.ts';
export {
  type CaptionRelay,
  type CaptionRelayOptions,
  type CaptionRelayStats,
  captionRelay,
  type RelayCue,
} from './sinks/caption-relay.ts';
export {
  type HlsOutput,
  type HlsOutputOptions,
  type HlsOutputStats,
  hlsMount,
  hlsOutput,
} from './sinks/hls-output.ts';
export { Manifest, type ManifestEntry, type ManifestSettings } from './sinks/manifest.ts';
export {
  type ObsCaptionStats,
  type ObsCaptions,
  type ObsCaptionsOptions,
  obsCaptions,
} from './sinks/obs-captions.ts';
export type { RelayMount } from './sinks/relay-router.ts';
export { type WavFileOptions, wavFile } from './sinks/wav-file.ts';
export {
  redactCaptionUrl,
  type YoutubeCaptionStats,
  type YoutubeCaptions,
  type YoutubeCaptionsOptions,
  youtubeCaptions,
} from './sinks/youtube-captions.ts';
// Sources.
export {
  AUDIO_EXTENSIONS,
  type AudioFile,
  fromFile,
  type WalkOptions,
  walkAudioFiles,
} from './sources/files.ts';
export {
  type LiveInputEvents,
  type LiveInputOptions,
  type LiveInputStream,
  liveInput,
} from './sources/live-input.ts';
export {
  type HlsAudio,
  hlsAudioFor,
  type MediaInput,
  type MediaInputOptions,
  type MediaStreams,
  mediaInput,
  probeMedia,
} from './sources/media-input.ts';
// Transforms: the stream factories, and the pure cores under them.
export {
  type AlignSpeakersOptions,
  type AlignSpeakersStreamOptions,
  alignSpeakers,
  alignSpeakersStream,
  type SpeakerFinalEvent,
  SpeakerTimeline,
  type SpeakerTimelineEvents,
  type SpeakerUtteranceEvent,
  type SpeakerWord,
} from './transforms/align-speakers.ts';
export {
  type AssembleTranscriptOptions,
  assembleTranscript,
  type FinalEvent,
  type PartialEvent,
  TranscriptAssembler,
  type TranscriptEvent,
  type UtteranceEvent,
} from './transforms/assemble-transcript.ts';
export {
  type DecodeEvents,
  type DecodeFormatEvent,
  type DecodeOptions,
  type DecodeStream,
  decode,
  type RawEncoding,
  type RawInputFormat,
} from './transforms/decode.ts';
export { type DemuxTtsOptions, demuxTts } from './transforms/demux-tts.ts';
export {
  diarizationStream,
  type LiveSessionFactory,
  type LiveStreamEvents,
  type LiveStreamOptions,
  type LiveTranscriptionStream,
  type LostAudio,
  type SessionChange,
  sttStream,
} from './transforms/live-stream.ts';
export {
  type ActiveEvent,
  type DiarizationEvent,
  DiarizationMerger,
  type MergeDiarizationOptions,
  mergeDiarization,
  type SegmentEvent,
  type SpeakerSegment,
  type TimelineEvent,
} from './transforms/merge-diarization.ts';
export { type PaceOptions, Pacer, type PacerOptions, type PaceTransform, pace } from './transforms/pace.ts';
export { type ParseNdjsonOptions, parseNdjson } from './transforms/parse-ndjson.ts';
export { DEFAULT_REPLAY_LIMITS, type ReplayLimits } from './transforms/replay-buffer.ts';
export { type ResampleOptions, resample } from './transforms/resample.ts';
export { renderSpeakerSvg, type SpeakerSvgOptions } from './transforms/speaker-svg.ts';
export {
  CaptionBuilder,
  type CaptionOptions,
  type CaptionWord,
  type Cue,
  renderCaptions,
  toCaptions,
} from './transforms/to-captions.ts';
export {
  type AudioFrame,
  DEFAULT_FRAME_MS,
  FrameCutter,
  type FramesTransform,
  isAudioFrame,
  type ToFramesOptions,
  toFrames,
} from './transforms/to-frames.ts';
export { toWav, type WavFormatOptions } from './transforms/to-wav.ts';
// The worker pool resample() and decode() may run on.
export {
  closeSharedResamplePool,
  PoolClosedError,
  ResamplePool,
  type ResamplePoolOptions,
  sharedResamplePool,
  WorkerFailedError,
} from './workers/resample-pool.ts';
