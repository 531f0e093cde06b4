// Every operation's overall deadline, against servers that accept and never answer: the attempts,
// the pauses between them and the waits inside them end together, with DeadlineExceededError
// (the last failure as its cause), whatever each attempt's own timeouts are. Before, retries
// multiplied every timeout by the attempts (a stalled fast body 604 s, audio_file 1,503 s).

import assert from 'node:assert/strict';
import { type TestContext, test } from 'node:test';
import { type ClientOptions, createClient, DEFAULT_DEADLINES } from '../src/client/index.ts';
import { DeadlineExceededError, SpeechServiceError, TransportError } from '../src/protocol/errors.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { speechPcm, wavOf } from './helpers/emulator-fixtures.ts';
import { httpServer, socketServer } from './helpers/hostile-servers.ts';

function client(t: TestContext, url: string, options: ClientOptions = {}) {
  const c = createClient({
    apiUrl: url,
    apiKey: 'test-key',
    env: {},
    retry: { baseMs: 5, maxMs: 20 },
    ...options,
  });
  t.after(() => c.close());
  return c;
}

const deadline = (t: DeadlineExceededError, ms: number) => {
  assert.ok(t instanceof DeadlineExceededError, String(t));
  assert.equal(t.code, 'ERR_DEADLINE_EXCEEDED');
  assert.equal(t.deadlineMs, ms);
  return true;
};

const wav = wavOf(speechPcm([{ speech: 0.5 }]));

test('every operation takes a deadline: a stalled HTTP server ends each at it, however long its own waits', {
  timeout: 20_000,
}, async (t) => {
  const { url, requests } = await httpServer(t);
  // The per-attempt waits are the defaults (60 s, 300 s after an upload): only the deadline ends these.
  const c = client(t, url);
  const ms = 300;
  const cases: [string, () => Promise<unknown>][] = [
    ['batch.submit', () => c.batch.submit(wav, { deadlineMs: ms })],
    ['batch.get', () => c.batch.get(randomUuid(), { deadlineMs: ms })],
    ['batch.getLegacy', () => c.batch.getLegacy(randomUuid(), { deadlineMs: ms })],
    ['fast.http', () => c.fast.transcribeFinal(wav, { deadlineMs: ms })],
    ['tts.http', () => c.tts.synthesize({ text: 'Hello.', deadlineMs: ms })],
    ['tts.http buffer', () => c.tts.synthesizeToBuffer({ text: 'Hello.', deadlineMs: ms })],
    ['stt.http', () => c.live.stt({ startDeadlineMs: ms, endTimeoutMs: 100 }).send(Buffer.alloc(3200))],
  ];
  const results = await Promise.all(cases.map(([, run]) => run().catch((e: unknown) => e)));
  results.forEach((err, i) => {
    assert.ok(deadline(err as DeadlineExceededError, ms), cases[i]![0]);
    assert.equal(
      (err as DeadlineExceededError).attempts,
      1,
      `${cases[i]![0]}: one attempt, cut by the deadline`,
    );
  });
  assert.equal(requests(), cases.length);
  // An upload that was under way may have created the job: the submission says so.
  assert.equal((results[0] as DeadlineExceededError).ambiguous, true);
  assert.equal((results[1] as DeadlineExceededError).ambiguous, false, 'a read is never ambiguous');
});

test('attempts cut by their own timeouts are retried only while the deadline allows; the last failure is the cause', {
  timeout: 20_000,
}, async (t) => {
  const { url, requests } = await httpServer(t);
  const c = client(t, url, {
    timeouts: { headersMs: 100 },
    retry: { maxAttempts: 1000, baseMs: 1, maxMs: 5 },
  });
  const err = await c.batch.get(randomUuid(), { deadlineMs: 1_000 }).catch((e: unknown) => e);
  assert.ok(deadline(err as DeadlineExceededError, 1_000));
  const e = err as DeadlineExceededError;
  assert.ok(e.attempts >= 2 && e.attempts <= 11, `${e.attempts} attempts of 100 ms in 1 s`);
  assert.equal(requests(), e.attempts);
  assert.ok(e.cause instanceof TransportError && e.cause.code === 'ERR_TIMEOUT', String(e.cause));
});

test('a Retry-After longer than what is left of the deadline fails at once, with the refusal as the cause', {
  timeout: 10_000,
}, async (t) => {
  const { url, requests } = await httpServer(t, (_req, res) => {
    res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '600' });
    res.end(JSON.stringify({ code: 'SERVER_DEPENDENCY_FAILURE', retryable: true, detail: 'busy' }));
  });
  const c = client(t, url);
  const err = await c.tts.synthesize({ text: 'Hello.' }).catch((e: unknown) => e);
  assert.ok(deadline(err as DeadlineExceededError, DEFAULT_DEADLINES.ttsStart));
  const cause = (err as DeadlineExceededError).cause;
  assert.ok(cause instanceof SpeechServiceError && cause.status === 503, String(cause));
  assert.equal(requests(), 1, 'no pause of ten minutes, no second request');
});

test('Socket.IO: a login that never completes and events never acknowledged end at each deadline', {
  timeout: 20_000,
}, async (t) => {
  // One server never lets a client in; the other lets it in and answers nothing.
  const closed = await socketServer(t, (io) => io.use(() => {}));
  const silent = await socketServer(t, () => {});
  const ms = 300;
  const login = client(t, closed);
  const acks = client(t, silent);
  const cases: [string, () => Promise<unknown>][] = [
    [
      'tts.socket login',
      () => login.tts.synthesize({ text: 'Hello.', transport: 'socketio', deadlineMs: ms }),
    ],
    ['voices login', () => login.tts.listVoices({ deadlineMs: ms })],
    ['tts.socket ack', () => acks.tts.synthesize({ text: 'Hello.', transport: 'socketio', deadlineMs: ms })],
    ['voices ack', () => acks.tts.listVoices({ deadlineMs: ms })],
    ['fast.socket ack', () => acks.fast.transcribeFinal(wav, { transport: 'socketio', deadlineMs: ms })],
    [
      'stt.socket ack',
      () => acks.live.stt({ transport: 'socketio', startDeadlineMs: ms }).send(Buffer.alloc(3200)),
    ],
  ];
  const results = await Promise.all(cases.map(([, run]) => run().catch((e: unknown) => e)));
  results.forEach((err, i) => {
    assert.ok(deadline(err as DeadlineExceededError, ms), cases[i]![0]);
  });
});

test('deadlines are checked: not a number of milliseconds > 0 is a RangeError up front', () => {
  assert.throws(
    () => createClient({ apiUrl: 'http://127.0.0.1:1', apiKey: 'test-key', env: {}, deadlines: { fast: 0 } }),
    RangeError,
  );
  assert.throws(
    () =>
      createClient({
        apiUrl: 'http://127.0.0.1:1',
        apiKey: 'test-key',
        env: {},
        deadlines: { ttsStart: Number.NaN },
      }),
    RangeError,
  );
});
