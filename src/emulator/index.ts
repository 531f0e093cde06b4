// The service emulator: the whole interface over HTTP and Socket.IO, faithful to the contract,
// with fault injection and statistics, for tests and for running pipelines with no credentials.

/**
 * The service emulator: the whole interface over HTTP and Socket.IO on one machine, with fault
 * rules and statistics, for tests and for running pipelines with no credentials.
 * @module speechpipe/emulator
 */

// First: on a Node.js too old for the library, the import fails here with an error that says so.
import '../protocol/require-node.ts';

export {
  DEFAULT_ASR_MODELS,
  DEFAULT_BLOCKLIST,
  DEFAULT_TTS_MODELS,
  defaultContentPolicy,
} from './context.ts';
export { startEmulator } from './emulator.ts';
export type { RecognizerStats } from './engine/recognizer.ts';
export { DEFAULT_SERVER_LIMITS, type ServerLimits } from './server-limits.ts';
export {
  type EmulatorWorkers,
  type EmulatorWorkersOptions,
  startEmulatorWorkers,
} from './threads.ts';
export type {
  Capability,
  Emulator,
  EmulatorKey,
  EmulatorKeyOptions,
  EmulatorOptions,
  EmulatorStats,
  FaultAction,
  FaultRule,
  LatencyModel,
  SessionStats,
  VoiceInfo,
} from './types.ts';
export { physicalVariantIds } from './voices.ts';
