// Fault injection: every action (status before and after the effect, raw intermediary
// bodies, delay, reset before/after the effect/after bytes/after records, endWithoutFinal,
// truncateTts, stall, slowBody, fail), rule matching (operation, key, nth, times) and run-time
// changes, over HTTP and Socket.IO; and `close()` with requests in flight.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type Emulator, type EmulatorKey, startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import { validateJobV2 } from '../src/protocol/jobs.ts';
import {
  call,
  connectSocket,
  emulatorsForFile,
  filePart,
  MULTIPART_TYPE,
  multipart,
  ndjson,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({
  jobTiming: { queuedMs: 0, processingMs: 0 },
  tts: { engine: 'synthetic' },
});

const pcm = speechPcm([{ speech: 1.0 }, { silence: 0.8 }, { speech: 0.8 }, { silence: 0.4 }]);
const wav = wavOf(pcm);
const submit = (emu: Emulator, key = emu.apiKey) =>
  call(`${emu.url}/v1/transcribe/en`, {
    key,
    headers: { 'content-type': MULTIPART_TYPE },
    body: multipart([filePart(wav)]),
    dispatcher,
  });
const fast = (emu: Emulator) =>
  call(`${emu.url}/http/stt?id=${uuid()}`, {
    key: emu.apiKey,
    headers: { 'content-type': MULTIPART_TYPE },
    body: multipart([filePart(wav)]),
    dispatcher,
  });
const frame = (id: string, flags: { start?: boolean; final?: boolean } = {}, audio = pcm.subarray(0, 6400)) =>
  encodeFrame({ streamId: id, isStart: flags.start, isFinal: flags.final, language: 'en', pcm: audio });
const live = (emu: Emulator, body: Buffer, path = '/http/stt-stream') =>
  call(`${emu.url}${path}`, { key: emu.apiKey, body, dispatcher });

describe('status faults', () => {
  test('before: the given status, code, detail and Retry-After; nothing happens', async () => {
    const emu = await emulator({
      faults: [
        {
          operation: 'batch.submit',
          times: 1,
          action: {
            type: 'status',
            status: 503,
            code: 'SERVER_DEPENDENCY_FAILURE',
            detail: 'storage down',
            retryAfter: 7,
          },
        },
      ],
    });
    const reply = await submit(emu);
    assert.equal(reply.status, 503);
    assert.equal(reply.headers['retry-after'], '7');
    const body = reply.json() as Record<string, unknown>;
    assert.equal(body.code, 'SERVER_DEPENDENCY_FAILURE');
    assert.equal(body.detail, 'storage down');
    assert.equal(body.retryable, true);
    assert.equal(emu.stats().jobsCreated, 0);
    assert.equal(emu.stats().rejections.SERVER_DEPENDENCY_FAILURE, 1);
    assert.equal((await submit(emu)).status, 200, 'times: 1');
  });

  test("an intermediary's HTML page (rawBody, contentType)", async () => {
    const emu = await emulator({
      faults: [
        {
          operation: '*',
          action: {
            type: 'status',
            status: 502,
            rawBody: '<html><body><h1>502 Bad Gateway</h1></body></html>',
            contentType: 'text/html',
          },
        },
      ],
    });
    const reply = await call(`${emu.url}/v1/transcribe/${uuid()}`, { key: emu.apiKey, dispatcher });
    assert.equal(reply.status, 502);
    assert.equal(reply.headers['content-type'], 'text/html');
    assert.match(reply.text, /Bad Gateway/);
  });

  test('afterEffect on a batch submission: the job exists although the answer is an error (ambiguous)', async () => {
    const emu = await emulator({
      faults: [
        {
          operation: 'batch.submit',
          times: 1,
          action: { type: 'status', status: 500, code: 'ASR_TRANSCRIPTION_FAILED', stage: 'afterEffect' },
        },
      ],
    });
    const reply = await submit(emu);
    assert.equal(reply.status, 500);
    assert.equal((reply.json() as Record<string, unknown>).code, 'ASR_TRANSCRIPTION_FAILED');
    assert.equal(emu.stats().jobsCreated, 1);
  });

  test('afterEffect on a live frame: the frame counts, the answer is an error, the stream goes on', async () => {
    const emu = await emulator();
    const id = uuid();
    assert.equal((await live(emu, frame(id, { start: true }))).status, 200);
    emu.faults.add({
      operation: 'stt.http',
      times: 1,
      action: { type: 'status', status: 503, stage: 'afterEffect' },
    });
    const reply = await live(emu, frame(id));
    assert.equal(reply.status, 503);
    assert.equal((reply.json() as Record<string, unknown>).code, 'HTTP_503');
    assert.equal(emu.stats().framesAccepted, 2, 'the frame was accepted');
    const last = await live(emu, frame(id, { final: true }));
    assert.equal(ndjson(last.text).at(-1)!.is_final, true);
    assert.equal(emu.stats().sessions.finished, 1);
  });

  test('afterEffect on a job read without save_result: the result is cleared although the read failed', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu)).json() as { jobId: string };
    await until(async () => {
      const r = await call(`${emu.url}/v1/transcribe/${jobId}?save_result=true`, {
        key: emu.apiKey,
        dispatcher,
      });
      return (r.json() as { data: { status: string } }).data.status === 'done';
    }, 'done');
    emu.faults.add({
      operation: 'batch.get',
      times: 1,
      action: { type: 'status', status: 500, code: 'SERVER_INTERNAL', stage: 'afterEffect' },
    });
    assert.equal(
      (await call(`${emu.url}/v1/transcribe/${jobId}`, { key: emu.apiKey, dispatcher })).status,
      500,
    );
    const later = (await call(`${emu.url}/v1/transcribe/${jobId}`, { key: emu.apiKey, dispatcher })).json();
    assert.ok(validateJobV2(later).ok);
    assert.equal((later as { data: { status: string } }).data.status, 'cleared');
  });
});

