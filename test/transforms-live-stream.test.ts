import assert from 'node:assert/strict';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import {
  type AsrRecord,
  assembleTranscript,
  type DiarizationRecord,
  encodeFrame,
  Pacer,
  randomUuid,
  type TranscriptEvent,
  toFrames,
} from '../src/index.ts';
import { diarizationStream, type SessionChange, sttStream } from '../src/transforms/live-stream.ts';
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

for (const transport of ['http', 'socketio'] as const) {
  test(`file → toFrames → sttStream over ${transport}: complete on is_final`, async () => {
    const records: AsrRecord[] = [];
    await pipeline(
      source(pcm),
      toFrames({ transport, language: 'en' }),
      sttStream({ client, transport }),
      collect(records),
    );
    assert.equal(records.at(-1)!.is_final, true);
    assert.ok(records.filter((r) => r.is_speech_final).length >= 2);
    assertMonotonic(records);
  });
}

test('409 mid-stream: a fresh session (new UUID) continues, times keep increasing, no word twice', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 3,
    action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' },
  });
  const events: TranscriptEvent[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream({ client });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(
    source(pcm),
    toFrames({ transport: 'http', frameMs: 500 }),
    stt,
    assembleTranscript(),
    collect(events),
  );
  fault.remove();
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.ok(changes[0]!.offsetSec > 0, 'the new session starts where the accepted audio ended');
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
  const stt = sttStream({ client });
  let errors = 0;
  stt.on('session-error', () => errors++);
  await pipeline(source(pcm), toFrames({ transport: 'http', frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.equal(errors, 1);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

test('a non-restartable error (422) fails the pipeline', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 422, code: 'AUDIO_DURATION_EXCEEDED' },
  });
  await assert.rejects(
    pipeline(source(pcm), toFrames({ transport: 'http' }), sttStream({ client }), collect([])),
    { status: 422 },
  );
  fault.remove();
});

test('backpressure: a slow service makes write() return false; frames in flight stay bounded', async () => {
  const slow = await startService({ latency: { perRequestMs: 30 } });
  const stt = sttStream({ client: slow.client });
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  const id = randomUuid();
  const frameBytes = 3200;
  const frames = Math.floor(pcm.length / frameBytes);
  let refused = 0;
  let maxBuffered = 0;
  for (let i = 0; i < frames; i++) {
    const frame = encodeFrame({
      streamId: id,
      isStart: i === 0,
      isFinal: i === frames - 1,
      language: 'en',
      pcm: pcm.subarray(i * frameBytes, (i + 1) * frameBytes),
    });
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
});

test('a stalled source gets keepalive audio before the session would expire', async () => {
  const short = await startService({ limits: { sessionExpirySec: 0.4 } });
  const stt = sttStream({ client: short.client, keepaliveMs: 150 });
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
    toFrames({ transport: 'http', frameMs: 500 }),
    stt,
    collect(records),
  );
  await done;
  assert.ok(keepalives >= 3, `${keepalives} keepalives`);
  assert.equal(changes.length, 0, 'the session never expired');
  assert.equal(records.at(-1)!.is_final, true);
});

test('a long session rotates at a speech boundary; times continue', async () => {
  const changes: SessionChange[] = [];
  const stt = sttStream({ client, rotateAfterSec: 2, forceRotateAfterSec: 6 });
  stt.on('session', (c: SessionChange) => changes.push(c));
  const records: AsrRecord[] = [];
  await pipeline(source(pcm), toFrames({ transport: 'http', frameMs: 250 }), stt, collect(records));
  assert.ok(changes.length >= 1 && changes.every((c) => c.reason === 'rotate'));
  assert.ok(records.filter((r) => r.is_final).length >= 2, 'each rotated session completed');
  assertMonotonic(records);
});

test('a source that ends without a final frame is closed with a short silent final frame', async () => {
  const stt = sttStream({ client });
  const id = randomUuid();
  const records: AsrRecord[] = [];
  stt.on('data', (r: AsrRecord) => records.push(r));
  stt.write(encodeFrame({ streamId: id, isStart: true, language: 'en', pcm: pcm.subarray(0, 32000) }));
  stt.end(encodeFrame({ streamId: id, language: 'en', pcm: pcm.subarray(32000, 64000) }));
  await new Promise((resolve) => stt.once('end', resolve));
  assert.equal(records.at(-1)!.is_final, true);
});

test('429 SESSION_BYTE_RATE_EXCEEDED tells the pacer to slow down, and nothing fails', async () => {
  const pacer = new Pacer();
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 429, code: 'SESSION_BYTE_RATE_EXCEEDED', retryAfter: 0.05 },
  });
  const records: AsrRecord[] = [];
  await pipeline(
    source(pcm),
    toFrames({ transport: 'http' }),
    sttStream({ client, pacer }),
    collect(records),
  );
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
    toFrames({ transport: 'http', frameMs: 500 }),
    diarizationStream({ client }),
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
  const stt = sttStream({ client: own });
  const id = randomUuid();
  await new Promise<void>((resolve, reject) =>
    stt.write(
      encodeFrame({ streamId: id, isStart: true, language: 'en', pcm: pcm.subarray(0, 32000) }),
      (e) => (e ? reject(e) : resolve()),
    ),
  );
  stt.destroy();
  await new Promise((resolve) => stt.once('close', resolve));
  assert.equal(own.admissionStats().find((s) => s.workload === 'realtime_asr')!.running, 0);
});
