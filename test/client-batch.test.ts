import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { inspect } from 'node:util';
import {
  BatchResultLostError,
  BatchWaitTimeoutError,
  createClient,
  UnreadableSubmitAnswerError,
} from '../src/client/index.ts';
import { multipartOverhead } from '../src/client/multipart.ts';
import { ProtocolError, SpeechServiceError, TransportError } from '../src/index.ts';
import { validateJobV1 } from '../src/protocol/jobs.ts';
import { abortingUpload } from './helpers/aborting-upload.ts';
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
    apiKey: 'test-key',
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

const batchRunning = (c: typeof client) => c.admissionStats().find((s) => s.workload === 'batch')!;

test('a 200 acknowledgement cut while it is read is ambiguous: reported, not replayed, one job', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'reset', afterBytes: 5 },
  });
  const before = emulator.stats();
  const seen: unknown[] = [];
  const err = await client.batch.submit(wav, { onAmbiguous: (e) => seen.push(e) }).catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof TransportError && err.ambiguous === true, String(err));
  assert.equal(err.code, 'ERR_CONNECTION_RESET');
  assert.deepEqual(seen, [err]);
  const now = emulator.stats();
  assert.equal(now.jobsCreated - before.jobsCreated, 1, 'the job exists');
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 1);
});

test('a job lookup whose body is cut is retried like a lost connection', async () => {
  const ack = await client.batch.submit(wav);
  const fault = emulator.faults.add({
    operation: 'batch.get',
    times: 1,
    action: { type: 'reset', afterBytes: 5 },
  });
  const before = emulator.stats().requests['batch.get'];
  const job = await client.batch.get(ack.jobId, { saveResult: true });
  fault.remove();
  assert.equal(job.id, ack.jobId);
  assert.equal(emulator.stats().requests['batch.get'] - before, 2);
});

test('a one-shot stream refused with 429 surfaces that 429 (typed, retryable), not a misleading reset', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const before = emulator.stats();
  const err = await client.batch.submit(Readable.from([wav])).catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof SpeechServiceError, String(err));
  assert.equal(err.status, 429);
  assert.equal(err.code, 'RATE_LIMIT_EXCEEDED');
  assert.equal(err.retryable, true);
  assert.equal(err.retryAfterMs, 50);
  assert.match(err.detail ?? '', /one-shot stream/);
  const now = emulator.stats();
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 1);
  assert.equal(now.jobsCreated, before.jobsCreated);
});

test('a stream factory is opened again after a 429: one job, nothing lost', async () => {
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const before = emulator.stats();
  let opened = 0;
  const ack = await client.batch.submit(() => {
    opened++;
    return Readable.from([wav.subarray(0, 500), wav.subarray(500)]);
  });
  fault.remove();
  assert.equal(opened, 2);
  const now = emulator.stats();
  assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 2);
  assert.equal(now.jobsCreated - before.jobsCreated, 1);
  assert.equal((await client.batch.wait(ack.jobId, { initialIntervalMs: 10 })).status, 'done');
});

test('pre-flight compares the whole multipart body with the byte limit, as the service does', async () => {
  const exact = wav.length + multipartOverhead('audio', 'application/octet-stream');
  const service = await startService(
    { limits: { batchRequestBytes: exact } },
    { limits: { batchRequestBytes: exact } },
  );
  await service.client.batch.submit(wav); // exactly at the limit: accepted by both
  const tight = service.newClient({ limits: { batchRequestBytes: exact - 1 } });
  const before = service.emulator.stats().requests['batch.submit'];
  await assert.rejects(
    tight.batch.submit(wav),
    (err: unknown) =>
      err instanceof SpeechServiceError &&
      err.status === 413 &&
      err.origin === 'local' &&
      err.limit?.observed === exact &&
      err.limit.bound === 'request_bytes',
  );
  assert.equal(service.emulator.stats().requests['batch.submit'], before, 'nothing was sent');
});

test('wait() ends on failed and on cleared, without result fields', async () => {
  const fault = emulator.faults.add({ operation: 'batch.submit', times: 1, action: { type: 'fail' } });
  const failing = await client.batch.submit(wav);
  fault.remove();
  const failed = await client.batch.wait(failing.jobId, { initialIntervalMs: 10 });
  assert.equal(failed.status, 'failed');
  assert.equal('final_result' in failed, false);
  const ack = await client.batch.submit(wav);
  const done = await client.batch.wait(ack.jobId, { initialIntervalMs: 10, saveResult: false });
  assert.equal(done.status, 'done', 'read without save_result: the result is cleared after it');
  const cleared = await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  assert.equal(cleared.status, 'cleared');
  assert.equal('final_result' in cleared, false);
});

