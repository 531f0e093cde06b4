// sttStream and diarizationStream at the edges of the live protocol, against the fake service
// (real LiveSessions, the real retry policy, no network): records the service should not send,
// answers shaped oddly, a consumer or a destroy at the wrong moment. Nothing the source said is
// lost without its range reported, nothing is left held, nothing hangs.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Admission } from '../src/client/admission.ts';
import { RetryPolicy } from '../src/client/attempts.ts';
import { LiveSession } from '../src/client/live.ts';
import type { ChannelListener, LiveChannel } from '../src/client/live-channel.ts';
import { IncompleteStreamError, SpeechServiceError } from '../src/protocol/errors.ts';
import { DEFAULT_LIMITS } from '../src/protocol/limits.ts';
import type { AsrRecord, DiarizationRecord, WordSegment } from '../src/protocol/records.ts';
import { type LostAudio, type SessionChange, sttStream } from '../src/transforms/live-stream.ts';
import { FakeLiveService, type FakeRun, runThroughFake } from './helpers/fake-live.ts';
import { speechWithPauses } from './helpers/speech.ts';
import { diffWords, lostWords } from './helpers/word-diff.ts';

const pcm = await speechWithPauses(
  [
    'The quick brown fox jumps over the lazy dog.',
    'A journey of a thousand miles begins with a single step.',
    'Nothing is lost and nothing is said twice.',
  ],
  600,
);

const run = (service: FakeLiveService, options: Parameters<typeof runThroughFake>[2] = {}) =>
  runThroughFake(pcm, service, { finalTimeoutMs: 200, ...options });

const reference = await run(new FakeLiveService());

test('a final record before the final frame (the service ended the stream): a fresh session goes on, every word once, nothing lost', {
  timeout: 10_000,
}, async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 8, action: { type: 'finalEarly' } });
  const r = await run(service);
  assert.equal(r.error, undefined, String(r.error));
  assert.deepEqual(r.lost, []);
  const diff = diffWords(reference.words, r.words);
  assert.equal(diff.lost, 0, JSON.stringify(diff));
  assert.equal(diff.duplicated, 0, JSON.stringify(diff));
  assert.equal(r.records.filter((x) => x.is_final).length, 1, 'one final record downstream');
  assert.equal(r.records.at(-1)!.is_final, true);
  assert.equal(service.stats.live, 0);
  assert.equal(service.stats.channelsOpen, 0);
  assert.equal(service.running(), 0);
});

test('diarization: a final record before the final frame; a fresh session goes on, nothing lost', {
  timeout: 10_000,
}, async () => {
  const service = new FakeLiveService();
  service.fault({ nth: 8, action: { type: 'finalEarly' } });
  const r = await run(service, { kind: 'diarization' });
  assert.equal(r.error, undefined, String(r.error));
  assert.deepEqual(r.lost, []);
  assert.equal(r.records.filter((x) => x.is_final).length, 1, 'one final record downstream');
  assert.equal(service.stats.live, 0);
  assert.equal(service.running('diarization'), 0);
});

/** A session on a channel whose sends the test answers, and the listener its records go to. */
function scriptedSession(send: (n: number, frame: Buffer) => Promise<void>) {
  const id = '5f0c2b1e-8a7d-4e3f-b1c2-9d8e7f6a5b4c';
  const pending: ((err: Error) => void)[] = [];
  let sends = 0;
  const channel: LiveChannel = {
    send: (frame) =>
      new Promise<void>((resolve, reject) => {
        pending.push(reject);
        send(++sends, frame).then(resolve, reject);
      }),
    pause() {},
    resume() {},
    cancel: async () => {},
    close() {
      for (const reject of pending.splice(0)) reject(new Error('channel closed'));
    },
  };
  const admission = new Admission();
  const box: { listener?: ChannelListener } = {};
  const session = new LiveSession(
    'stt',
    {
      channel: (_k, _t, l) => {
        box.listener = l;
        return channel;
      },
      policy: new RetryPolicy({ admission }),
      admission,
      limits: DEFAULT_LIMITS,
    },
    { streamId: id },
  );
  const final = () =>
    box.listener!.record({ id, seq: 1, transcription: '', words: [], is_speech_final: true, is_final: true });
  return { session, final, admission };
}

test('a session whose final record came before its final frame refuses later frames with an IncompleteStreamError, also one already on its way', async () => {
  const { session, final, admission } = scriptedSession((n) =>
    n === 1 ? Promise.resolve() : new Promise<void>(() => {}),
  );
  await session.send(Buffer.alloc(3200));
  const second = session.send(Buffer.alloc(3200)).catch((err: unknown) => err);
  await new Promise((resolve) => setImmediate(resolve));
  final();
  const inFlight = await second;
  assert.ok(inFlight instanceof IncompleteStreamError, String(inFlight));
  const after = await session.send(Buffer.alloc(3200)).catch((err: unknown) => err);
  assert.ok(after instanceof IncompleteStreamError, String(after));
  assert.equal(session.state, 'finished');
  await session.ended;
  admission.close();
});

