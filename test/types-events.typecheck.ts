// Type-level test, checked by `npm run typecheck` (never run): the public emitters are typed by
// their event maps, so a wrong event name or a handler of the wrong shape does not compile.
// Each `@ts-expect-error` line must be an error; if typing is lost, tsc reports it unused.

import type {
  AsrRecord,
  DiarizationRecord,
  LiveSession,
  LiveSessionEvents,
  SpeakerTimeline,
  SpeakerTimelineEvents,
  SpeechServiceError,
} from '../src/index.ts';

declare const stt: LiveSession<'stt'>;
declare const diarization: LiveSession<'diarization'>;
declare const timeline: SpeakerTimeline;

export const handled: string[] = [];

// What compiles: each event with its own arguments, the record type following the kind.
stt.on('record', (record: AsrRecord) => handled.push(record.transcription));
stt.once('final', (record) => handled.push(record.transcription));
stt.on('rate-limited', (err: SpeechServiceError) => handled.push(err.code));
stt.on('error', (err) => handled.push(String(err)));
diarization.on('final', (record: DiarizationRecord) => handled.push(record.id));
timeline.on('update', () => handled.push(String(timeline.closedUntil)));
export const events: Array<keyof LiveSessionEvents | keyof SpeakerTimelineEvents> = ['record', 'update'];

// @ts-expect-error: no such event ('records')
stt.on('records', () => {});
// @ts-expect-error: an ASR session's records are not diarization records
stt.on('record', (record: DiarizationRecord) => handled.push(record.id));
// @ts-expect-error: a diarization record has no transcription
diarization.on('final', (record) => handled.push(record.transcription));
// @ts-expect-error: 'rate-limited' carries a SpeechServiceError, not a number
stt.on('rate-limited', (delay: number) => handled.push(String(delay)));
// @ts-expect-error: 'final' carries the record
stt.emit('final');
// @ts-expect-error: no such event ('updated')
timeline.on('updated', () => {});
// @ts-expect-error: 'update' carries nothing
timeline.on('update', (segments: string[]) => handled.push(...segments));
