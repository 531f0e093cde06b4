// sttStream and diarizationStream against the fake live service (test/helpers/fake-live.ts): real
// LiveSessions, the real retry policy and admission, the emulator's engines for the words, no
// network. Frame joining, restarts, rotation, keepalive, backpressure, time shifting and the
// labels of restarted diarization sessions are the stream's own logic; what only the wire shows
// (frames and records over HTTP and Socket.IO, sessions ended at the service) is in
// transforms-live-wire.test.ts.

import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { type Duplex, Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { MediaError } from '../src/audio/media-error.ts';
import type { LiveSession } from '../src/client/live.ts';
import {
  type AsrRecord,
  type AudioFrame,
  assembleTranscript,
  type DiarizationEvent,
  type DiarizationRecord,
  type Language,
  type LiveStreamOptions,
  mergeDiarization,
  Pacer,
  type TranscriptEvent,
  toFrames,
} from '../src/index.ts';
import { localServiceError, SpeechServiceError } from '../src/protocol/errors.ts';
import { CLOSING_PCM_BYTES } from '../src/protocol/frame.ts';
import {
  diarizationStream,
  type LiveSessionFactory,
  type SessionChange,
  sttStream,
} from '../src/transforms/live-stream.ts';
import { FakeLiveService } from './helpers/fake-live.ts';
import { assertMonotonic, bulletin, collect, source, words } from './helpers/live-audio.ts';

const pcm = await bulletin();

/** Pipeline time where the new session's own audio starts: after what it hears again. */
const resumedAt = (c: SessionChange) => c.offsetSec + (c.replaySec ?? 0);

/** Options of a stream on `service`: its sessions, no joining of frames, short waits. */
function on(service: FakeLiveService, options: Partial<LiveStreamOptions> = {}): LiveStreamOptions {
  return {
    sessions: service.sessions({ finalTimeoutMs: 200, endTimeoutMs: 200 }),
    coalesceMs: 0,
    ...options,
  };
}

const status = (status: number, code: string, retryAfterMs?: number) =>
  new SpeechServiceError({ status, code, retryable: true, retryAfterMs });

/** `audio`, then a stall of `ms` after its first `at` bytes (keepalive off or on). */
function stalling(audio: Buffer, at: number, ms: number, end = audio.length): Readable {
  return Readable.from(
    (async function* () {
      yield audio.subarray(0, at);
      await sleep(ms);
      yield audio.subarray(at, end);
    })(),
    { objectMode: false },
  );
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Wait until `predicate` holds, checking every few milliseconds. */
async function until(predicate: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (predicate()) return;
    await sleep(5);
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A frame of live audio, as toFrames() makes them. */
function audio(pcm: Buffer, isFinal = false, language: Language = 'en'): AudioFrame {
  return { pcm, isFinal, language };
}

function writeFrame(stream: Writable | Duplex, frame: AudioFrame): Promise<void> {
  return new Promise((resolve, reject) => stream.write(frame, (e) => (e ? reject(e) : resolve())));
}

test('the transport decides the frame size: frames of any size from toFrames go out a second at a time over HTTP', async () => {
  const seconds = Math.ceil(pcm.length / 32000);
  const runs: { frames: number; words: string[] }[] = [];
  for (const frameMs of [100, 250, 1000]) {
    const service = new FakeLiveService();
    const records: AsrRecord[] = [];
    // coalesceMs as the default for HTTP (one POST per second of audio).
    const stt = sttStream({ sessions: service.sessions() });
    await pipeline(source(pcm), toFrames({ language: 'en', frameMs }), stt, collect(records));
    assert.equal(records.at(-1)!.is_final, true);
    runs.push({ frames: service.stats.frames, words: words(records).map((w) => w.word) });
  }
  for (const run of runs) {
    assert.equal(run.frames, seconds, `${run.frames} frames for ${pcm.length / 32000} s of audio`);
    assert.deepEqual(run.words, runs[2]!.words);
  }
  // Over Socket.IO every frame goes as it comes.
  const service = new FakeLiveService();
  await pipeline(
    source(pcm),
    toFrames({ language: 'en', frameMs: 100 }),
    sttStream({ sessions: service.sessions(), transport: 'socketio' }),
    collect([]),
  );
  assert.equal(service.stats.frames, Math.ceil(pcm.length / 3200));
});

test('a held short frame is sent when the source pauses, not kept until the next one', async () => {
  const service = new FakeLiveService();
  const frames = toFrames({ language: 'en' });
  const stt = sttStream({ sessions: service.sessions(), coalesceMs: 200 });
  const records: AsrRecord[] = [];
  const done = pipeline(frames, stt, collect(records));
  // toFrames keeps the latest frame until the next (it may be the final one): two in, one out.
  frames.write(pcm.subarray(0, 6400));
  await until(() => service.stats.accepted === 1, 'the held frame sent after coalesceMs');
  frames.end();
  await done;
  assert.equal(records.at(-1)!.is_final, true);
});

test('409 mid-stream: a fresh session (new UUID) continues, times keep increasing, no word twice', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 3, action: { type: 'refuse', error: localServiceError('SESSION_EXPIRED', 'gone') } });
  const events: TranscriptEvent[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream(on(service));
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, assembleTranscript(), collect(events));
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  // The new session starts where the service had finalised the audio, and hears the rest of
  // what the failed one accepted (two 0.5 s frames) again.
  assert.equal(resumedAt(changes[0]!), 1, 'the new session goes on where the accepted audio ended');
  const committed = events.filter((e) => e.type === 'utterance').flatMap((e) => e.words);
  for (let i = 1; i < committed.length; i++)
    assert.ok(committed[i]!.start_time >= committed[i - 1]!.end_time - 1e-6);
  assert.equal(events.at(-1)!.type, 'final');
});

