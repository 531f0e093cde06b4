import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { type Duplex, Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterEach, test } from 'node:test';
import { MediaError } from '../src/audio/media-error.ts';
import type { SpeechClient } from '../src/client/client.ts';
import type { LiveSession } from '../src/client/live.ts';
import {
  type AsrRecord,
  type AudioFrame,
  assembleTranscript,
  type DiarizationEvent,
  type DiarizationRecord,
  type Language,
  mergeDiarization,
  Pacer,
  type SpeechServiceError,
  type TranscriptEvent,
  toFrames,
} from '../src/index.ts';
import { diarizationStream, type SessionChange, sttStream } from '../src/transforms/live-stream.ts';
import { until } from './helpers/emulator-fixtures.ts';
import { startService } from './helpers/service.ts';
import { speechWithPauses } from './helpers/speech.ts';

const pcm = await speechWithPauses(
  [
    'Good evening and welcome.',
    'Here is the news at nine.',
    'The weather will be fine tomorrow.',
    'That is all for tonight.',
  ],
  700,
);
const { emulator, client, newClient } = await startService();

/** Pipeline time where the new session's own audio starts: after what it hears again. */
const resumedAt = (c: SessionChange) => c.offsetSec + (c.replaySec ?? 0);

// A failed session is ended at the service in the background (its closing frame, which holds
// its slot); a fault rule added by the next test must not meet that frame instead.
afterEach(() => until(() => client.admissionStats().every((s) => s.running === 0), 'failed sessions ended'));

function collect<T>(into: T[]): Writable {
  return new Writable({
    objectMode: true,
    write(chunk: T, _e, cb) {
      into.push(chunk);
      cb();
    },
  });
}

function source(audio: Buffer, chunk = 4096): Readable {
  const parts: Buffer[] = [];
  for (let i = 0; i < audio.length; i += chunk) parts.push(audio.subarray(i, i + chunk));
  return Readable.from(parts, { objectMode: false });
}

function words(records: AsrRecord[]) {
  return records.filter((r) => r.is_speech_final || r.is_final).flatMap((r) => r.words);
}

function assertMonotonic(records: AsrRecord[]) {
  let last = -1;
  for (const w of words(records)) {
    assert.ok(w.start_time >= last - 1e-6, `word ${w.word} at ${w.start_time} after ${last}`);
    last = w.start_time;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A frame of live audio, as toFrames() makes them. */
function audio(pcm: Buffer, isFinal = false, language: Language = 'en'): AudioFrame {
  return { pcm, isFinal, language };
}

function writeFrame(stream: Writable | Duplex, frame: AudioFrame): Promise<void> {
  return new Promise((resolve, reject) => stream.write(frame, (e) => (e ? reject(e) : resolve())));
}

for (const transport of ['http', 'socketio'] as const) {
  test(`file → toFrames → sttStream over ${transport}: complete on is_final`, async () => {
    const records: AsrRecord[] = [];
    await pipeline(
      source(pcm),
      toFrames({ language: 'en' }),
      sttStream({ client, transport }),
      collect(records),
    );
    assert.equal(records.at(-1)!.is_final, true);
    assert.ok(records.filter((r) => r.is_speech_final).length >= 2);
    assertMonotonic(records);
  });
}

test('defaults agree: toFrames() → sttStream({ client }) sends one POST per second of audio', async () => {
  const before = emulator.stats().requests['stt.http'];
  const records: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames({ language: 'en' }), sttStream({ client }), collect(records));
  assert.equal(emulator.stats().requests['stt.http'] - before, Math.ceil(pcm.length / 32000));
  assert.equal(records.at(-1)!.is_final, true);
});

test('the transport decides the POST size: 100 ms frames (Socket.IO-sized) over HTTP are sent a second at a time', async () => {
  const before = emulator.stats().requests['stt.http'];
  const records: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames({ language: 'en' }), sttStream({ client }), collect(records));
  const posts = emulator.stats().requests['stt.http'] - before;
  assert.ok(
    posts <= Math.ceil(pcm.length / 32000) + 1,
    `${posts} POSTs for ${pcm.length / 32000} s of audio`,
  );
  assert.equal(records.at(-1)!.is_final, true);
  const words = records.flatMap((r) => (r.is_speech_final ? r.words : []));
  const reference: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames({ language: 'en' }), sttStream({ client }), collect(reference));
  assert.deepEqual(
    words.map((w) => w.word),
    reference.flatMap((r) => (r.is_speech_final ? r.words : [])).map((w) => w.word),
  );
});