test('getLegacy with an empty lang sends the default segment (the V1 route needs a nonempty one)', async () => {
  const ack = await client.batch.submit(wav);
  await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  const job = await client.batch.getLegacy(ack.jobId, { saveResult: true, lang: '' });
  assert.equal(job.status, 'done');
  assert.equal(job.metadata.jobId, ack.jobId);
});

test('getLegacy passes diarization_force_align: words outside every segment get UNKNOWN_SPEAKER only when false', async () => {
  const ack = await client.batch.submit(wav, { diarization: true });
  await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  const aligned = await client.batch.getLegacy(ack.jobId, { saveResult: true, diarizationForceAlign: true });
  const strict = await client.batch.getLegacy(ack.jobId, {
    saveResult: true,
    diarizationForceAlign: false,
    lang: 'ar',
  });
  const speakers = (j: typeof aligned) => j.results.offsets!.map((o) => o.speaker);
  assert.ok(aligned.results.offsets!.length > 0);
  assert.ok(!speakers(aligned).includes('UNKNOWN_SPEAKER'));
  assert.ok(speakers(strict).includes('UNKNOWN_SPEAKER'));
  assert.deepEqual(
    strict.results.offsets!.map((o) => o.word),
    aligned.results.offsets!.map((o) => o.word),
  );
});

test('wait() deadline runs on a monotonic clock: a wall clock set forward does not end it', async (t) => {
  const quick = await startService({ jobTiming: { queuedMs: 0, processingMs: 300 } });
  const ack = await quick.client.batch.submit(wav);
  const real = Date.now.bind(Date);
  let offset = 0;
  t.mock.method(Date, 'now', () => real() + offset);
  // After the first poll the wall clock is set an hour forward.
  const job = await quick.client.batch.wait(ack.jobId, {
    timeoutMs: 10_000,
    initialIntervalMs: 50,
    onStatus: () => (offset = 3_600_000),
  });
  assert.equal(job.status, 'done');
});

test("wait() with a deadline beyond a timer's range waits for the job (it neither ends at once nor throws)", async () => {
  // 3e9 ms overflows a 32-bit timer (it would fire after 1 ms); 5e9 ms is out of a timer's range.
  for (const timeoutMs of [3e9, 5e9]) {
    const ack = await client.batch.submit(wav);
    const job = await client.batch.wait(ack.jobId, { timeoutMs, initialIntervalMs: 10 });
    assert.equal(job.status, 'done');
  }
  const ack = await client.batch.submit(wav);
  assert.equal(
    (await client.batch.wait(ack.jobId, { timeoutMs: Infinity, initialIntervalMs: 10 })).status,
    'done',
  );
  const before = emulator.stats().requests['batch.get'];
  await assert.rejects(client.batch.wait(ack.jobId, { timeoutMs: Number.NaN }), {
    code: 'ERR_INVALID_ARGUMENT',
  });
  assert.equal(emulator.stats().requests['batch.get'], before, 'no poll');
});

test('wait() deadline bounds a lookup in flight', { timeout: 10_000 }, async () => {
  const slow = await startService({ jobTiming: { queuedMs: 60_000, processingMs: 60_000 } });
  const ack = await slow.client.batch.submit(wav);
  const fault = slow.emulator.faults.add({ operation: 'batch.get', action: { type: 'stall' } });
  await assert.rejects(
    slow.client.batch.wait(ack.jobId, { timeoutMs: 200 }),
    (err: unknown) =>
      err instanceof BatchWaitTimeoutError &&
      err.code === 'ERR_WAIT_TIMEOUT' &&
      err.jobId === ack.jobId &&
      err.lastStatus === undefined,
  );
  fault.remove();
  assert.equal(slow.emulator.stats().requests['batch.get'], 1, 'one poll, abandoned at the deadline');
});

