// speechpipe: composable Node streams for the speech service.

// First: on a Node.js too old for the library, the import fails here with an error that says so.
import './protocol/require-node.ts';

export * from './archive/index.ts';
export { MediaError, type MediaErrorCode } from './audio/media-error.ts';
export {
  type PcmFormat,
  ResamplePlanner,
  type ResamplePlannerOptions,
  Resampler,
  type ResamplerDesign,
  type ResamplerPosition,
  type ResampleTask,
  runResampleTask,
} from './audio/resampler.ts';
export * from './client/index.ts';
export type { LiveSessionEvents } from './client/live-events.ts';
export * from './protocol/index.ts';
export {
  type CaptionRelay,
  type CaptionRelayOptions,
  type CaptionRelayStats,
  captionRelay,
  type RelayCue,
} from './sinks/caption-relay.ts';
export { Manifest, type ManifestEntry, type ManifestSettings } from './sinks/manifest.ts';
export { type WavFileOptions, wavFile } from './sinks/wav-file.ts';
export {
  AUDIO_EXTENSIONS,
  type AudioFile,
  fromFile,
  isMediaHead,
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
export {
  closeSharedResamplePool,
  PoolClosedError,
  ResamplePool,
  type ResamplePoolOptions,
  sharedResamplePool,
  WorkerFailedError,
} from './workers/resample-pool.ts';
