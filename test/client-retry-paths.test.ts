// The retry policy and admission control on paths the other files do not take, against small
// local servers: a 429 the service marks not retryable, concurrency raised again by operations
// of every kind that the service accepted, a slot given back when an operation that holds it
// ends while its reader holds it unread, and Socket.IO refusals decided by their `retryable`.

import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { type TestContext, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import {
  Admission,
  BatchWaitTimeoutError,
  type ClientOptions,
  createClient,
  RetryPolicy,
  type SpeechClient,
} from '../src/client/index.ts';
import { DeadlineExceededError, SpeechServiceError, TransportError } from '../src/protocol/errors.ts';
import type { Workload } from '../src/protocol/limits.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { speechPcm, wavOf } from './helpers/emulator-fixtures.ts';
import { httpServer, socketServer } from './helpers/hostile-servers.ts';

const wav = wavOf(speechPcm([{ speech: 0.2 }]));

function client(t: TestContext, url: string, options: ClientOptions = {}): SpeechClient {
  const c = createClient({
    apiUrl: url,
    apiKey: 'test-key',
    env: {},
    retry: { baseMs: 5, maxMs: 10 },
    ...options,
    admission: { backoff: { baseMs: 5, maxMs: 10 }, ...options.admission },
  });
  t.after(() => c.close());
  return c;
}

const lane = (c: SpeechClient | Admission, workload: Workload) =>
  (c instanceof Admission ? c.stats() : c.admissionStats()).find((s) => s.workload === workload)!;

function errorBody(code: string, retryable: boolean): Record<string, unknown> {
  return { error: code.toLowerCase(), code, detail: code, retryable, timestamp: new Date().toISOString() };
}

function answer(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

test('a 429 the service marks not retryable is returned, not waited out in the queue (both transports)', {
  timeout: 10_000,
}, async (t) => {
  for (const code of ['RATE_LIMIT_EXCEEDED', 'CONCURRENCY_LIMIT_EXCEEDED']) {
    const { url, requests } = await httpServer(t, (_req, res) =>
      answer(res, 429, errorBody(code, false), { 'retry-after': '0' }),
    );
    const c = client(t, url);
    for (const run of [() => c.batch.submit(wav), () => c.tts.synthesize({ text: 'Hello.' })]) {
      const before = requests();
      const err = await run().catch((e: unknown) => e);
      assert.ok(err instanceof SpeechServiceError, String(err));
      assert.equal(err.code, code);
      assert.equal(err.retryable, false);
      // Before, the refusal went back to the queue up to admission.maxRetries (100) times.
      assert.equal(requests() - before, 1, `${code}: one request`);
    }
  }
  let refusals = 0;
  const url = await socketServer(t, (io) =>
    io.on('connection', (socket) =>
      socket.on('tts_request', (_body: unknown, ack: (a: unknown) => void) => {
        refusals++;
        ack({ ok: false, error: errorBody('CONCURRENCY_LIMIT_EXCEEDED', false) });
      }),
    ),
  );
  const c = client(t, url);
  const err = await c.tts.synthesize({ text: 'Hello.', transport: 'socketio' }).catch((e: unknown) => e);
  assert.ok(err instanceof SpeechServiceError && err.code === 'CONCURRENCY_LIMIT_EXCEEDED', String(err));
  assert.equal(refusals, 1);
  assert.equal(lane(c, 'tts').running, 0);
});

test('the policy: an admission refusal marked not retryable ends the operation, the workload paused for others', async () => {
  const admission = new Admission({ backoff: { baseMs: 5, maxMs: 10 } });
  const policy = new RetryPolicy({ admission });
  let attempts = 0;
  const refusal = new SpeechServiceError({
    status: 429,
    code: 'SESSION_SLOTS_EXHAUSTED',
    retryable: false,
    retryAfterMs: 50,
  });
  const err = await policy
    .run({
      operation: 'stt.http',
      workload: 'realtime_asr',
      run: async () => {
        attempts++;
        throw refusal;
      },
    })
    .catch((e: unknown) => e);
  assert.equal(err, refusal);
  assert.equal(attempts, 1);
  const stats = lane(admission, 'realtime_asr');
  assert.equal(stats.running + stats.queued, 0);
  assert.equal(stats.retries, 0);
  assert.equal(stats.paused, true, 'the refusal still pauses the workload');
  admission.close();
});

test('batch: accepted submissions raise a concurrency a refusal lowered, as other operations do', {
  timeout: 10_000,
}, async (t) => {
  let refused = false;
  let running = 0;
  const { url } = await httpServer(t, (_req: IncomingMessage, res: ServerResponse) => {
    if (running >= 1 && !refused) {
      refused = true;
      answer(res, 429, errorBody('CONCURRENCY_LIMIT_EXCEEDED', true), { 'retry-after': '0' });
      return;
    }
    running++;
    setTimeout(() => {
      running--;
      answer(res, 200, { jobId: randomUuid(), status: 'queued' });
    }, 20);
  });
  const c = client(t, url, { concurrency: { batch: 2 }, admission: { probeAfterMs: 300 } });
  await Promise.all([c.batch.submit(wav), c.batch.submit(wav)]);
  assert.equal(lane(c, 'batch').concurrency, 1, 'the refusal lowered it');
  await delay(350); // past the cool-down
  // One at a time: nothing waits, so no probe raises it; only the submissions accepted can.
  for (let i = 0; i < 3; i++) await c.batch.submit(wav);
  // Before, a batch submission never reported its 200: concurrency stayed at 1 for good.
  assert.equal(lane(c, 'batch').concurrency, 2);
  assert.equal(lane(c, 'batch').raises, 1);
});

test('Socket.IO TTS whose audio ends with its acknowledgement counts as accepted: concurrency rises again', {
  timeout: 10_000,
}, async (t) => {
  let requests = 0;
  const url = await socketServer(t, (io) =>
    io.on('connection', (socket) =>
      socket.on('tts_request', (body: { id: string }, ack: (a: unknown) => void) => {
        if (requests++ === 0) {
          ack({ ok: false, error: { ...errorBody('CONCURRENCY_LIMIT_EXCEEDED', true), retry_after: 0 } });
          return;
        }
        // A short synthesis: all its audio, then the acknowledgement.
        socket.emit('tts_audio', { id: body.id, audio: Buffer.alloc(480), is_final: true });
        ack({ ok: true });
      }),
    ),
  );
  const c = client(t, url, { concurrency: { tts: 2 }, admission: { probeAfterMs: 300 } });
  const first = await c.tts.synthesizeToBuffer({ text: 'Hello.', transport: 'socketio' });
  assert.equal(first.pcm.length, 480);
  assert.equal(lane(c, 'tts').concurrency, 1, 'the refusal lowered it');
  await delay(350);
  for (let i = 0; i < 3; i++) await c.tts.synthesizeToBuffer({ text: 'Hello.', transport: 'socketio' });
  // Before, the slot was given back before the success was told, and a released slot counts none.
  assert.equal(lane(c, 'tts').concurrency, 2);
});

for (const how of ['abort', 'deadline', 'close'] as const) {
  test(`fast: ${how} after the first record while the records are held unread gives the slot back`, {
    timeout: 10_000,
  }, async (t) => {
    const { url, requests } = await httpServer(t, (req, res) => {
      const id = new URL(req.url!, 'http://x').searchParams.get('id');
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      // One record, then nothing: the final one never comes.
      res.write(`${JSON.stringify({ id, seq: 0, transcription: 'hello', words: [], is_final: false })}\n`);
    });
    const c = client(t, url, { concurrency: { fast: 1 } });
    const ctl = new AbortController();
    t.after(() => ctl.abort());
    const records = c.fast.transcribe(wav, {
      signal: ctl.signal,
      deadlineMs: how === 'deadline' ? 200 : 60_000,
    });
    const first = await records.next();
    assert.equal(first.value?.transcription, 'hello');
    assert.equal(lane(c, 'fast').running, 1);
    if (how === 'abort') ctl.abort(new Error('stop'));
    if (how === 'close') await c.close();
    // The iterator is neither read nor returned (it is left to the garbage collector).
    await delay(how === 'deadline' ? 400 : 50);
    // Before, the slot stayed held until the iterator was read or returned: with concurrency 1,
    // every later fast transcription waited for it for good.
    assert.equal(lane(c, 'fast').running, 0);
    if (how === 'close') return;
    const next = c.fast.transcribe(wav, { signal: AbortSignal.timeout(2_000) });
    assert.equal((await next.next()).value?.transcription, 'hello', 'the next one is admitted');
    await next.return(undefined);
    assert.equal(requests(), 2);
    // The one left unread fails with its reason when it is read after all.
    await assert.rejects(records.next(), (err: unknown) =>
      how === 'abort' ? (err as Error).message === 'stop' : err instanceof DeadlineExceededError,
    );
  });
}

test('listVoices: a refusal the service marks retryable is tried again; one marked not retryable is not', {
  timeout: 10_000,
}, async (t) => {
  const voice = { id: randomUuid(), name: 'Ada', languages: ['en'] };
  let calls = 0;
  let retryable = true;
  const url = await socketServer(t, (io) =>
    io.on('connection', (socket) =>
      socket.on('list_voices', (_body: unknown, ack: (a: unknown) => void) => {
        if (calls++ % 2 === 0) ack({ ok: false, error: errorBody('SERVER_DEPENDENCY_FAILURE', retryable) });
        else ack({ voices: [voice] });
      }),
    ),
  );
  const c = client(t, url);
  // Before, a refusal in the acknowledgement was thrown after the policy, never retried.
  assert.deepEqual(await c.tts.listVoices(), [voice]);
  assert.equal(calls, 2);
  retryable = false;
  const err = await c.tts.listVoices().catch((e: unknown) => e);
  assert.ok(err instanceof SpeechServiceError && err.code === 'SERVER_DEPENDENCY_FAILURE', String(err));
  assert.equal(err.status, 503);
  assert.equal(calls, 3);
});

test('close() while a batch submission awaits its answer is ambiguous (the job may exist); while it waits for a slot, not', {
  timeout: 10_000,
}, async (t) => {
  const { url, requests } = await httpServer(t); // reads each upload, never answers
  const c = client(t, url, { concurrency: { batch: 1 } });
  const answered = c.batch.submit(wav).catch((e: unknown) => e);
  const queued = c.batch.submit(wav).catch((e: unknown) => e);
  while (requests() === 0) await delay(5);
  await c.close();
  const [sent, waiting] = await Promise.all([answered, queued]);
  // Before, both were the client's shared ERR_CLIENT_CLOSED with ambiguous: false, as if
  // the upload that reached the service could safely be submitted again.
  assert.ok(sent instanceof TransportError && sent.code === 'ERR_CLIENT_CLOSED', String(sent));
  assert.equal(sent.ambiguous, true);
  assert.equal(sent.retryable, false);
  assert.ok(waiting instanceof TransportError && waiting.code === 'ERR_CLIENT_CLOSED', String(waiting));
  assert.equal(waiting.ambiguous, false);
  assert.equal(requests(), 1);
});

test("batch.wait: a poll's 429 is waited out for its Retry-After while the wait allows, whatever a read's own deadline", {
  timeout: 10_000,
}, async (t) => {
  const id = randomUuid();
  let polls = 0;
  let retryAfter = '1';
  const { url } = await httpServer(t, (_req, res) => {
    if (polls++ % 2 === 0) {
      answer(
        res,
        429,
        { ...errorBody('RATE_LIMIT_EXCEEDED', true), data: { capacity: 1 } },
        { 'retry-after': retryAfter },
      );
      return;
    }
    const now = new Date().toISOString();
    const job = { id, version: 1, created_at: now, updated_at: now, language: 'en', audio_duration: 1 };
    answer(res, 200, { message: 'success', data: { ...job, sample_rate_hz: 16000, status: 'failed' } });
  });
  // A read alone may take 300 ms: less than the Retry-After of 1 s.
  const c = client(t, url, { deadlines: { batchGet: 300 } });
  const job = await c.batch.wait(id, { timeoutMs: 5_000 });
  // Before, the poll failed at once with the read's DeadlineExceededError (no job id in it),
  // though the wait had seconds left.
  assert.equal(job.status, 'failed');
  assert.equal(polls, 2);
  // A Retry-After past what is left of the wait ends it at once, as its timeout, with the job id.
  retryAfter = '60';
  const started = performance.now();
  const err = await c.batch.wait(id, { timeoutMs: 5_000 }).catch((e: unknown) => e);
  assert.ok(err instanceof BatchWaitTimeoutError, String(err));
  assert.equal(err.jobId, id);
  assert.ok(err.cause instanceof DeadlineExceededError);
  assert.ok(performance.now() - started < 1_000);
});