test('a held short frame is sent when the source pauses, not kept until the next one', async () => {
  const before = emulator.stats().framesAccepted;
  const frames = toFrames({ language: 'en' });
  const stt = sttStream({ client, coalesceMs: 200 });
  const records: AsrRecord[] = [];
  const done = pipeline(frames, stt, collect(records));
  // toFrames keeps the latest frame until the next (it may be the final one): two in, one out.
  frames.write(pcm.subarray(0, 6400));
  await new Promise((r) => setTimeout(r, 600));
  assert.equal(emulator.stats().framesAccepted - before, 1, 'the held frame went out after coalesceMs');
  frames.end();
  await done;
  assert.equal(records.at(-1)!.is_final, true);
});

test('409 mid-stream: a fresh session (new UUID) continues, times keep increasing, no word twice', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 3,
    action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' },
  });
  const events: TranscriptEvent[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, assembleTranscript(), collect(events));
  fault.remove();
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

test('a response broken mid-NDJSON restarts the session instead of failing the pipeline', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'reset', afterBytes: 10 },
  });
  const records: AsrRecord[] = [];
  const stt = sttStream({ coalesceMs: 0, client });
  let errors = 0;
  stt.on('session-error', () => errors++);
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.equal(errors, 1);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('an outage longer than five restarts: sessions restart with backoff and the stream rides it out', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    times: 24, // shared by the restarted sessions and the closing frames of the failed ones
    action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE' },
  });
  const records: AsrRecord[] = [];
  const stt = sttStream({ coalesceMs: 0, client, restartBackoff: { baseMs: 5, maxMs: 20 } });
  let errors = 0;
  stt.on('session-error', () => errors++);
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.ok(errors > 5, `${errors} restarts`);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('sessions that keep failing fail the stream once restartWithinMs has passed', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE' },
  });
  const stt = sttStream({
    coalesceMs: 0,
    client,
    restartWithinMs: 200,
    restartBackoff: { baseMs: 20, maxMs: 40 },
  });
  let errors = 0;
  stt.on('session-error', () => errors++);
  await assert.rejects(
    pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect([])),
    (err: SpeechServiceError) => err.status === 503,
  );
  fault.remove();
  assert.ok(errors >= 3, `${errors} restarts before giving up`);
});

test('an input with no audio fails with a MediaError that says so, and leaves no session open', async () => {
  const own = newClient();
  for (const make of [sttStream, diarizationStream]) {
    await assert.rejects(
      pipeline(Readable.from([], { objectMode: false }), toFrames(), make({ client: own }), collect([])),
      (err: Error) => err instanceof MediaError && /no audio/.test(err.message),
    );
  }
  assert.ok(own.admissionStats().every((s) => s.running === 0));
});

test('408 SESSION_IDLE_TIMEOUT mid-stream: a fresh session (new UUID) continues', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 3,
    action: { type: 'status', status: 408, code: 'SESSION_IDLE_TIMEOUT' },
  });
  const records: AsrRecord[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.equal((changes[0]!.error as SpeechServiceError).status, 408);
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.ok(resumedAt(changes[0]!) > 0);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('a real expiry (keepalive off, the source stalls): a fresh session continues, times keep increasing', async () => {
  const short = await startService({ limits: { sessionExpirySec: 0.3 } });
  const stt = sttStream({ coalesceMs: 0, client: short.client, keepaliveMs: 0 });
  const changes: SessionChange[] = [];
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  await pipeline(
    Readable.from(
      (async function* () {
        yield pcm.subarray(0, 64000);
        await sleep(1000); // the source stalls for three expiry windows
        yield pcm.subarray(64000);
      })(),
      { objectMode: false },
    ),
    toFrames({ frameMs: 500 }),
    stt,
    collect(records),
  );
  assert.equal(short.emulator.stats().sessions.expired, 1, 'the first session expired');
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

test('a Socket.IO connection reset mid-stream restarts the session', async () => {
  const own = newClient();
  const fault = emulator.faults.add({ operation: 'stt.socket', nth: 3, action: { type: 'reset' } });
  const records: AsrRecord[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client: own, transport: 'socketio' });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('a non-restartable error (422) fails the pipeline', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 422, code: 'AUDIO_DURATION_EXCEEDED' },
  });
  await assert.rejects(pipeline(source(pcm), toFrames(), sttStream({ coalesceMs: 0, client }), collect([])), {
    status: 422,
  });
  fault.remove();
});