test('408 SESSION_IDLE_TIMEOUT mid-stream: a fresh session (new UUID) continues', async () => {
  const service = new FakeLiveService();
  service.fault({
    nth: 3,
    action: { type: 'refuse', error: localServiceError('SESSION_IDLE_TIMEOUT', 'idle') },
  });
  const records: AsrRecord[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream(on(service));
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.equal((changes[0]!.error as SpeechServiceError).status, 408);
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.ok(resumedAt(changes[0]!) > 0);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('an answer broken off after the frame was accepted restarts the session instead of failing the pipeline', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 2, action: { type: 'cut' } });
  const records: AsrRecord[] = [];
  const stt = sttStream(on(service));
  let errors = 0;
  stt.on('session-error', () => errors++);
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  assert.equal(errors, 1);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('an outage longer than five restarts: sessions restart with backoff and the stream rides it out', async () => {
  const service = new FakeLiveService();
  service.fault({
    nth: 2,
    times: 12,
    action: { type: 'refuse', error: status(503, 'SERVER_DEPENDENCY_FAILURE') },
  });
  const records: AsrRecord[] = [];
  const stt = sttStream(on(service, { restartBackoff: { baseMs: 5, maxMs: 20 } }));
  let errors = 0;
  stt.on('session-error', () => errors++);
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  assert.ok(errors > 5, `${errors} restarts`);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('sessions that keep failing fail the stream once restartWithinMs has passed', async () => {
  const service = new FakeLiveService();
  service.fault({
    times: Number.POSITIVE_INFINITY,
    action: { type: 'refuse', error: status(503, 'SERVER_DEPENDENCY_FAILURE') },
  });
  const stt = sttStream(on(service, { restartWithinMs: 200, restartBackoff: { baseMs: 20, maxMs: 40 } }));
  let errors = 0;
  stt.on('session-error', () => errors++);
  await assert.rejects(
    pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect([])),
    (err: SpeechServiceError) => err.status === 503,
  );
  assert.ok(errors >= 3, `${errors} restarts before giving up`);
});

test('a non-restartable error (422) fails the pipeline', async () => {
  const service = new FakeLiveService();
  service.fault({
    nth: 2,
    action: { type: 'refuse', error: localServiceError('AUDIO_DURATION_EXCEEDED', 'too long') },
  });
  await assert.rejects(pipeline(source(pcm), toFrames(), sttStream(on(service)), collect([])), {
    status: 422,
  });
  assert.equal(service.running(), 0, 'the failed session gave its slot back');
});

test('an input with no audio fails with a MediaError that says so, and leaves no session open', async () => {
  const service = new FakeLiveService();
  for (const make of [sttStream, diarizationStream]) {
    await assert.rejects(
      pipeline(Readable.from([], { objectMode: false }), toFrames(), make(on(service)), collect([])),
      (err: Error) => err instanceof MediaError && /no audio/.test(err.message),
    );
  }
  assert.equal(service.stats.started, 0);
  assert.equal(service.stats.channelsOpen, 0);
  assert.equal(service.running(), 0);
  assert.equal(service.running('diarization'), 0);
});

test('an expiry (keepalive off, the source stalls): a fresh session continues, times keep increasing', async () => {
  const service = new FakeLiveService({ expiryMs: 300 });
  const stt = sttStream(on(service, { keepaliveMs: 0 }));
  const changes: SessionChange[] = [];
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  // The source stalls for three expiry windows.
  await pipeline(stalling(pcm, 64000, 900), toFrames({ frameMs: 500 }), stt, collect(records));
  assert.equal(service.stats.expired, 1, 'the first session expired');
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.equal((changes[0]!.error as SpeechServiceError).code, 'SESSION_EXPIRED');
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.ok(resumedAt(changes[0]!) > 0);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
  assert.ok(
    words(records).some((w) => w.start_time > changes[0]!.offsetSec),
    'the new session heard speech',
  );
});

test('backpressure: a slow service makes write() return false; frames in flight stay bounded', async () => {
  const service = new FakeLiveService({ delayMs: 5 });
  const stt = sttStream(on(service));
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  const frameBytes = 3200;
  const frames = Math.floor(pcm.length / frameBytes);
  let refused = 0;
  let maxBuffered = 0;
  for (let i = 0; i < frames; i++) {
    const frame = audio(pcm.subarray(i * frameBytes, (i + 1) * frameBytes), i === frames - 1, 'en');
    const ok = stt.write(frame);
    maxBuffered = Math.max(maxBuffered, stt.writableLength);
    if (!ok) {
      refused++;
      await new Promise((resolve) => stt.once('drain', resolve));
    }
  }
  stt.end();
  await new Promise((resolve) => stt.once('finish', resolve));
  assert.ok(refused > 0, 'write() returned false while the service was slow');
  assert.ok(maxBuffered <= stt.writableHighWaterMark + 1, `${maxBuffered} frames buffered`);
  await new Promise((resolve) => (stt.readableEnded ? resolve(undefined) : stt.once('end', resolve)));
  assert.equal(records.at(-1)!.is_final, true);

  // Through a pipeline: the source is read only as far ahead of what the service accepted as
  // the buffers in between hold (toFrames 64 KiB in and 16 frames out, sttStream 4 frames, one
  // in flight: about 44 frames of 3200 bytes), however much it has. That keeps memory flat.
  const accepted0 = service.stats.accepted;
  const accepted = () => service.stats.accepted - accepted0;
  let pulled = 0;
  let maxAhead = 0;
  const endless = new Readable({
    highWaterMark: frameBytes,
    read() {
      // Ends once the service accepted 60 frames; without backpressure all 400 are read at once.
      if (accepted() >= 60 || pulled === 400) {
        this.push(null);
        return;
      }
      pulled++;
      maxAhead = Math.max(maxAhead, pulled - accepted());
      this.push(pcm.subarray(0, frameBytes));
    },
  });
  const piped: AsrRecord[] = [];
  await pipeline(endless, toFrames(), sttStream(on(service)), collect(piped));
  assert.equal(piped.at(-1)!.is_final, true);
  assert.equal(accepted(), pulled, 'every frame read was sent');
  assert.ok(maxAhead <= 64, `the source was read ${maxAhead} frames ahead of the service`);
});

test('a stalled source gets keepalive audio before the session would expire', async () => {
  const service = new FakeLiveService({ expiryMs: 600 });
  const stt = sttStream(on(service, { keepaliveMs: 150 }));
  let keepalives = 0;
  const changes: SessionChange[] = [];
  stt.on('keepalive', () => keepalives++);
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  // The source stalls for longer than the expiry; a keepalive goes every quarter of it.
  await pipeline(stalling(pcm, 64000, 1000, 128000), toFrames({ frameMs: 500 }), stt, collect(records));
  assert.ok(keepalives >= 3, `${keepalives} keepalives`);
  assert.equal(changes.length, 0, 'the session never expired');
  assert.equal(service.stats.expired, 0);
  assert.equal(records.at(-1)!.is_final, true);

  // The keepalive silence is not the source's audio: what was said after the stall keeps the
  // times it has without a stall.
  const reference: AsrRecord[] = [];
  await pipeline(
    source(pcm.subarray(0, 128000)),
    toFrames({ frameMs: 500 }),
    sttStream(on(service, { keepaliveMs: 0 })),
    collect(reference),
  );
  const last = words(records).at(-1)!;
  const expected = words(reference).at(-1)!;
  assert.ok(expected.start_time > 2.5, 'the reference has a word after the stall point');
  assert.ok(
    Math.abs(last.start_time - expected.start_time) < 0.05 &&
      Math.abs(last.end_time - expected.end_time) < 0.05,
    `last word at ${last.start_time}-${last.end_time}, without the stall ${expected.start_time}-${expected.end_time}`,
  );
});

test('diarizationStream: keepalive silence does not delay the segments after a stall', async () => {
  const service = new FakeLiveService({ expiryMs: 600 });
  const run = async (stall: boolean) => {
    const stream = diarizationStream(on(service, { keepaliveMs: stall ? 150 : 0 }));
    let keepalives = 0;
    stream.on('keepalive', () => keepalives++);
    const records: DiarizationRecord[] = [];
    await pipeline(
      stalling(pcm, 64000, stall ? 1000 : 0, 160000),
      toFrames({ frameMs: 500 }),
      stream,
      collect(records),
    );
    const segments = records.flatMap((r) => r.final_segments.concat(r.is_final ? r.active_segments : []));
    return { keepalives, last: segments.sort((x, y) => x.start_time - y.start_time).at(-1)! };
  };
  const stalled = await run(true);
  const reference = await run(false);
  assert.ok(stalled.keepalives >= 3, `${stalled.keepalives} keepalives`);
  assert.equal(service.stats.expired, 0);
  assert.ok(reference.last.start_time > 2.5, 'a segment after the stall point');
  assert.ok(
    Math.abs(stalled.last.start_time - reference.last.start_time) < 0.05,
    `last segment at ${stalled.last.start_time}, without the stall ${reference.last.start_time}`,
  );
});

/** Sessions of `factory` that `wrap` instruments before they are used. */
function instrumented(factory: LiveSessionFactory, wrap: (session: LiveSession) => void): LiveSessionFactory {
  return ((kind, options) => {
    const session = factory(kind, options);
    wrap(session);
    return session;
  }) as LiveSessionFactory;
}

/** Sessions that hold their `n`-th send (counted over all of them) until released. */
function holding(factory: LiveSessionFactory, n: number) {
  let sends = 0;
  let release!: () => void;
  let started!: () => void;
  const inFlight = new Promise<void>((resolve) => (started = resolve));
  const held = new Promise<void>((resolve) => (release = resolve));
  const sessions = instrumented(factory, (session) => {
    const send = session.send.bind(session);
    session.send = async (...a: Parameters<LiveSession['send']>) => {
      if (++sends === n) {
        started();
        await held;
      }
      return send(...a);
    };
  });
  return { sessions, inFlight, release, sends: () => sends };
}

test('rotation end to end: one final record downstream, assembleTranscript commits every session', async () => {
  const service = new FakeLiveService();
  const changes: SessionChange[] = [];
  const stt = sttStream(on(service, { rotateAfterSec: 2, forceRotateAfterSec: 6 }));
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  const events: TranscriptEvent[] = [];
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
  assert.ok(changes.length >= 1 && changes.every((c) => c.reason === 'rotate'));
  assert.equal(service.stats.finished, changes.length + 1, 'each rotated session finished at the service');
  assert.equal(records.filter((r) => r.is_final).length, 1, 'only the last session is final downstream');
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
  const finals = events.filter((e) => e.type === 'final');
  assert.equal(finals.length, 1);
  assert.equal(events.at(-1), finals[0]);
  const committed = events.flatMap((e) => (e.type === 'utterance' ? e.words : []));
  assert.deepEqual(finals[0]!.words, committed);
  // Words from before and after every rotation point made it into the transcript.
  for (const c of changes) {
    assert.ok(committed.some((w) => w.end_time <= c.offsetSec));
    assert.ok(committed.some((w) => w.start_time >= c.offsetSec));
  }
});

test('rotation waits for a pause after it became due, not for an earlier one', async () => {
  const service = new FakeLiveService();
  // Where the speech is: the utterances of one session over the same audio.
  const reference: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), sttStream(on(service)), collect(reference));
  const spans = reference
    .filter((r) => (r.is_speech_final || r.is_final) && r.words.length > 0)
    .map((r) => [r.words[0]!.start_time, r.words.at(-1)!.end_time] as const);
  assert.ok(spans.length >= 3);
  // Due in the middle of the second utterance, after the first pause was heard.
  const due = (spans[1]![0] + spans[1]![1]) / 2;
  const changes: SessionChange[] = [];
  const stt = sttStream(on(service, { rotateAfterSec: due, forceRotateAfterSec: 1000 }));
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, collect([]));
  assert.ok(changes.length >= 1);
  const at = changes[0]!.offsetSec;
  assert.ok(at >= due, `rotated at ${at} s, due at ${due} s`);
  for (const [start, end] of spans)
    assert.ok(!(start < at && at < end), `rotated at ${at} s inside ${start}-${end} s`);
});

