import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { multipartOverhead } from '../src/client/multipart.ts';
import {
  encodeWav,
  type FastRecord,
  IncompleteStreamError,
  ProtocolError,
  SpeechServiceError,
  TransportError,
} from '../src/index.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { abortingUpload } from './helpers/aborting-upload.ts';
import { startService } from './helpers/service.ts';
import { speechWav, speechWithPauses } from './helpers/speech.ts';

const wav = await speechWav('The quick brown fox jumps over the lazy dog.', { pauseMs: 200 });
// Several utterances, so the service streams several records before the final one.
const longWav = encodeWav(
  await speechWithPauses(['First sentence here.', 'Then a second one.', 'And a third.'], 900),
  16000,
);
const { emulator, client, newClient } = await startService();

async function collect(records: AsyncIterable<FastRecord>): Promise<{ got: FastRecord[]; err: unknown }> {
  const got: FastRecord[] = [];
  try {
    for await (const r of records) got.push(r);
    return { got, err: undefined };
  } catch (err) {
    return { got, err };
  }
}

for (const transport of ['http', 'socketio'] as const) {
  test(`fast transcription over ${transport}: records end with is_final`, async () => {
    const records = [];
    for await (const record of client.fast.transcribe(wav, { language: 'en', transport }))
      records.push(record);
    assert.ok(records.length >= 1);
    assert.equal(records.at(-1)!.is_final, true);
    assert.ok(records.slice(0, -1).every((r) => !r.is_final));
    assert.ok(records.at(-1)!.words.length > 0);
  });
}

test('a 200 that ends without is_final is an IncompleteStreamError', async () => {
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: { type: 'endWithoutFinal' },
  });
  await assert.rejects(
    client.fast.transcribeFinal(wav),
    (err: unknown) => err instanceof IncompleteStreamError && err.code === 'ERR_INCOMPLETE_STREAM',
  );
  fault.remove();
});

test('a reset after the first record is an IncompleteStreamError (no replay)', async () => {
  const before = emulator.stats().requests['fast.http'];
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: { type: 'reset', afterRecords: 1 },
  });
  const got = [];
  const err = await (async () => {
    for await (const r of client.fast.transcribe(longWav)) got.push(r);
  })().catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof IncompleteStreamError, String(err));
  assert.equal(got.length, 1);
  assert.equal(emulator.stats().requests['fast.http'] - before, 1);
});

test('a retryable 500 before any record is retried with a fresh id', async () => {
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: { type: 'status', status: 500, code: 'ASR_TRANSCRIPTION_FAILED' },
  });
  const before = emulator.stats().requests['fast.http'];
  const firstId = '0f8fad5b-d9cb-469f-a165-70867728950e';
  const final = await client.fast.transcribeFinal(wav, { id: firstId });
  fault.remove();
  assert.equal(final.is_final, true);
  assert.equal(emulator.stats().requests['fast.http'] - before, 2);
  assert.notEqual(final.id, firstId, 'the retry used a fresh id');
});

test('the fast byte limit is checked before upload', async () => {
  const before = emulator.stats().requests['fast.http'];
  const { client: small } = await startService({}, { limits: { fastAudioBytes: 100 } });
  await assert.rejects(
    small.fast.transcribeFinal(wav),
    (err: unknown) => err instanceof SpeechServiceError && err.status === 413 && err.origin === 'local',
  );
  assert.equal(emulator.stats().requests['fast.http'], before);
});

test('a reset inside the second NDJSON line is an IncompleteStreamError after one record (no replay)', async () => {
  const whole = await collect(client.fast.transcribe(longWav));
  assert.ok(whole.got.length >= 2, 'the fixture gives several records');
  // The service writes each record as one JSON line: cut 10 bytes into the second one.
  const firstLine = JSON.stringify(whole.got[0]).length + 1;
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: { type: 'reset', afterBytes: firstLine + 10 },
  });
  const before = emulator.stats().requests['fast.http'];
  const { got, err } = await collect(client.fast.transcribe(longWav));
  fault.remove();
  assert.ok(err instanceof IncompleteStreamError, String(err));
  assert.equal(err.received, 1);
  assert.equal(got.length, 1);
  assert.deepEqual({ ...got[0], id: '' }, { ...whole.got[0], id: '' });
  assert.equal(emulator.stats().requests['fast.http'] - before, 1);
});

test('a reset inside the first NDJSON line delivered nothing: retried with a fresh id', async () => {
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: { type: 'reset', afterBytes: 10 },
  });
  const before = emulator.stats().requests['fast.http'];
  const firstId = '0f8fad5b-d9cb-469f-a165-70867728950e';
  const final = await client.fast.transcribeFinal(longWav, { id: firstId });
  fault.remove();
  assert.equal(final.is_final, true);
  assert.notEqual(final.id, firstId);
  assert.equal(emulator.stats().requests['fast.http'] - before, 2);
});

for (const transport of ['http', 'socketio'] as const) {
  test(`fast over ${transport}: 429 with Retry-After is waited out, nothing lost`, async () => {
    const operation = transport === 'http' ? 'fast.http' : 'fast.socket';
    const fault = emulator.faults.add({
      operation,
      times: 1,
      action: { type: 'status', status: 429, code: 'CONCURRENCY_LIMIT_EXCEEDED', retryAfter: 0.05 },
    });
    const before = emulator.stats();
    const { got, err } = await collect(client.fast.transcribe(wav, { transport }));
    fault.remove();
    assert.equal(err, undefined);
    assert.equal(got.at(-1)!.is_final, true);
    const now = emulator.stats();
    assert.equal(now.requests[operation] - before.requests[operation], 2);
    assert.equal(
      now.rejections.CONCURRENCY_LIMIT_EXCEEDED! - (before.rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0),
      1,
    );
  });
}