test('backpressure: a slow service makes write() return false; frames in flight stay bounded', async () => {
  const slow = await startService({ latency: { perRequestMs: 30 } });
  const stt = sttStream({ coalesceMs: 0, client: slow.client });
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
  const accepted0 = slow.emulator.stats().framesAccepted;
  const accepted = () => slow.emulator.stats().framesAccepted - accepted0;
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
  await pipeline(endless, toFrames(), sttStream({ coalesceMs: 0, client: slow.client }), collect(piped));
  assert.equal(piped.at(-1)!.is_final, true);
  assert.equal(accepted(), pulled, 'every frame read was sent');
  assert.ok(maxAhead <= 64, `the source was read ${maxAhead} frames ahead of the service`);
});

test('a stalled source gets keepalive audio before the session would expire', async () => {
  const short = await startService({ limits: { sessionExpirySec: 0.4 } });
  const stt = sttStream({ coalesceMs: 0, client: short.client, keepaliveMs: 150 });
  let keepalives = 0;
  const changes: SessionChange[] = [];
  stt.on('keepalive', () => keepalives++);
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  const done = pipeline(
    Readable.from(
      (async function* () {
        yield pcm.subarray(0, 64000);
        await new Promise((r) => setTimeout(r, 1000)); // the source stalls for 2.5 expiry windows
        yield pcm.subarray(64000, 128000);
      })(),
      { objectMode: false },
    ),
    toFrames({ frameMs: 500 }),
    stt,
    collect(records),
  );
  await done;
  assert.ok(keepalives >= 3, `${keepalives} keepalives`);
  assert.equal(changes.length, 0, 'the session never expired');
  assert.equal(records.at(-1)!.is_final, true);

  // The keepalive silence is not the source's audio: what was said after the stall keeps the
  // times it has without a stall.
  const reference: AsrRecord[] = [];
  await pipeline(
    source(pcm.subarray(0, 128000)),
    toFrames({ frameMs: 500 }),
    sttStream({ coalesceMs: 0, client: short.client, keepaliveMs: 0 }),
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
  const short = await startService({ limits: { sessionExpirySec: 0.4 } });
  const run = async (stall: boolean) => {
    const stream = diarizationStream({ coalesceMs: 0, client: short.client, keepaliveMs: stall ? 150 : 0 });
    let keepalives = 0;
    stream.on('keepalive', () => keepalives++);
    const records: DiarizationRecord[] = [];
    await pipeline(
      Readable.from(
        (async function* () {
          yield pcm.subarray(0, 64000);
          if (stall) await sleep(1000);
          yield pcm.subarray(64000, 160000);
        })(),
        { objectMode: false },
      ),
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
  assert.ok(reference.last.start_time > 2.5, 'a segment after the stall point');
  assert.ok(
    Math.abs(stalled.last.start_time - reference.last.start_time) < 0.05,
    `last segment at ${stalled.last.start_time}, without the stall ${reference.last.start_time}`,
  );
});

/** A client whose sessions `wrap` instruments before they are used. */
function instrumented(base: SpeechClient, wrap: (session: LiveSession) => void): SpeechClient {
  const open = (...args: Parameters<SpeechClient['live']['open']>) => {
    const session = base.live.open(...args) as LiveSession;
    wrap(session);
    return session;
  };
  return { live: { open } } as unknown as SpeechClient;
}

/** A client whose sessions hold their `n`-th send until released (`inFlight`: it started). */
function holdingClient(base: SpeechClient, n: number) {
  let sends = 0;
  let release!: () => void;
  let started!: () => void;
  const inFlight = new Promise<void>((resolve) => (started = resolve));
  const held = new Promise<void>((resolve) => (release = resolve));
  const client = instrumented(base, (session) => {
    const send = session.send.bind(session);
    session.send = async (...a: Parameters<LiveSession['send']>) => {
      if (++sends === n) {
        started();
        await held;
      }
      return send(...a);
    };
  });
  return { client, inFlight, release, sends: () => sends };
}

test('rotation end to end: one final record downstream, assembleTranscript commits every session', async () => {
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client, rotateAfterSec: 2, forceRotateAfterSec: 6 });
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  const events: TranscriptEvent[] = [];
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
  assert.ok(changes.length >= 1 && changes.every((c) => c.reason === 'rotate'));
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
  // Where the speech is: the utterances of one session over the same audio.
  const reference: AsrRecord[] = [];
  await pipeline(
    source(pcm),
    toFrames({ frameMs: 250 }),
    sttStream({ coalesceMs: 0, client }),
    collect(reference),
  );
  const spans = reference
    .filter((r) => (r.is_speech_final || r.is_final) && r.words.length > 0)
    .map((r) => [r.words[0]!.start_time, r.words.at(-1)!.end_time] as const);
  assert.ok(spans.length >= 3);
  // Due in the middle of the second utterance, after the first pause was heard.
  const due = (spans[1]![0] + spans[1]![1]) / 2;
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client, rotateAfterSec: due, forceRotateAfterSec: 1000 });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, collect([]));
  assert.ok(changes.length >= 1);
  const at = changes[0]!.offsetSec;
  assert.ok(at >= due, `rotated at ${at} s, due at ${due} s`);
  for (const [start, end] of spans)
    assert.ok(!(start < at && at < end), `rotated at ${at} s inside ${start}-${end} s`);
});

