// Streamed records of the service (NDJSON lines or Socket.IO events): realtime ASR, fast
// transcription and realtime diarization, with validators that name every problem.

import { Checker, type Obj, unwrap, type Validation } from './validate.ts';

/** A word with times in seconds (batch and live). */
export interface WordSegment {
  start_time: number;
  end_time: number;
  word: string;
}

/** Realtime ASR record. `seq` is opaque: no ordering or uniqueness is defined. */
export interface AsrRecord {
  id: string;
  seq: number;
  transcription: string;
  words: WordSegment[];
  /** An utterance boundary: the record's words are committed. */
  is_speech_final: boolean;
  /** The stream is complete; the only completion signal. */
  is_final: boolean;
}

/** Fast transcription record. */
export interface FastRecord {
  id: string;
  seq: number;
  transcription: string;
  words: WordSegment[];
  is_final: boolean;
}

/**
 * A live diarization segment. The interface uses `start_time` and the speaker label; other
 * fields (such as `end_time`) are not shown, so they are optional here.
 */
export interface LiveDiarizationSegment {
  start_time: number;
  speaker: string;
  end_time?: number;
  [field: string]: unknown;
}

/** Realtime diarization record. */
export interface DiarizationRecord {
  id: string;
  /** Per-record delta of closed segments that never change. */
  final_segments: LiveDiarizationSegment[];
  /** Full snapshot of provisional segments, replacing the previous one. */
  active_segments: LiveDiarizationSegment[];
  is_final: boolean;
}

/**
 * Check one word segment into `c` (times at least 0, `end_time` not before `start_time`). Shared with the job validators, not public API.
 *
 * @internal
 */
export function checkWordSegment(c: Checker, value: unknown, path: string): void {
  if (!c.object(value, path)) return;
  const okStart = c.number(value, 'start_time', path, { min: 0 });
  const okEnd = c.number(value, 'end_time', path, { min: 0 });
  c.string(value, 'word', path);
  if (okStart && okEnd && (value.end_time as number) < (value.start_time as number)) {
    c.fail(path, `end_time ${value.end_time} is before start_time ${value.start_time}`);
  }
}

function checkTranscriptFields(c: Checker, v: Obj, path: string): void {
  c.uuid(v, 'id', path);
  c.integer(v, 'seq', path);
  c.string(v, 'transcription', path);
  c.array(v, 'words', path, (w, p) => checkWordSegment(c, w, p));
  c.boolean(v, 'is_final', path);
}

/** Check a realtime ASR record against the interface. Never throws. */
export function validateAsrRecord(value: unknown): Validation<AsrRecord> {
  const c = new Checker();
  if (c.object(value, '$')) {
    checkTranscriptFields(c, value, '$');
    c.boolean(value, 'is_speech_final', '$');
  }
  return c.result(value);
}

/** Check a fast transcription record against the interface. Never throws. */
export function validateFastRecord(value: unknown): Validation<FastRecord> {
  const c = new Checker();
  if (c.object(value, '$')) checkTranscriptFields(c, value, '$');
  return c.result(value);
}

function checkLiveSegment(c: Checker, value: unknown, path: string): void {
  if (!c.object(value, path)) return;
  c.number(value, 'start_time', path, { min: 0 });
  c.string(value, 'speaker', path);
  const okEnd = c.number(value, 'end_time', path, { optional: true, min: 0 });
  if (okEnd && typeof value.end_time === 'number' && typeof value.start_time === 'number') {
    if (value.end_time < value.start_time)
      c.fail(path, `end_time ${value.end_time} is before start_time ${value.start_time}`);
  }
}

/** Check a realtime diarization record against the interface. Never throws. */
export function validateDiarizationRecord(value: unknown): Validation<DiarizationRecord> {
  const c = new Checker();
  if (c.object(value, '$')) {
    c.uuid(value, 'id', '$');
    c.array(value, 'final_segments', '$', (s, p) => checkLiveSegment(c, s, p));
    c.array(value, 'active_segments', '$', (s, p) => checkLiveSegment(c, s, p));
    c.boolean(value, 'is_final', '$');
  }
  return c.result(value);
}

/** `validateAsrRecord`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseAsrRecord = (value: unknown): AsrRecord => unwrap('ASR record', validateAsrRecord(value));
/** `validateFastRecord`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseFastRecord = (value: unknown): FastRecord =>
  unwrap('fast record', validateFastRecord(value));
/** `validateDiarizationRecord`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseDiarizationRecord = (value: unknown): DiarizationRecord =>
  unwrap('diarization record', validateDiarizationRecord(value));