test('diarization rotation end to end: a rotated session closes its active segments; one timeline', async () => {
  const service = new FakeLiveService();
  const rawFinals: DiarizationRecord[] = [];
  const sessions = instrumented(service.sessions(), (session) =>
    session.on('final', (r) => rawFinals.push(r as DiarizationRecord)),
  );
  const changes: SessionChange[] = [];
  // Forced rotation every 1.25 s (five 250 ms frames) cuts some sessions in mid-speech.
  const stream = diarizationStream({ sessions, coalesceMs: 0, rotateAfterSec: 1, forceRotateAfterSec: 1 });
  stream.on('session', (c: SessionChange) => changes.push(c));
  const records: DiarizationRecord[] = [];
  stream.on('data', (r: DiarizationRecord) => records.push(r));
  const events: DiarizationEvent[] = [];
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stream, mergeDiarization(), collect(events));
  assert.ok(changes.length >= 2 && changes.every((c) => c.reason === 'rotate'));
  assert.equal(records.filter((r) => r.is_final).length, 1);
  assert.equal(records.at(-1)!.is_final, true);
  const timelines = events.filter((e) => e.type === 'timeline');
  assert.equal(timelines.length, 1);
  assert.equal(events.at(-1), timelines[0]);
  const timeline = timelines[0]!.segments;
  for (let i = 1; i < timeline.length; i++)
    assert.ok(timeline[i]!.start_time >= timeline[i - 1]!.end_time - 1e-6, 'closed segments in order');
  // What a rotated session still had active at its end is closed, in the timeline for good.
  let closedAtRotation = 0;
  changes.forEach((change, k) => {
    const offset = k === 0 ? 0 : changes[k - 1]!.offsetSec;
    const final = rawFinals.find((r) => r.id === change.previousId)!;
    for (const seg of final.active_segments) {
      closedAtRotation++;
      const speaker = k === 0 ? seg.speaker : `${seg.speaker}#${k}`;
      assert.ok(
        timeline.some(
          (t) =>
            t.speaker === speaker &&
            t.start_time <= seg.start_time + offset + 1e-6 &&
            t.end_time >= seg.end_time! + offset - 1e-6,
        ),
        `${speaker} ${seg.start_time + offset}-${seg.end_time! + offset} s`,
      );
    }
  });
  assert.ok(closedAtRotation > 0, 'some session was cut while someone spoke');
});