test('a read without save_result whose response is lost after it cleared the job: BatchResultLostError, not cleared', async () => {
  const ack = await client.batch.submit(wav);
  await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  const fault = emulator.faults.add({
    operation: 'batch.get',
    times: 1,
    action: { type: 'reset', stage: 'afterEffect' },
  });
  const before = emulator.stats().requests['batch.get'];
  const err = await client.batch.get(ack.jobId).catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof BatchResultLostError, String(err));
  assert.equal(err.code, 'ERR_RESULT_LOST');
  assert.equal(err.jobId, ack.jobId);
  assert.ok(err.cause instanceof TransportError);
  assert.equal(emulator.stats().requests['batch.get'] - before, 2);
});

test('a read without save_result lost before the service read it: recovered with save_result, then cleared', async () => {
  const ack = await client.batch.submit(wav);
  await client.batch.wait(ack.jobId, { initialIntervalMs: 10 });
  const fault = emulator.faults.add({ operation: 'batch.getLegacy', times: 1, action: { type: 'reset' } });
  const before = emulator.stats().requests['batch.getLegacy'];
  const job = await client.batch.getLegacy(ack.jobId);
  fault.remove();
  assert.equal(job.status, 'done');
  assert.ok(job.results.transcript.length > 0);
  // The failed read, the save_result read, and the clearing read the caller asked for.
  assert.equal(emulator.stats().requests['batch.getLegacy'] - before, 3);
  assert.equal((await client.batch.get(ack.jobId, { saveResult: true })).status, 'cleared');
});

test('abort in the middle of an upload releases the admission slot and the request body', async () => {
  const { stream, signal, reason } = abortingUpload(wav.subarray(0, 4096));
  const before = emulator.stats();
  await assert.rejects(
    client.batch.submit({ stream, filename: 'talk.wav' }, { signal }),
    (err: unknown) => err === reason,
  );
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(stream.destroyed, 'the input stream was released');
  const stats = batchRunning(client);
  assert.equal(stats.running, 0);
  assert.equal(stats.queued, 0);
  assert.equal(emulator.stats().jobsCreated, before.jobsCreated);
});

test('a 200 submit answer that is not an acknowledgement is ambiguous and follows the policy', async () => {
  for (const rawBody of ['<html>OK</html>', '{"jobId": 42}']) {
    const fault = emulator.faults.add({
      operation: 'batch.submit',
      times: 1,
      action: { type: 'status', status: 200, stage: 'afterEffect', rawBody, contentType: 'application/json' },
    });
    try {
      const before = emulator.stats();
      const seen: unknown[] = [];
      const err = await client.batch
        .submit(wav, { onAmbiguous: (e) => seen.push(e) })
        .catch((e: unknown) => e);
      assert.ok(err instanceof UnreadableSubmitAnswerError && err instanceof ProtocolError, String(err));
      assert.equal(err.ambiguous, true);
      assert.deepEqual(seen, [err]);
      const now = emulator.stats();
      assert.equal(now.jobsCreated - before.jobsCreated, 1, 'the job exists');
      assert.equal(now.requests['batch.submit'] - before.requests['batch.submit'], 1, 'not replayed');
    } finally {
      fault.remove();
    }
  }
  const fault = emulator.faults.add({
    operation: 'batch.submit',
    times: 1,
    action: { type: 'status', status: 200, stage: 'afterEffect', rawBody: 'not json' },
  });
  try {
    const seen: unknown[] = [];
    const ack = await client.batch.submit(wav, {
      onAmbiguousSubmit: 'resubmit',
      onAmbiguous: (e) => seen.push(e),
    });
    assert.equal(ack.attempts, 2);
    assert.equal(ack.ambiguousAttempts, 1);
    assert.equal(seen.length, 1);
  } finally {
    fault.remove();
  }
});

test('transcribe() gives the job id as soon as the job exists: a wait that fails then leaves a job the caller can still find', {
  timeout: 10_000,
}, async () => {
  const ctl = new AbortController();
  let jobId: string | undefined;
  const failed = await client.batch
    .transcribe(wav, {
      signal: ctl.signal,
      initialIntervalMs: 60_000,
      onSubmitted: (id) => {
        jobId = id;
        ctl.abort(new Error('stopped while waiting'));
      },
    })
    .catch((e: unknown) => e);
  assert.match(String(failed), /stopped while waiting/);
  assert.ok(jobId, 'the job id was given');
  // The job ran on at the service; its result is found with the id.
  const job = await client.batch.wait(jobId, { initialIntervalMs: 10 });
  assert.equal(job.status, 'done');
  assert.ok(job.status === 'done' && job.final_result.length > 0);
});
