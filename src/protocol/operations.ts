// Names of the service's operations, one vocabulary for error messages, client metrics, and
// the emulator's fault rules and statistics.

/** Every operation name, as `<workload>.<transport>` (batch: `submit`, `get`, `getLegacy`; `voices.socket` is the voice listing). */
export const OPERATIONS = [
  'batch.submit',
  'batch.get',
  'batch.getLegacy',
  'fast.http',
  'fast.socket',
  'stt.http',
  'stt.socket',
  'diarization.http',
  'diarization.socket',
  'tts.http',
  'tts.socket',
  'voices.socket',
] as const;

/** An operation name (an element of `OPERATIONS`). */
export type OperationName = (typeof OPERATIONS)[number];

/** The workload an operation counts against for per-account concurrency. */
export function workloadOf(
  operation: OperationName,
): 'batch' | 'fast' | 'realtime_asr' | 'diarization' | 'tts' | null {
  if (operation === 'batch.submit') return 'batch';
  if (operation.startsWith('fast.')) return 'fast';
  if (operation.startsWith('stt.')) return 'realtime_asr';
  if (operation.startsWith('diarization.')) return 'diarization';
  if (operation.startsWith('tts.')) return 'tts';
  return null;
}