test('diarization rotation end to end: a rotated session closes its active segments; one timeline', async () => {
  const rawFinals: DiarizationRecord[] = [];
  const tapped = instrumented(client, (session) =>
    session.on('final', (r) => rawFinals.push(r as DiarizationRecord)),
  );
  const changes: SessionChange[] = [];
  // Forced rotation every 1.25 s (five 250 ms frames) cuts some sessions in mid-speech.
  const stream = diarizationStream({
    coalesceMs: 0,
    client: tapped,
    rotateAfterSec: 1,
    forceRotateAfterSec: 1,
  });
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

test('frames arriving while a keepalive is in flight: one keepalive loop, nothing sent after the end', async () => {
  // The second send is the keepalive: the next frame is written only once it started.
  const hold = holdingClient(client, 2);
  const stt = sttStream({ coalesceMs: 0, client: hold.client, keepaliveMs: 5 });
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

for (const [name, action] of [
  ['the response to the closing frame breaks', { type: 'reset', afterBytes: 10 }],
  ['the closing frame is answered without its final record', { type: 'endWithoutFinal' }],
] as const) {
  test(`rotation: ${name}; the stream goes on in a fresh session`, async () => {
    // Forced rotation after 1 s of 250 ms frames: the fifth POST closes the first session.
    const fault = emulator.faults.add({
      operation: 'stt.http',
      nth: action.type === 'endWithoutFinal' ? 1 : 5,
      action,
    });
    const changes: SessionChange[] = [];
    const errors: unknown[] = [];
    const stt = sttStream({ coalesceMs: 0, client, rotateAfterSec: 1, forceRotateAfterSec: 1 });
    stt.on('session', (c: SessionChange) => changes.push(c));
    stt.on('session-error', (e) => errors.push(e));
    const events: TranscriptEvent[] = [];
    await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
    fault.remove();
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
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 5,
    action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' },
  });
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client, rotateAfterSec: 1, forceRotateAfterSec: 1 });
  stt.on('session', (c: SessionChange) => changes.push(c));
  const events: TranscriptEvent[] = [];
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  await pipeline(source(pcm), toFrames({ frameMs: 250 }), stt, assembleTranscript(), collect(events));
  fault.remove();
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
  const stt = sttStream({ coalesceMs: 0, client });
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  stt.write(audio(pcm.subarray(0, 32000), false, 'en'));
  stt.end(audio(pcm.subarray(32000, 64000), false, 'en'));
  await new Promise((resolve) => stt.once('end', resolve));
  assert.equal(records.at(-1)!.is_final, true);
});

test('a source that ends without a final frame just after a rotation still ends with a final record', async () => {
  // Forced rotation after 1 s of 250 ms frames: the fifth frame closes the first session.
  const stt = sttStream({ coalesceMs: 0, client, rotateAfterSec: 1, forceRotateAfterSec: 1 });
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
  const pacer = new Pacer();
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 429, code: 'SESSION_BYTE_RATE_EXCEEDED', retryAfter: 0.05 },
  });
  const records: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames(), sttStream({ coalesceMs: 0, client, pacer }), collect(records));
  fault.remove();
  assert.equal(pacer.penalties, 1);
  assert.equal(records.at(-1)!.is_final, true);
});

test('diarizationStream: segments relative to the pipeline; labels of a restarted session are kept apart', async () => {
  const fault = emulator.faults.add({
    operation: 'diarization.http',
    nth: 3,
    action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' },
  });
  const records: DiarizationRecord[] = [];
  await pipeline(
    source(pcm),
    toFrames({ frameMs: 500 }),
    diarizationStream({ coalesceMs: 0, client }),
    collect(records),
  );
  fault.remove();
  assert.equal(records.at(-1)!.is_final, true);
  const speakers = new Set(
    records.flatMap((r) => r.final_segments.concat(r.active_segments).map((s) => s.speaker)),
  );
  assert.ok(
    [...speakers].some((s) => s.endsWith('#1')),
    [...speakers].join(','),
  );
});