test('frames arriving while a keepalive is in flight: one keepalive loop, nothing sent after the end', {
  timeout: 10_000, // without a keepalive, the held send never comes
}, async () => {
  const service = new FakeLiveService();
  // The second send is the keepalive: the next frame is written only once it started.
  const hold = holding(service.sessions(), 2);
  const stt = sttStream({ sessions: hold.sessions, coalesceMs: 0, keepaliveMs: 5 });
  let keepalives = 0;
  stt.on('keepalive', () => keepalives++);
  const errors: unknown[] = [];
  stt.on('error', (e) => errors.push(e));
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  const closed = new Promise((resolve) => stt.once('close', resolve));
  const frame = (i: number, isFinal = false) =>
    audio(pcm.subarray(i * 32000, (i + 1) * 32000), isFinal, 'en');
  await writeFrame(stt, frame(0));
  await hold.inFlight;
  const second = writeFrame(stt, frame(1));
  stt.end(frame(2, true));
  hold.release();
  await second;
  await closed;
  const sent = hold.sends();
  // Many keepalive periods: a timer left armed would have fired (and failed) by now.
  await sleep(100);
  assert.deepEqual(errors, []);
  assert.equal(hold.sends(), sent, 'no send after the end');
  assert.equal(sent, 4);
  assert.equal(keepalives, 1);
  assert.equal(records.at(-1)!.is_final, true);
});

