// The names a live session and what it depends on share: its kind, its transport, its record
// type and the operation it counts as. Kept apart so that the session, its events and its
// channels import them without importing each other.

import type { OperationName } from '../protocol/operations.ts';
import type { AsrRecord, DiarizationRecord } from '../protocol/records.ts';

/** A live session's service: `stt` (realtime ASR) or `diarization`. */
export type LiveKind = 'stt' | 'diarization';

/** How a live session talks to the service: HTTP requests, one per frame, or Socket.IO. */
export type LiveTransport = 'http' | 'socketio';

/** The transports of a live session (options are checked against them). */
export const LIVE_TRANSPORTS: readonly LiveTransport[] = ['http', 'socketio'];

/**
 * The record type of a live session of kind `K`: ASR records for `stt`, diarization records otherwise.
 */
export type LiveRecord<K extends LiveKind> = K extends 'stt' ? AsrRecord : DiarizationRecord;

/** The operation a live session of `kind` over `transport` counts as (`stt.http`, `diarization.socket`, ...). */
export function liveOperation(kind: LiveKind, transport: LiveTransport): OperationName {
  return `${kind}.${transport === 'http' ? 'http' : 'socket'}`;
}

/** The admission workload of a live session of `kind`. */
export function liveWorkload(kind: LiveKind): 'realtime_asr' | 'diarization' {
  return kind === 'stt' ? 'realtime_asr' : 'diarization';
}
