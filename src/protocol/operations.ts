// Names of the service's operations, one vocabulary for error messages, client metrics, and
// the emulator's fault rules and statistics.

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