for (const [name, fault] of [
  ['the answer to the closing frame breaks off', { nth: 5, action: { type: 'cut' } }],
  [
    'the closing frame is answered without its final record',
    { match: (f: { isFinal: boolean }) => f.isFinal, action: { type: 'dropFinal' } },
  ],
] as const) {
  test(`rotation: ${name}; the stream goes on in a fresh session`, async () => {
    const service = new FakeLiveService();
    // Forced rotation after 1 s of 250 ms frames: the fifth frame closes the first session.
    service.fault(fault);
    const changes: SessionChange[] = [];
    const errors: unknown[] = [];
    const stt = sttStream(on(service, { rotateAfterSec: 1, forceRotateAfterSec: 1 }));
    stt.on('session', (c: SessionChange) => changes.push(c));
    stt.on('session-error', (e) => errors.push(e));
    const events: TranscriptEvent[] = [];
    await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
    assert.equal(errors.length, 1);
    assert.equal(changes[0]!.reason, 'rotate');
    assert.equal(changes[0]!.error, errors[0]);
    // The closing frame was accepted but not finalised: it is heard again on the fresh session.
    assert.equal(resumedAt(changes[0]!), 1.25, 'the fresh session goes on after the closing frame');
    assert.ok((changes[0]!.replaySec ?? 0) > 0, 'what was not finalised is heard again');
    assert.ok(changes.slice(1).every((c) => c.reason === 'rotate' && c.error === undefined));
    assert.equal(events.at(-1)!.type, 'final');
  });
}

