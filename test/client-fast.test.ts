import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWav, IncompleteStreamError, SpeechServiceError } from '../src/index.ts';
import { startService } from './helpers/service.ts';
import { speechWav, speechWithPauses } from './helpers/speech.ts';

const wav = await speechWav('The quick brown fox jumps over the lazy dog.', { pauseMs: 200 });
// Several utterances, so the service streams several records before the final one.
const longWav = encodeWav(
  await speechWithPauses(['First sentence here.', 'Then a second one.', 'And a third.'], 900),
  16000,
);
const { emulator, client } = await startService();

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