describe('connection faults', () => {
  test('reset before: the connection drops, no job; after the effect: the connection drops, one job', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'batch.submit', times: 1, action: { type: 'reset' } });
    await assert.rejects(submit(emu));
    assert.equal(emu.stats().jobsCreated, 0);
    emu.faults.add({ operation: 'batch.submit', times: 1, action: { type: 'reset', stage: 'afterEffect' } });
    await assert.rejects(submit(emu));
    assert.equal(emu.stats().jobsCreated, 1);
    assert.equal((await submit(emu)).status, 200);
  });

  test('reset after N records (fast) and after N bytes (TTS) cut a 200 short', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'fast.http', times: 1, action: { type: 'reset', afterRecords: 1 } });
    await assert.rejects(fast(emu));
    assert.equal(ndjson((await fast(emu)).text).length, 2);
    emu.faults.add({ operation: 'tts.http', times: 1, action: { type: 'reset', afterBytes: 100 } });
    await assert.rejects(
      call(`${emu.url}/http/tts`, {
        key: emu.apiKey,
        body: JSON.stringify({ id: uuid(), text: 'hello world' }),
        dispatcher,
      }),
    );
  });

  test('stall: no answer until the client gives up', async () => {
    const emu = await emulator({ faults: [{ operation: 'batch.get', action: { type: 'stall' } }] });
    const controller = new AbortController();
    const pending = call(`${emu.url}/v1/transcribe/${uuid()}`, {
      key: emu.apiKey,
      dispatcher,
      signal: controller.signal,
    });
    await until(() => emu.stats().requests['batch.get'] === 1, 'the request arrived');
    controller.abort();
    await assert.rejects(pending);
  });

  test('close() ends stalled requests, live streams and pending jobs', async () => {
    const emu = await startEmulator({
      jobTiming: { queuedMs: 600_000 },
      faults: [{ operation: 'batch.get', action: { type: 'stall' } }],
    });
    const pending = call(`${emu.url}/v1/transcribe/${uuid()}`, { key: emu.apiKey, dispatcher }).catch(
      (e: Error) => e,
    );
    assert.equal((await submit(emu)).status, 200);
    assert.equal((await live(emu, frame(uuid(), { start: true }))).status, 200);
    await until(() => emu.stats().requests['batch.get'] === 1, 'the stalled request');
    await emu.close();
    assert.ok((await pending) instanceof Error);
    assert.equal(emu.stats().sessions.active, 0);
  });

  test('delay and slowBody: the answer still arrives, whole', async () => {
    const emu = await emulator();
    const plain = ndjson((await fast(emu)).text);
    emu.faults.add({ operation: 'fast.http', times: 1, action: { type: 'delay', ms: 30 } });
    emu.faults.add({
      operation: 'fast.http',
      times: 1,
      action: { type: 'slowBody', bytesPerSecond: 20_000 },
    });
    const slow = ndjson((await fast(emu)).text);
    assert.deepEqual(
      slow.map((r) => r.transcription),
      plain.map((r) => r.transcription),
    );
    assert.deepEqual(emu.stats().faultsApplied, { delay: 1, slowBody: 1 });
  });
});

describe('stream faults', () => {
  test('endWithoutFinal: fast records without the final one', async () => {
    const emu = await emulator({
      faults: [{ operation: 'fast.http', times: 1, action: { type: 'endWithoutFinal' } }],
    });
    const reply = await fast(emu);
    assert.equal(reply.status, 200);
    const records = ndjson(reply.text);
    assert.equal(records.length, 1);
    assert.equal(
      records.some((r) => r.is_final),
      false,
    );
  });

  test('endWithoutFinal on a live stream: only the final answer is affected, the stream is lost', async () => {
    const emu = await emulator({
      faults: [{ operation: 'stt.http', nth: 1, action: { type: 'endWithoutFinal' } }],
    });
    const id = uuid();
    for (let at = 0; at < pcm.length; at += 6400) {
      const reply = await live(
        emu,
        frame(id, { start: at === 0, final: at + 6400 >= pcm.length }, pcm.subarray(at, at + 6400)),
      );
      assert.equal(reply.status, 200);
      assert.equal(
        ndjson(reply.text).some((r) => r.is_final),
        false,
      );
    }
    assert.equal(emu.stats().faultsApplied.endWithoutFinal, 1);
    assert.equal(emu.stats().sessions.cancelled, 1);
  });

  test('fail: the operation’s own failure before output', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'stt.http', action: { type: 'fail' } });
    emu.faults.add({ operation: 'diarization.http', action: { type: 'fail' } });
    emu.faults.add({ operation: 'fast.http', action: { type: 'fail' } });
    const asr = await live(emu, frame(uuid(), { start: true }));
    assert.equal(asr.status, 500);
    assert.equal((asr.json() as Record<string, unknown>).code, 'ASR_TRANSCRIPTION_FAILED');
    const diarization = await live(emu, frame(uuid(), { start: true }), '/http/diarization-stream');
    assert.equal(diarization.status, 500);
    assert.equal((diarization.json() as Record<string, unknown>).code, 'DIARIZATION_FAILED');
    const f = await fast(emu);
    assert.equal(f.status, 500);
    assert.equal((f.json() as Record<string, unknown>).retryable, true);
    assert.equal(emu.stats().sessions.failed, 2);
    assert.equal(emu.stats().sessions.active, 0);
  });
});