test('rotation: the closing frame is refused; it opens the fresh session instead', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 5, action: { type: 'refuse', error: localServiceError('SESSION_EXPIRED', 'gone') } });
  const changes: SessionChange[] = [];
  const stt = sttStream(on(service, { rotateAfterSec: 1, forceRotateAfterSec: 1 }));
  stt.on('session', (c: SessionChange) => changes.push(c));
  const events: TranscriptEvent[] = [];
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
  assert.equal(changes[0]!.reason, 'restart');
  assert.equal(resumedAt(changes[0]!), 1, 'the refused frame follows what the next session hears again');
  // The next session's audio counts what it heard again: (1 s heard again + the refused 0.25 s
  // frame) reach the 1 s rotation, and one more frame closes it.
  assert.equal(
    changes[1]!.offsetSec,
    changes[0]!.offsetSec + (changes[0]!.replaySec ?? 0) + 0.5,
    'which closes after its own 1 s and one frame',
  );
  assert.equal(events.at(-1)!.type, 'final');
  assertMonotonic(records);
});

test('a source that ends without a final frame is closed with a short silent final frame', async () => {
  const service = new FakeLiveService();
  const stt = sttStream(on(service));
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  stt.write(audio(pcm.subarray(0, 32000), false, 'en'));
  stt.end(audio(pcm.subarray(32000, 64000), false, 'en'));
  await new Promise((resolve) => stt.once('end', resolve));
  assert.equal(records.at(-1)!.is_final, true);
  assert.deepEqual(
    [...service.heard.values()].map((frames) => frames.map((b) => b.length)),
    [[32000, 32000, CLOSING_PCM_BYTES]],
    'two frames of audio, then a short silence',
  );
  assert.ok([...service.heard.values()][0]!.at(-1)!.every((byte) => byte === 0));
});

