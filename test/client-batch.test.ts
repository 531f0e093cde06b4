import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { inspect } from 'node:util';
import { BatchWaitTimeoutError, createClient } from '../src/client/index.ts';
import { SpeechServiceError, TransportError, validateJobV1 } from '../src/index.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';

const dir = await mkdtemp(join(tmpdir(), 'speechpipe-batch-'));
after(() => rm(dir, { recursive: true, force: true }));
const wav = await speechWav(
  'Ask not what your country can do for you. Ask what you can do for your country.',
  { pauseMs: 300 },
);
const wavPath = join(dir, 'talk.wav');
await writeFile(wavPath, wav);

const { emulator, client, newClient } = await startService({ jobTiming: { queuedMs: 20, processingMs: 40 } });

test('submit from a path, wait, and read the result (V2), exactly one job', async () => {
  const before = emulator.stats().jobsCreated;
  const ack = await client.batch.submit(wavPath, { language: 'en', diarization: true, itn: true });
  assert.equal(ack.status, 'queued');
  assert.equal(ack.attempts, 1);
  const statuses: string[] = [];
  const job = await client.batch.wait(ack.jobId, {
    initialIntervalMs: 10,
    onStatus: (j) => statuses.push(j.status),
  });
  assert.equal(job.status, 'done');
  if (job.status !== 'done') return;
  assert.ok(job.final_result.length > 0);
  assert.ok(job.final_word_segments.length > 0);
  assert.ok(job.diarization_segments.length > 0);
  assert.ok(statuses.includes('done'));
  assert.equal(emulator.stats().jobsCreated - before, 1);
  // wait() reads with save_result, so the result can be read again.
  assert.equal((await client.batch.get(ack.jobId)).status, 'done');
  // A read without save_result clears it for later reads.
  assert.equal((await client.batch.get(ack.jobId)).status, 'cleared');
});

test('submit from bytes and from a one-shot stream; the V1 legacy lookup is typed separately', async () => {
  const fromBytes = await client.batch.transcribe(wav, { language: 'en', initialIntervalMs: 10 });
  assert.equal(fromBytes.status, 'done');
  const ack = await client.batch.submit(Readable.from([wav.subarray(0, 1000), wav.subarray(1000)]), {
    language: 'en',
  });
  await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  const legacy = await client.batch.getLegacy(ack.jobId, { saveResult: true });
  assert.equal(validateJobV1(legacy).ok, true);
  assert.equal(legacy.status, 'done');
  assert.ok(legacy.results.offsets!.length > 0);
});

test('pre-flight: a recording over the byte limit fails before anything is sent', async () => {
  const small = newClient({ limits: { batchRequestBytes: 1000 } });
  const before = emulator.stats().requests['batch.submit'];
  await assert.rejects(small.batch.submit(wav), (err: unknown) => {
    return (
      err instanceof SpeechServiceError &&
      err.status === 413 &&
      err.origin === 'local' &&
      err.limit?.bound === 'request_bytes'
    );
  });
  assert.equal(emulator.stats().requests['batch.submit'], before);
});

test('422 for corrupt audio is not retried and creates no job', async () => {
  const before = emulator.stats();
  await assert.rejects(client.batch.submit(Buffer.from('not audio at all, just text')), (err: unknown) => {
    return (
      err instanceof SpeechServiceError &&
      err.status === 422 &&
      err.code === 'VALIDATION_FILE_CORRUPT' &&
      !err.ambiguous
    );
  });
  const now = emulator.stats();
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 1);
  assert.equal(now.jobsCreated, before.jobsCreated);
});

test('429 with Retry-After is waited out; nothing is lost and one job is created', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 2,
    action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const before = emulator.stats();
  const ack = await client.batch.submit(wav, { language: 'en' });
  fault.remove();
  const now = emulator.stats();
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 3);
  assert.equal(now.jobsCreated - before.jobsCreated, 1);
  assert.ok(ack.jobId);
  assert.ok(client.admissionStats().find((s) => s.workload === 'batch')!.pauses >= 2);
});