test("a session's own 429 that reaches the stream (not waited out: no retries left, as with socketAcks: false) restarts after its Retry-After: every word once, nothing lost", {
  timeout: 20_000,
}, async () => {
  const service = new FakeLiveService();
  service.fault({
    nth: 5,
    action: {
      type: 'refuse',
      error: new SpeechServiceError({
        status: 429,
        code: 'SESSION_BYTE_RATE_EXCEEDED',
        retryable: true,
        retryAfterMs: 20,
      }),
    },
  });
  const got = await run(service, { session: { maxRateRetries: 0 } });
  assert.equal(got.error, undefined, String(got.error));
  assert.deepEqual(got.lost, []);
  assert.deepEqual(
    got.changes.map((c) => [c.reason, (c.error as SpeechServiceError | undefined)?.code]),
    [['restart', 'SESSION_BYTE_RATE_EXCEEDED']],
  );
  const diff = diffWords(reference.words, got.words);
  assert.equal(diff.lost, 0, JSON.stringify(diff));
  assert.equal(diff.duplicated, 0, JSON.stringify(diff));
  assert.equal(service.stats.live, 0);
  assert.equal(service.running(), 0);
});

test("a frame waiting out a 429's Retry-After when the final record comes ends then, not after the wait", {
  timeout: 10_000,
}, async () => {
  const refusal = new SpeechServiceError({
    status: 429,
    code: 'SESSION_BYTE_RATE_EXCEEDED',
    retryable: true,
    retryAfterMs: 30_000,
  });
  const { session, final, admission } = scriptedSession(async (n) => {
    if (n === 2) throw refusal;
  });
  await session.send(Buffer.alloc(3200));
  const waiting = session.send(Buffer.alloc(3200)).catch((err: unknown) => err);
  await new Promise((resolve) => setTimeout(resolve, 20));
  final();
  const err = await waiting;
  assert.ok(err instanceof IncompleteStreamError, String(err));
  await session.ended;
  assert.equal(session.state, 'finished');
  admission.close();
});

test('the final record coming before the final frame is acknowledged: that frame was heard, its send resolves', async () => {
  let acknowledge!: () => void;
  const { session, final, admission } = scriptedSession((n) =>
    n === 2 ? new Promise<void>((resolve) => (acknowledge = resolve)) : Promise.resolve(),
  );
  await session.send(Buffer.alloc(3200));
  const last = session.send(Buffer.alloc(3200), { final: true });
  await new Promise((resolve) => setImmediate(resolve));
  final();
  await last;
  acknowledge();
  const record = await session.done;
  assert.equal(record.is_final, true);
  assert.equal(session.framesSent, 2);
  await session.ended;
  admission.close();
});

/** `pcm` as 250 ms frames, the last one final. */
function framesOf(audio: Buffer): { pcm: Buffer; language: 'en'; isFinal: boolean }[] {
  const size = 8000;
  const out = [];
  for (let at = 0; at < audio.length; at += size)
    out.push({
      pcm: audio.subarray(at, at + size),
      language: 'en' as const,
      isFinal: at + size >= audio.length,
    });
  return out;
}

const isKeepalive = (f: { pcm: Buffer; isFinal: boolean }) =>
  !f.isFinal && f.pcm.length === 3200 && f.pcm.every((b) => b === 0);

test("frames written while a refused keepalive waits out the refusal's Retry-After wait behind it: no session sooner, every word once", {
  timeout: 10_000,
}, async () => {
  const service = new FakeLiveService();
  service.fault({
    match: isKeepalive,
    action: {
      type: 'refuse',
      error: new SpeechServiceError({
        status: 503,
        code: 'SERVER_DEPENDENCY_FAILURE',
        retryable: true,
        retryAfterMs: 300,
      }),
    },
  });
  const stream = sttStream({
    sessions: service.sessions({ finalTimeoutMs: 200, endTimeoutMs: 100 }),
    coalesceMs: 0,
    keepaliveMs: 20,
    restartBackoff: { baseMs: 1, maxMs: 5 },
  });
  const changes: (SessionChange & { at: number })[] = [];
  const lost: LostAudio[] = [];
  stream.on('session', (c: SessionChange) => changes.push({ ...c, at: performance.now() }));
  stream.on('audio-lost', (l: LostAudio) => lost.push(l));
  const words: WordSegment[] = [];
  const records: AsrRecord[] = [];
  stream.on('data', (r: AsrRecord) => {
    records.push(r);
    if (r.is_speech_final || r.is_final) words.push(...r.words);
  });
  const failed = new Promise<number>((resolve) =>
    stream.once('session-error', () => resolve(performance.now())),
  );
  const done = new Promise<unknown>((resolve) => {
    stream.once('close', () => resolve(undefined));
    stream.once('error', resolve);
  });
  const frames = framesOf(pcm);
  const half = Math.floor(frames.length / 2);
  const write = (f: (typeof frames)[number]) =>
    new Promise<void>((resolve, reject) => stream.write(f, (err) => (err ? reject(err) : resolve())));
  for (const f of frames.slice(0, half)) await write(f);
  // The source stalls: the keepalive is refused, its restart waits; the source comes back.
  const failedAt = await failed;
  for (const f of frames.slice(half)) stream.write(f);
  stream.end();
  assert.equal(await done, undefined);
  assert.deepEqual(lost, []);
  assert.equal(changes.length, 1, JSON.stringify(changes));
  assert.ok(
    changes[0]!.at - failedAt >= 290,
    `a new session ${changes[0]!.at - failedAt} ms after a Retry-After of 300`,
  );
  const diff = diffWords(reference.words, words);
  assert.equal(diff.lost, 0, JSON.stringify(diff));
  assert.equal(diff.duplicated, 0, JSON.stringify(diff));
  // The sessions heard the source's audio once: the source's bytes, plus keepalive silence.
  const heard = [...service.heard.values()].flat().reduce((n, b) => n + b.length, 0);
  const replayed = changes.reduce((n, c) => n + (c.replaySec ?? 0) * 32000, 0);
  assert.ok(
    heard - replayed - pcm.length <= 2 * 3200 + 640,
    `heard ${heard}, source ${pcm.length}, replayed ${replayed}`,
  );
  assert.equal(records.at(-1)!.is_final, true);
});