describe('rule matching', () => {
  test('key, nth, times; add, remove and clear at run time', async () => {
    const other: EmulatorKey = { key: 'second-key', account: 'x', tier: 'standard', capabilities: ['batch'] };
    const emu = await emulator({
      keys: [{ key: 'first-key', account: 'x', tier: 'standard', capabilities: ['batch'] }, other],
    });
    const status = async (key?: string) =>
      (await call(`${emu.url}/v1/transcribe/${uuid()}`, { key: key ?? emu.apiKey, dispatcher })).status;
    const byKey = emu.faults.add({
      operation: 'batch.get',
      key: other.key,
      action: { type: 'status', status: 418 },
    });
    assert.equal(await status(), 404);
    assert.equal(await status(other.key), 418);
    byKey.remove();
    assert.equal(await status(other.key), 404);

    emu.faults.add({ operation: 'batch.get', nth: 2, action: { type: 'status', status: 599 } });
    assert.deepEqual([await status(), await status(), await status()], [404, 599, 404], 'only the 2nd match');
    emu.faults.clear();
    emu.faults.add({ operation: 'batch.get', nth: 2, times: 2, action: { type: 'status', status: 599 } });
    assert.deepEqual([await status(), await status(), await status(), await status()], [404, 599, 599, 404]);
    emu.faults.clear();
    emu.faults.add({ operation: '*', times: 2, action: { type: 'status', status: 500 } });
    assert.deepEqual([await status(), await status(), await status()], [500, 500, 404]);
    assert.equal(emu.stats().requests['batch.get'], 13);
  });

  test('invalid rules are refused', async () => {
    const emu = await emulator();
    assert.throws(() => emu.faults.add({ operation: '*', nth: 0, action: { type: 'fail' } }), RangeError);
    assert.throws(
      () => emu.faults.add({ operation: '*', action: { type: 'status', status: 42 } }),
      RangeError,
    );
    assert.throws(
      () => emu.faults.add({ operation: '*', action: { type: 'slowBody', bytesPerSecond: 0 } }),
      RangeError,
    );
  });
});

describe('Socket.IO faults', () => {
  test('status: a negative acknowledgement; reset: the socket is disconnected', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    emu.faults.add({
      operation: 'voices.socket',
      times: 1,
      action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE' },
    });
    const ack = (await socket.emitWithAck('list_voices')) as { ok: boolean; error: Record<string, unknown> };
    assert.equal(ack.ok, false);
    assert.equal(ack.error.code, 'SERVER_DEPENDENCY_FAILURE');
    emu.faults.add({ operation: 'stt.socket', times: 1, action: { type: 'reset' } });
    const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
    socket.emit('audio_stream', frame(uuid(), { start: true }));
    assert.equal(await gone, 'io server disconnect');
    socket.close();
  });

  test('endWithoutFinal on audio_stream and truncateTts on tts_request: no final event', async () => {
    const emu = await emulator({
      faults: [
        { operation: 'stt.socket', action: { type: 'endWithoutFinal' } },
        { operation: 'tts.socket', action: { type: 'truncateTts' } },
      ],
    });
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const finals: string[] = [];
      let ttsEvents = 0;
      socket.on('transcription_result', (r: { is_final: boolean }) => r.is_final && finals.push('asr'));
      socket.on('tts_audio', (e: { is_final: boolean }) => {
        ttsEvents++;
        if (e.is_final) finals.push('tts');
      });
      const id = uuid();
      assert.deepEqual(
        await socket.emitWithAck('audio_stream', frame(id, { start: true, final: true }, pcm)),
        { ok: true },
      );
      await until(() => emu.stats().sessions.cancelled === 1, 'the stream lost');
      assert.deepEqual(await socket.emitWithAck('tts_request', { id: uuid(), text: 'hello there' }), {
        ok: true,
      });
      await until(() => emu.stats().concurrent.tts === 0, 'synthesis over');
      await socket.emitWithAck('list_voices'); // every earlier event has arrived by now
      assert.ok(ttsEvents > 0);
      assert.deepEqual(finals, []);
    } finally {
      socket.close();
    }
  });
});
