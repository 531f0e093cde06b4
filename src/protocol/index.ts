// The pure, I/O-free codecs and types of the service's wire formats.

export * from './config.ts';
export * from './error-codes.ts';
export * from './errors.ts';
export * from './frame.ts';
export * from './http-paths.ts';
export * from './jobs.ts';
export * from './languages.ts';
export * from './limits.ts';
export * from './ndjson.ts';
export * from './operations.ts';
export * from './records.ts';
export * from './riff.ts';
export * from './socket-events.ts';
export * from './speaker-rule.ts';
export * from './tts-frames.ts';
export * from './tts-request.ts';
export type {
  DuplexStreamEvents,
  EmitterEvents,
  EventArgs,
  Listener,
  ListenerMethods,
  ReadableStreamEvents,
  StreamEventsOf,
  TypedDuplex,
  TypedReadable,
  TypedStream,
  TypedWritable,
  WithStreamEvents,
  WritableStreamEvents,
} from './typed-stream.ts';
export * from './uuid.ts';
export { unwrap, type Validation } from './validate.ts';