test('destroying the stream aborts the session and leaves nothing open', async () => {
  const own = newClient();
  const stt = sttStream({ coalesceMs: 0, client: own });
  await new Promise<void>((resolve, reject) =>
    stt.write(audio(pcm.subarray(0, 32000), false, 'en'), (e) => (e ? reject(e) : resolve())),
  );
  const before = emulator.stats().sessions;
  stt.destroy();
  await new Promise((resolve) => stt.once('close', resolve));
  // The session is ended at the service (a closing frame); its slot is held until then.
  await until(
    () => own.admissionStats().find((s) => s.workload === 'realtime_asr')!.running === 0,
    'the slot given back',
  );
  const after = emulator.stats().sessions;
  assert.equal(after.active, before.active - 1, 'the stream is still live at the service');
});

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: a stream that fails or is destroyed closes only once its sessions are over at the service`, async () => {
    const own = newClient();
    const running = () => own.admissionStats().find((s) => s.workload === 'realtime_asr')!.running;
    for (const how of ['destroy', 'pipeline error'] as const) {
      const before = emulator.stats().sessions.active;
      const stt = sttStream({ coalesceMs: 0, client: own, transport });
      stt.on('error', () => {});
      await new Promise<void>((resolve, reject) =>
        stt.write(audio(pcm.subarray(0, 32000), false, 'en'), (e) => (e ? reject(e) : resolve())),
      );
      assert.equal(emulator.stats().sessions.active, before + 1);
      const closed = new Promise((resolve) => stt.once('close', resolve));
      if (how === 'destroy') stt.destroy();
      else stt.destroy(new Error('a later stage failed'));
      await closed;
      // Nothing to wait for after 'close' (a pipeline settles then): no slot, nothing live there.
      assert.equal(running(), 0, `${how}: the client still holds the session's slot`);
      assert.equal(
        emulator.stats().sessions.active,
        before,
        `${how}: the stream is still live at the service`,
      );
    }
  });

  test(`${transport}: a frame still waiting when the stream is destroyed opens no session and holds no slot`, async () => {
    const own = newClient();
    const opened = emulator.stats().sessions.opened;
    const stt = sttStream({ coalesceMs: 0, client: own, transport });
    stt.on('error', () => {});
    const frame = audio(pcm.subarray(0, 3200), false, 'en');
    // The write's callback comes once the frame was sent or given up.
    const written = new Promise((resolve) => stt.write(frame, resolve));
    stt.destroy();
    await written;
    assert.equal(emulator.stats().sessions.opened, opened, 'a session was opened after the destroy');
    assert.equal(own.admissionStats().find((s) => s.workload === 'realtime_asr')!.running, 0);
  });
}

test('a long-lived signal keeps no listener of the streams it was given once they end', async () => {
  const shutdown = new AbortController();
  for (let i = 0; i < 3; i++) {
    await pipeline(
      source(pcm.subarray(0, 32000)),
      toFrames({ language: 'en' }),
      sttStream({ client, signal: shutdown.signal }),
      collect([]),
    );
  }
  assert.equal(getEventListeners(shutdown.signal, 'abort').length, 0);
  // And the signal still stops a stream with its reason.
  const reason = new Error('shutting down');
  const stt = sttStream({ client, signal: shutdown.signal });
  stt.once('data', () => shutdown.abort(reason));
  await assert.rejects(
    pipeline(source(pcm), toFrames({ language: 'en' }), stt, collect([])),
    (e) => e === reason,
  );
});

test('client.close() during the pause before a restart fails the stream at once with ERR_CLIENT_CLOSED', {
  timeout: 20_000,
}, async () => {
  const own = newClient();
  // Ten minutes: a stream that sleeps it out after close() would outlast the test.
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    times: 1,
    action: { type: 'status', status: 503, retryAfter: 600 },
  });
  try {
    const stt = sttStream({ coalesceMs: 0, client: own });
    stt.once('session-error', () => void own.close());
    await assert.rejects(
      pipeline(source(pcm), toFrames({ language: 'en', frameMs: 500 }), stt, collect([])),
      { name: 'TransportError', code: 'ERR_CLIENT_CLOSED' },
    );
  } finally {
    fault.remove();
  }
});
