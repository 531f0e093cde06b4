// speechpipe: composable Node streams for the speech service.

export { MediaError, type MediaErrorCode } from './audio/media-error.ts';
export {
  type PcmFormat,
  ResamplePlanner,
  Resampler,
  type ResamplerDesign,
  type ResampleTask,
  runResampleTask,
} from './audio/resampler.ts';
export * from './protocol/index.ts';
export { type WavFileOptions, wavFile } from './sinks/wav-file.ts';
export {
  type DecodeFormatEvent,
  type DecodeOptions,
  decode,
  type RawEncoding,
  type RawInputFormat,
} from './transforms/decode.ts';
export { type DemuxTtsOptions, demuxTts } from './transforms/demux-tts.ts';
export { type PaceOptions, Pacer, type PacerOptions, type PaceTransform, pace } from './transforms/pace.ts';
export { type ParseNdjsonOptions, parseNdjson } from './transforms/parse-ndjson.ts';
export { type ResampleOptions, resample } from './transforms/resample.ts';
export {
  DEFAULT_FRAME_MS,
  FrameCutter,
  type FramesTransform,
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
} from './workers/resample-pool.ts';