test('fast: a one-shot stream refused with 429 surfaces that 429; a stream factory is retried', async () => {
  const add = () =>
    emulator.faults.add({
      operation: 'fast.http',
      times: 1,
      action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 0.05 },
    });
  let fault = add();
  let before = emulator.stats().requests['fast.http'];
  const { err } = await collect(client.fast.transcribe(Readable.from([wav])));
  fault.remove();
  assert.ok(err instanceof SpeechServiceError && err.status === 429, String(err));
  assert.equal(err.code, 'RATE_LIMIT_EXCEEDED');
  assert.equal(err.retryable, true);
  assert.match(err.detail ?? '', /one-shot stream/);
  assert.equal(emulator.stats().requests['fast.http'] - before, 1);

  fault = add();
  before = emulator.stats().requests['fast.http'];
  const final = await client.fast.transcribeFinal({ stream: () => Readable.from([wav]), filename: 'a.wav' });
  fault.remove();
  assert.equal(final.is_final, true);
  assert.equal(emulator.stats().requests['fast.http'] - before, 2);
});

test('fast pre-flight: HTTP counts the multipart body, Socket.IO the audio alone', async () => {
  const limit = wav.length + multipartOverhead('audio', 'application/octet-stream') - 1;
  const tight = newClient({ limits: { fastAudioBytes: limit } });
  const before = emulator.stats().requests['fast.http'];
  await assert.rejects(
    tight.fast.transcribeFinal(wav),
    (err: unknown) =>
      err instanceof SpeechServiceError &&
      err.status === 413 &&
      err.origin === 'local' &&
      err.limit?.observed === limit + 1,
  );
  assert.equal(emulator.stats().requests['fast.http'], before);
  assert.equal((await tight.fast.transcribeFinal(wav, { transport: 'socketio' })).is_final, true);
});

test('the Socket.IO audio_file acknowledgement wait is the client option timeouts.uploadHeadersMs', {
  timeout: 10_000,
}, async () => {
  const impatient = newClient({ timeouts: { uploadHeadersMs: 200 }, retry: { maxAttempts: 1 } });
  const fault = emulator.faults.add({ operation: 'fast.socket', times: 1, action: { type: 'stall' } });
  const { err } = await collect(impatient.fast.transcribe(wav, { transport: 'socketio' }));
  fault.remove();
  assert.ok(err instanceof TransportError && err.code === 'ERR_TIMEOUT', String(err));
});

test('abort in the middle of a fast upload releases the admission slot and the request body', async () => {
  const { stream, signal, reason } = abortingUpload(wav.subarray(0, 4096));
  const { err } = await collect(client.fast.transcribe(stream, { signal }));
  assert.equal(err, reason);
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(stream.destroyed, 'the input stream was released');
  const stats = client.admissionStats().find((s) => s.workload === 'fast')!;
  assert.equal(stats.running, 0);
  assert.equal(stats.queued, 0);
});

test('Socket.IO audio_file waits for its acknowledgement as long as an upload, not a frame', async () => {
  // The service acknowledges audio_file after validating the whole upload: a socketAckMs sized
  // for frames must not cut that wait short (it still bounds the voice listing).
  const c = newClient({ timeouts: { socketAckMs: 1 }, retry: { maxAttempts: 1 } });
  const delay = emulator.faults.add({
    operation: 'fast.socket',
    times: 1,
    action: { type: 'delay', ms: 100 },
  });
  try {
    const { got, err } = await collect(c.fast.transcribe(wav, { language: 'en', transport: 'socketio' }));
    assert.equal(err, undefined);
    assert.equal(got.at(-1)?.is_final, true);
  } finally {
    delay.remove();
  }
  const stall = emulator.faults.add({ operation: 'voices.socket', times: 1, action: { type: 'stall' } });
  try {
    await assert.rejects(
      c.tts.listVoices(),
      (e: unknown) => e instanceof TransportError && e.code === 'ERR_TIMEOUT',
    );
  } finally {
    stall.remove();
  }
});

test('fast over HTTP: records before a bad NDJSON line are delivered, then the error', async () => {
  const id = randomUuid();
  const record = { id, seq: 0, transcription: 'hello', words: [], is_final: false };
  // One body, so one read: the good record and the bad line arrive in the same chunk.
  const fault = emulator.faults.add({
    operation: 'fast.http',
    times: 1,
    action: {
      type: 'status',
      status: 200,
      rawBody: `${JSON.stringify(record)}\n{not json}\n`,
      contentType: 'application/x-ndjson',
    },
  });
  try {
    const { got, err } = await collect(client.fast.transcribe(wav, { id }));
    assert.deepEqual(got, [record]);
    assert.ok(err instanceof ProtocolError && err.code === 'ERR_NDJSON_INVALID_JSON', String(err));
  } finally {
    fault.remove();
  }
});

for (const transport of ['http', 'socketio'] as const) {
  test(`transcribeFinal over ${transport} holds every record's words, not the last region's`, async () => {
    const records = [];
    for await (const r of client.fast.transcribe(longWav, { transport })) records.push(r);
    assert.ok(records.length > 1, `the file gives several records (${records.length})`);
    const all = records.flatMap((r) => r.words);
    const final = await client.fast.transcribeFinal(longWav, { transport });
    assert.equal(final.is_final, true);
    assert.deepEqual(
      final.words.map((w) => w.word),
      all.map((w) => w.word),
    );
    assert.ok(final.words.length > records.at(-1)!.words.length);
    assert.equal(
      final.transcription,
      records
        .map((r) => r.transcription.trim())
        .filter(Boolean)
        .join(' '),
    );
  });
}
