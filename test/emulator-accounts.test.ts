// Accounts are isolated (issue 13): a batch job and a live stream belong to the account whose
// key made them. Another account's key gets 404 for the job and cannot feed or read the stream;
// a second key of the same account can.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { type EmulatorKey, startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import {
  call,
  connectSocket,
  filePart,
  MULTIPART_TYPE,
  multipart,
  ndjson,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const ALL = ['batch', 'realtime_asr', 'diarization', 'tts'] as EmulatorKey['capabilities'];
const A1: EmulatorKey = { key: 'key-a1', account: 'a', tier: 'standard', capabilities: ALL };
const A2: EmulatorKey = { key: 'key-a2', account: 'a', tier: 'standard', capabilities: ALL };
const B: EmulatorKey = { key: 'key-b', account: 'b', tier: 'standard', capabilities: ALL };

const emu = await startEmulator({ keys: [A1, A2, B], jobTiming: { queuedMs: 0, processingMs: 0 } });
after(() => emu.close());

const pcm = speechPcm([{ speech: 0.6 }, { silence: 0.4 }]);

const postFrame = (id: string, key: string, isStart: boolean, isFinal: boolean) =>
  call(`${emu.url}/http/stt-stream`, {
    key,
    body: encodeFrame({ streamId: id, isStart, isFinal, language: 'en', pcm }),
    headers: { 'content-type': 'application/octet-stream' },
  });

test('a batch job: 404 TRANSCRIPTION_JOB_NOT_FOUND for another account (V2 and V1); readable by a key of its own account', async () => {
  const submit = await call(`${emu.url}/v1/transcribe/en`, {
    key: A1.key,
    body: multipart([filePart(wavOf(pcm))]),
    headers: { 'content-type': MULTIPART_TYPE },
  });
  assert.equal(submit.status, 200, submit.text);
  const { jobId } = JSON.parse(submit.text) as { jobId: string };
  for (const path of [
    `/v1/transcribe/${jobId}?save_result=true`,
    `/v1/transcribe/${jobId}/en?save_result=true`,
  ]) {
    const other = await call(`${emu.url}${path}`, { key: B.key, method: 'GET' });
    assert.equal(other.status, 404, path);
    assert.equal(JSON.parse(other.text).code, 'TRANSCRIPTION_JOB_NOT_FOUND');
    const own = await call(`${emu.url}${path}`, { key: A2.key, method: 'GET' });
    assert.equal(own.status, 200, path);
  }
});

test('a live HTTP stream: another account cannot feed it or take its records; the owner goes on', async () => {
  const id = uuid();
  const post = (key: string, isStart: boolean, isFinal: boolean) => postFrame(id, key, isStart, isFinal);
  assert.equal((await post(A1.key, true, false)).status, 200);
  const intruder = await post(B.key, false, true);
  assert.equal(intruder.status, 409, intruder.text);
  assert.equal(JSON.parse(intruder.text).code, 'SESSION_EXPIRED');
  // A key of the same account feeds the same stream; its final record comes.
  const final = await post(A2.key, false, true);
  assert.equal(final.status, 200);
  assert.equal(ndjson(final.text).at(-1)?.is_final, true);
});

test('a start frame for an id another account has live opens a separate stream, and does not touch the first', async () => {
  const id = uuid();
  const post = (key: string, isStart: boolean, isFinal: boolean) => postFrame(id, key, isStart, isFinal);
  assert.equal((await post(A1.key, true, false)).status, 200);
  const other = await post(B.key, true, true);
  assert.equal(other.status, 200, 'no 409: the id is not live for this account');
  const own = await post(A1.key, false, true);
  assert.equal(own.status, 200);
  assert.equal(ndjson(own.text).at(-1)?.is_final, true);
});

test('Socket.IO: another account on another connection cannot feed a stream; its records go only to the owner', async () => {
  const owner = await connectSocket(emu.url, A1.key);
  const intruder = await connectSocket(emu.url, B.key);
  try {
    const id = uuid();
    const seen: unknown[] = [];
    intruder.on('transcription_result', (r) => seen.push(r));
    const ownerRecords: { is_final: boolean }[] = [];
    owner.on('transcription_result', (r) => ownerRecords.push(r));
    const ack1 = (await owner.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: id, isStart: true, language: 'en', pcm }),
    )) as { ok: boolean };
    assert.equal(ack1.ok, true);
    const ack2 = (await intruder.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: id, isStart: false, isFinal: true, language: 'en', pcm }),
    )) as { ok: boolean; error?: { code: string } };
    assert.equal(ack2.ok, false);
    assert.equal(ack2.error?.code, 'SESSION_EXPIRED');
    const ack3 = (await owner.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: id, isStart: false, isFinal: true, language: 'en', pcm }),
    )) as { ok: boolean };
    assert.equal(ack3.ok, true);
    await until(() => ownerRecords.some((r) => r.is_final), 'the owner gets the final record');
    assert.deepEqual(seen, []);
  } finally {
    owner.close();
    intruder.close();
  }
});