test('ambiguous submission (connection lost after the job was created): fail policy reports it, one job exists', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'reset', stage: 'afterEffect' },
  });
  const before = emulator.stats();
  const seen: unknown[] = [];
  await assert.rejects(client.batch.submit(wavPath, { onAmbiguous: (e) => seen.push(e) }), (err: unknown) => {
    return err instanceof TransportError && err.ambiguous === true && err.code === 'ERR_CONNECTION_RESET';
  });
  fault.remove();
  const now = emulator.stats();
  assert.equal(now.jobsCreated - before.jobsCreated, 1, 'exactly one job, not replayed');
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 1);
  assert.equal(seen.length, 1);
});

test('ambiguous 5xx after job creation: resubmit policy sends again and records it', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'status', status: 500, code: 'ASR_TRANSCRIPTION_FAILED', stage: 'afterEffect' },
  });
  const before = emulator.stats();
  const ack = await client.batch.submit(wavPath, { onAmbiguousSubmit: 'resubmit' });
  fault.remove();
  assert.equal(ack.ambiguousAttempts, 1);
  assert.equal(ack.attempts, 2);
  assert.equal(emulator.stats().jobsCreated - before.jobsCreated, 2, 'the duplicate the policy accepted');
});

test('a 500 on a job lookup is retried (GETs are idempotent)', async () => {
  const ack = await client.batch.submit(wav);
  const fault = emulator.faults.add({
    operation: 'batch.get',
    times: 1,
    action: { type: 'status', status: 500, code: 'SERVER_INTERNAL' },
  });
  const job = await client.batch.get(ack.jobId, { saveResult: true });
  fault.remove();
  assert.equal(job.id, ack.jobId);
});

test('unknown job: 404 TRANSCRIPTION_JOB_NOT_FOUND; a bad id fails locally', async () => {
  await assert.rejects(client.batch.get('0f8fad5b-d9cb-469f-a165-70867728950e'), {
    status: 404,
    code: 'TRANSCRIPTION_JOB_NOT_FOUND',
  });
  await assert.rejects(client.batch.get('nope'), { code: 'VALIDATION_INVALID_UUID' });
});

test('wait() deadline leaves the job alone and says where it was', async () => {
  const { client: slowClient, emulator: slow } = await startService({
    jobTiming: { queuedMs: 60_000, processingMs: 60_000 },
  });
  const ack = await slowClient.batch.submit(wav);
  await assert.rejects(
    slowClient.batch.wait(ack.jobId, { timeoutMs: 150, initialIntervalMs: 20 }),
    (err: unknown) => {
      return err instanceof BatchWaitTimeoutError && err.jobId === ack.jobId && err.lastStatus === 'queued';
    },
  );
  assert.equal(slow.stats().jobsCreated, 1);
});

test('abort during wait rejects with the reason and leaves nothing running', async () => {
  const { client: slowClient } = await startService({
    jobTiming: { queuedMs: 60_000, processingMs: 60_000 },
  });
  const ack = await slowClient.batch.submit(wav);
  const controller = new AbortController();
  const reason = new Error('user stopped');
  setTimeout(() => controller.abort(reason), 50);
  await assert.rejects(
    slowClient.batch.wait(ack.jobId, { signal: controller.signal, initialIntervalMs: 10 }),
    (err: unknown) => err === reason,
  );
});

test('a connection refused is ERR_CONNECT, never ambiguous', async () => {
  const dead = createClient({
    apiUrl: 'http://127.0.0.1:9',
    apiKey: 'k',
    env: {},
    retry: { maxAttempts: 2, baseMs: 1, maxMs: 2 },
  });
  after(() => dead.close());
  await assert.rejects(
    dead.batch.submit(wav),
    (err: unknown) => err instanceof TransportError && err.code === 'ERR_CONNECT' && !err.ambiguous,
  );
});

test('the API key never appears in errors, JSON or inspect output', async () => {
  const secret = 'sk_test_this_key_is_wrong_123456';
  const wrong = newClient({ apiKey: secret });
  const err = await wrong.batch.submit(wav).catch((e: unknown) => e);
  assert.ok(err instanceof SpeechServiceError && err.status === 401);
  for (const text of [
    err.message,
    String(err.stack),
    JSON.stringify(err),
    inspect(err, { depth: 9 }),
    inspect(wrong),
    JSON.stringify(wrong),
  ]) {
    assert.ok(!text.includes(secret), text);
  }
});