test('a source that ends without a final frame just after a rotation still ends with a final record', async () => {
  const service = new FakeLiveService();
  // Forced rotation after 1 s of 250 ms frames: the fifth frame closes the first session.
  const stt = sttStream(on(service, { rotateAfterSec: 1, forceRotateAfterSec: 1 }));
  const changes: SessionChange[] = [];
  stt.on('session', (c: SessionChange) => changes.push(c));
  const events: TranscriptEvent[] = [];
  const done = pipeline(stt, assembleTranscript(), collect(events));
  for (let i = 0; i < 5; i++)
    await writeFrame(stt, audio(pcm.subarray(i * 8000, (i + 1) * 8000), false, 'en'));
  stt.end();
  await done;
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'rotate');
  assert.equal(events.at(-1)!.type, 'final');
});

test('429 SESSION_BYTE_RATE_EXCEEDED tells the pacer to slow down, and nothing fails', async () => {
  const service = new FakeLiveService();
  const pacer = new Pacer();
  service.fault({ nth: 2, action: { type: 'refuse', error: status(429, 'SESSION_BYTE_RATE_EXCEEDED', 50) } });
  const records: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames(), sttStream(on(service, { pacer })), collect(records));
  assert.equal(pacer.penalties, 1);
  assert.equal(service.stats.frames, service.stats.accepted + 1, 'the refused frame was sent again');
  assert.equal(records.at(-1)!.is_final, true);
});

test('diarizationStream: segments relative to the pipeline; labels of a restarted session are kept apart', async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 3, action: { type: 'refuse', error: localServiceError('SESSION_EXPIRED', 'gone') } });
  const records: DiarizationRecord[] = [];
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), diarizationStream(on(service)), collect(records));
  assert.equal(records.at(-1)!.is_final, true);
  const speakers = new Set(
    records.flatMap((r) => r.final_segments.concat(r.active_segments).map((s) => s.speaker)),
  );
  assert.ok(
    [...speakers].some((s) => s.endsWith('#1')),
    [...speakers].join(','),
  );
});

test('a frame still waiting when the stream is destroyed opens no session and holds no slot', async () => {
  const service = new FakeLiveService();
  const stt = sttStream(on(service));
  stt.on('error', () => {});
  const frame = audio(pcm.subarray(0, 3200), false, 'en');
  // The write's callback comes once the frame was sent or given up.
  const written = new Promise((resolve) => stt.write(frame, resolve));
  stt.destroy();
  await written;
  assert.equal(service.stats.started, 0, 'a session was opened after the destroy');
  assert.equal(service.stats.channelsOpen, 0);
  assert.equal(service.running(), 0);
});

test('a stream that fails or is destroyed closes only once its sessions are over at the service', async () => {
  const service = new FakeLiveService();
  for (const how of ['destroy', 'pipeline error'] as const) {
    const stt = sttStream(on(service));
    stt.on('error', () => {});
    await writeFrame(stt, audio(pcm.subarray(0, 32000), false, 'en'));
    assert.equal(service.stats.live, 1);
    const closed = new Promise((resolve) => stt.once('close', resolve));
    if (how === 'destroy') stt.destroy();
    else stt.destroy(new Error('a later stage failed'));
    await closed;
    // Nothing to wait for after 'close' (a pipeline settles then): no slot, nothing live there.
    assert.equal(service.running(), 0, `${how}: the session's slot is still held`);
    assert.equal(service.stats.live, 0, `${how}: the stream is still live at the service`);
    assert.equal(service.stats.channelsOpen, 0, `${how}: a channel is still open`);
  }
  assert.equal(service.stats.cancelled, 2);
});

test('a long-lived signal keeps no listener of the streams it was given once they end', async () => {
  const service = new FakeLiveService();
  const shutdown = new AbortController();
  for (let i = 0; i < 3; i++) {
    await pipeline(
      source(pcm.subarray(0, 32000)),
      toFrames({ language: 'en' }),
      sttStream(on(service, { signal: shutdown.signal })),
      collect([]),
    );
  }
  assert.equal(getEventListeners(shutdown.signal, 'abort').length, 0);
  // And the signal still stops a stream with its reason.
  const reason = new Error('shutting down');
  const stt = sttStream(on(service, { signal: shutdown.signal }));
  stt.once('data', () => shutdown.abort(reason));
  await assert.rejects(
    pipeline(source(pcm), toFrames({ language: 'en' }), stt, collect([])),
    (e) => e === reason,
  );
});