test('a session whose consumer holds off reading for longer than finalTimeoutMs after the final frame is not failed for the records it held off', {
  timeout: 10_000,
}, async () => {
  const service = new FakeLiveService();
  // The answer to the final frame holds a few records before the final one.
  const provisional = (id: string) => ({
    id,
    seq: 0,
    transcription: '',
    words: [],
    is_speech_final: false,
    is_final: false,
  });
  service.fault({
    match: (f) => f.isFinal,
    action: { type: 'extra', records: (id) => [provisional(id), provisional(id), provisional(id)] },
  });
  const session = service.sessions({ finalTimeoutMs: 100, endTimeoutMs: 100, highWaterMark: 1 })('stt', {});
  let finalSent = false;
  const records: AsrRecord[] = [];
  const reading = (async () => {
    for await (const r of session) {
      records.push(r as AsrRecord);
      // Once the final frame is accepted, the consumer is slow (a sink that stalls).
      if (finalSent) await new Promise((resolve) => setTimeout(resolve, 150));
    }
  })();
  const frames = framesOf(pcm);
  for (const f of frames) await session.send(f.pcm, { final: f.isFinal });
  finalSent = true;
  const [outcome] = await Promise.allSettled([reading]);
  assert.equal(outcome.status, 'fulfilled', String((outcome as PromiseRejectedResult).reason));
  assert.equal(records.at(-1)!.is_final, true);
  await session.ended;
  assert.equal(service.running(), 0);
});

for (const kind of ['stt', 'diarization'] as const) {
  test(`${kind}: a record timed far past the audio its session was sent hides no later word or segment`, {
    timeout: 10_000,
  }, async () => {
    const clean = kind === 'stt' ? reference : await run(new FakeLiveService(), { kind });
    const service = new FakeLiveService();
    // Schema-valid, and nonsense: 1000 s into a stream sent a second of audio.
    const bogus = (id: string) =>
      kind === 'stt'
        ? {
            id,
            seq: 0,
            transcription: 'bogus',
            words: [{ word: 'bogus', start_time: 999, end_time: 1000 }],
            is_speech_final: true,
            is_final: false,
          }
        : {
            id,
            final_segments: [{ start_time: 999, end_time: 1000, speaker: 'S9' }],
            active_segments: [],
            is_final: false,
          };
    service.fault({ nth: 4, action: { type: 'extra', records: (id) => [bogus(id)] } });
    // A failure later: what was not finalised is heard again, and must not count as finalised.
    service.fault({ nth: 20, action: { type: 'cut' } });
    const r = await run(service, { kind });
    assert.equal(r.error, undefined, String(r.error));
    assert.deepEqual(r.lost, []);
    if (kind === 'stt') {
      // The record said the audio sent so far (1.25 s at most) was final: a claim about that
      // audio cannot be told from a true one. Any later word is heard.
      const lost = lostWords(clean.words, r.words);
      assert.deepEqual(
        lost.filter((w) => w.end_time > 1.25),
        [],
      );
    } else {
      const closed = (x: FakeRun) =>
        x.records
          .flatMap((y) => (y as DiarizationRecord).final_segments)
          .filter((s) => s.start_time > 1.25 && s.start_time < 999)
          .reduce((n, s) => n + ((s.end_time ?? s.start_time) - s.start_time), 0);
      assert.ok(
        Math.abs(closed(r) - closed(clean)) < 0.5,
        `${closed(r)} s of segments against ${closed(clean)}`,
      );
    }
  });
}
