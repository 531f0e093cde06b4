// Type-level test, checked by `npm run typecheck` (never run): the public emitters are typed by
// their event maps, so a wrong event name or a handler of the wrong shape does not compile.
// Each `@ts-expect-error` line must be an error; if typing is lost, tsc reports it unused.

import { type Duplex, PassThrough, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  type ArchiveEvent,
  type AsrRecord,
  type DecodeFormatEvent,
  type DiarizationRecord,
  decode,
  diarizationStream,
  type LiveSession,
  type LiveSessionEvents,
  liveInput,
  type MediaError,
  type SessionChange,
  type SpeakerTimeline,
  type SpeakerTimelineEvents,
  type SpeechClient,
  type SpeechServiceError,
  sttStream,
  writeTranscripts,
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

// The library's streams (TypedStream): their own events and Node's, each with its arguments,
// and still streams that pipeline() takes. Never run: the functions are only type-checked.
export async function streams(client: SpeechClient, store: Parameters<typeof writeTranscripts>[0]['store']) {
  const decoder = decode();
  decoder.on('format', (format: DecodeFormatEvent) => handled.push(format.decoder));
  decoder.on('spawn', (pid: number) => handled.push(String(pid)));
  decoder.once('warning', (err: MediaError) => handled.push(err.code));
  decoder.on('data', (chunk: Buffer) => handled.push(String(chunk.length)));
  decoder.on('end', () => handled.push('end'));
  await new Promise((resolve) => decoder.on('finish', resolve));
  // @ts-expect-error: no such event ('formats')
  decoder.on('formats', () => {});
  // @ts-expect-error: 'spawn' carries a pid, not a string
  decoder.on('spawn', (pid: string) => handled.push(pid));
  // @ts-expect-error: 'end' carries nothing a string parameter could take
  decoder.on('end', (why: string) => handled.push(why));

  const stt = sttStream({ client });
  stt.on('session', (change: SessionChange) => handled.push(change.reason));
  stt.on('audio-lost', (lost) => handled.push(String(lost.end_time - lost.start_time)));
  stt.on('keepalive', () => handled.push(String(stt.sessionId)));
  stt.on('session-error', (err) => handled.push(String(err)));
  // @ts-expect-error: no such event ('audio_lost')
  stt.on('audio_lost', () => {});
  // @ts-expect-error: a session change has no 'code'
  stt.on('session', (change) => handled.push(change.code));
  const diarization = diarizationStream({ client });
  // @ts-expect-error: 'keepalive' carries nothing
  diarization.prependListener('keepalive', (seconds: number) => handled.push(String(seconds)));

  const input = liveInput('-');
  input.on('warning', (err: MediaError) => handled.push(err.message));
  // @ts-expect-error: a live input emits no 'format'
  input.on('format', () => {});

  const sink = writeTranscripts({ store });
  sink.on('event', (event: ArchiveEvent) => handled.push(event.type));
  // @ts-expect-error: the events are archive events, not strings
  sink.on('event', (event: string) => handled.push(event));
  // @ts-expect-error: a Writable emits no 'data'
  sink.on('data', () => {});

  // Node's own events with their arguments, and the methods that return the stream keep its type.
  decoder.on('error', (err) => handled.push(err.message));
  decoder.on('pipe', (src) => src.resume());
  decoder.on('newListener', (event) => handled.push(String(event)));
  await new Promise<void>((resolve) => sink.once('finish', resolve));
  await new Promise<void>((resolve, reject) => decoder.once('end', resolve).once('error', reject));
  const current: string | undefined = stt.on('session', () => {}).pause().sessionId;
  const piped: string | undefined = input.pipe(decoder).pipe(stt).sessionId;
  input
    .pipe(decoder)
    .pipe(stt)
    .pipe(sink)
    .on('event', (event) => handled.push(event.type));
  const duplexes: Duplex[] = [decoder, stt, decoder.compose(stt)];
  // A union of a typed stream and another stream cannot call an overloaded listener method
  // (TypeScript's limit, see TypedStream): typed as their common base, it can, as Node's.
  const either: Duplex = handled.length > 0 ? new PassThrough() : decoder;
  either.on('data', (chunk: Buffer) => handled.push(String(chunk.length)));
  handled.push(String(current), String(piped), String(duplexes.length));
  // @ts-expect-error: 'error' carries an Error, not a string
  decoder.on('error', (err: string) => handled.push(err));
  // @ts-expect-error: no such event ('sessions'), also after a method that returns the stream
  stt.pause().on('sessions', () => {});
  // @ts-expect-error: a Readable emits no 'finish'
  input.once('finish', () => {});
  // @ts-expect-error: 'spawn' carries a pid
  decoder.emit('spawn', 'one');
  // @ts-expect-error: no such event to remove the listeners of
  stt.removeAllListeners('keep-alive');

  await pipeline(input, decoder, new PassThrough(), stt, new Writable({ objectMode: true }));
}
