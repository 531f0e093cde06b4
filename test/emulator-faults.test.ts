// Fault injection: every action (status before and after the effect, raw intermediary
// bodies, delay, reset before/after the effect/after bytes/after records, endWithoutFinal,
// truncateTts, stall, slowBody, fail), rule matching (operation, key, nth, times) and run-time
// changes, over HTTP and Socket.IO; and `close()` with requests in flight.

import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { describe, test } from 'node:test';
import type { Socket } from 'socket.io-client';
import { type Emulator, type EmulatorKey, type FaultRule, startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import { validateJobV1, validateJobV2 } from '../src/protocol/jobs.ts';
import { OPERATIONS } from '../src/protocol/operations.ts';
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
const TTS_TEXT = 'Hello there, how are you today?';
const ttsBody = (id = uuid()) => JSON.stringify({ id, text: TTS_TEXT });

/** A POST whose answer may be cut: the body bytes that arrived, and whether it ended normally. */
function partialPost(
  url: string,
  key: string,
  body: Buffer | string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Buffer; complete: boolean }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method: 'POST', agent: false, headers: { ...headers, 'x-api-key': key } });
    req.on('error', reject);
    req.on('response', (res) => {
      req.off('error', reject);
      req.on('error', () => {}); // the cut is reported by `complete`
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', () => {});
      res.on('close', () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks), complete: res.complete }),
      );
    });
    req.end(body);
  });
}

/** The frames of a TTS body (each starts with the request UUID). */
function ttsFrames(body: Buffer, id: string): { final: boolean; bytes: number }[] {
  const head = Buffer.from(id.replaceAll('-', ''), 'hex');
  const out: { final: boolean; bytes: number }[] = [];
  for (let at = body.indexOf(head); at >= 0; ) {
    const next = body.indexOf(head, at + 17);
    out.push({ final: body[at + 16] === 1, bytes: (next < 0 ? body.length : next) - at });
    at = next;
  }
  return out;
}

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
  test('afterEffect on a V1 job read without save_result: cleared although the read failed', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu)).json() as { jobId: string };
    const v1 = async () =>
      (
        await call(`${emu.url}/v1/transcribe/${jobId}/en?save_result=true`, { key: emu.apiKey, dispatcher })
      ).json() as Record<string, unknown>;
    await until(async () => (await v1()).status === 'done', 'done');
    emu.faults.add({
      operation: 'batch.getLegacy',
      times: 1,
      action: { type: 'status', status: 500, code: 'SERVER_INTERNAL', stage: 'afterEffect' },
    });
    const failed = await call(`${emu.url}/v1/transcribe/${jobId}/en`, { key: emu.apiKey, dispatcher });
    assert.equal(failed.status, 500);
    assert.equal((failed.json() as Record<string, unknown>).retryable, true);
    const later = await v1();
    assert.ok(validateJobV1(later).ok);
    assert.equal(later.status, 'cleared');
    assert.deepEqual(later.diarization_segments, []);
  });
});

describe('status faults after validation', () => {
  test('TTS: the 500/503 voice and moderation codes come after every check, before admission and synthesis', async () => {
    const emu = await emulator({ rateLimit: { requestsPerSecond: 0.001, burst: 1 } });
    emu.faults.add({
      operation: 'tts.http',
      times: 1,
      action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE', stage: 'afterValidation' },
    });
    const tts = (body: unknown) =>
      call(`${emu.url}/http/tts`, { key: emu.apiKey, body: JSON.stringify(body), dispatcher });
    const code = async (body: unknown) => {
      const reply = await tts(body);
      return `${reply.status} ${reply.status === 200 ? '' : (reply.json() as { code: string }).code}`;
    };
    assert.equal(await code({}), '400 VALIDATION_INVALID_FORMAT');
    assert.equal(await code({ id: uuid(), text: 'hi', voice_id: uuid() }), '400 TTS_VOICE_NOT_FOUND');
    assert.equal(await code({ id: uuid(), text: 'emulator-blocked' }), '400 TTS_INPUT_NOT_ALLOWED');
    assert.equal(await code({ id: uuid(), text: 'hi', model: 'other' }), '400 VALIDATION_INVALID_PARAM');
    assert.deepEqual(emu.stats().faultsApplied, {}, 'validation answered first');
    const id = uuid();
    const refused = await tts({ id, text: TTS_TEXT });
    assert.equal(refused.status, 503);
    const body = refused.json() as Record<string, unknown>;
    assert.equal(body.code, 'TTS_MODERATION_UNAVAILABLE');
    assert.equal(body.retryable, true);
    assert.equal(body.job_id, id);
    const stats = emu.stats();
    assert.equal(stats.ttsSyntheses, 0, 'no synthesis began');
    assert.equal(stats.maxConcurrent.tts, 0, 'no concurrency slot was taken');
    assert.equal(await code({ id: uuid(), text: TTS_TEXT }), '200 ', 'the one rate token was still there');
    assert.equal(await code({ id: uuid(), text: TTS_TEXT }), '429 RATE_LIMIT_EXCEEDED');
  });

  test('Socket.IO TTS and live frames: the same stage, where each operation admits itself', async () => {
    const emu = await emulator();
    emu.faults.add({
      operation: 'tts.socket',
      times: 1,
      action: { type: 'status', status: 500, code: 'TTS_VOICE_RESOLUTION_FAILED', stage: 'afterValidation' },
    });
    emu.faults.add({
      operation: 'stt.http',
      times: 1,
      action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE', stage: 'afterValidation' },
    });
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const ackCode = async (payload: unknown) =>
        ((await socket.emitWithAck('tts_request', payload)) as { ok: boolean; error?: { code: string } })
          .error?.code ?? 'ok';
      assert.equal(await ackCode({ id: uuid(), text: ' ' }), 'VALIDATION_REQUIRED_FIELD');
      assert.equal(await ackCode({ id: uuid(), text: TTS_TEXT }), 'TTS_VOICE_RESOLUTION_FAILED');
      assert.equal(emu.stats().ttsSyntheses, 0);
      assert.equal(await ackCode({ id: uuid(), text: TTS_TEXT }), 'ok', 'times: 1');
    } finally {
      socket.close();
    }
    assert.equal((await live(emu, frame(uuid()))).status, 409, 'the state check comes first');
    const id = uuid();
    const refused = await live(emu, frame(id, { start: true }));
    assert.equal(refused.status, 503);
    assert.equal((refused.json() as Record<string, unknown>).code, 'SERVER_DEPENDENCY_FAILURE');
    assert.equal(emu.stats().sessions.opened, 0, 'the start frame opened nothing');
    assert.equal((await live(emu, frame(id, { start: true }))).status, 200);
  });

  test('an unknown stage is refused', async () => {
    const emu = await emulator();
    assert.throws(
      () =>
        emu.faults.add({
          operation: '*',
          action: { type: 'status', status: 503, stage: 'later' as never },
        }),
      RangeError,
    );
    assert.throws(
      () => emu.faults.add({ operation: '*', action: { type: 'reset', stage: 'afterValidation' as never } }),
      RangeError,
      'reset acts before the operation or after its effect only',
    );
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
    for (const bad of [
      { operation: '*', times: 0, action: { type: 'fail' } },
      { operation: '*', times: 1.5, action: { type: 'fail' } },
      { operation: '*', action: { type: 'reset', afterBytes: -1 } },
      { operation: '*', action: { type: 'reset', afterBytes: 1.5 } },
      { operation: '*', action: { type: 'reset', afterRecords: -1 } },
      { operation: '*', action: { type: 'reset', afterRecords: Number.NaN } },
      { operation: '*', action: { type: 'reset', afterBytes: 1, afterRecords: 1 } },
      { operation: '*', action: { type: 'reset', stage: 'afterEffect', afterRecords: 1 } },
      { operation: '*', action: { type: 'truncateTts', afterBytes: -5 } },
      { operation: '*', action: { type: 'status', status: 503, retryAfter: -1 } },
      { operation: '*', action: { type: 'status', status: 503, retryAfter: Number.POSITIVE_INFINITY } },
      { operation: '*', action: { type: 'delay', ms: Number.POSITIVE_INFINITY } },
      { operation: '*', action: { type: 'slowBody', bytesPerSecond: Number.POSITIVE_INFINITY } },
    ] as FaultRule[]) {
      assert.throws(() => emu.faults.add(bad), RangeError, JSON.stringify(bad));
    }
    // A name that is none says which names are.
    assert.throws(() => emu.faults.add({ operation: 'fast', action: { type: 'fail' } } as never), {
      name: 'RangeError',
      message: `unknown operation "fast": use one of ${OPERATIONS.join(', ')}, or * for every operation`,
    });
    assert.throws(() => emu.faults.add({ operation: '*', action: { type: 'explode' } } as never), {
      name: 'RangeError',
      message:
        'unknown fault action "explode": use one of status, delay, reset, endWithoutFinal, truncateTts, stall, slowBody, fail',
    });
    // Valid edge values are accepted.
    emu.faults.add({ operation: '*', action: { type: 'reset', afterBytes: 0 } }).remove();
    emu.faults.add({ operation: '*', action: { type: 'status', status: 503, retryAfter: 0 } }).remove();
    emu.faults
      .add({
        operation: '*',
        action: { type: 'status', status: 503, retryAfter: 'Wed, 21 Oct 2015 07:28:00 GMT' },
      })
      .remove();
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

  test("status with retryAfter: the error payload's retry_after, in seconds (Socket.IO has no header)", async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      emu.faults.add({
        operation: 'voices.socket',
        times: 1,
        action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE', retryAfter: 7 },
      });
      const ack = (await socket.emitWithAck('list_voices')) as {
        ok: boolean;
        error: Record<string, unknown>;
      };
      assert.equal(ack.error.retry_after, 7);
      const at = new Date(Date.now() + 60_000).toUTCString();
      emu.faults.add({
        operation: 'voices.socket',
        times: 1,
        action: { type: 'status', status: 503, retryAfter: at },
      });
      const dated = (await socket.emitWithAck('list_voices')) as { error: Record<string, unknown> };
      const seconds = dated.error.retry_after as number;
      assert.ok(Number.isInteger(seconds) && seconds > 50 && seconds <= 60, String(seconds));
      emu.faults.add({ operation: 'voices.socket', times: 1, action: { type: 'status', status: 503 } });
      const none = (await socket.emitWithAck('list_voices')) as { error: Record<string, unknown> };
      assert.equal('retry_after' in none.error, false);
    } finally {
      socket.close();
    }
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

describe('Socket.IO live streams: output faults over the whole stream', () => {
  /** A stream sent as frames without acknowledgements (the server takes them in order). */
  const sendStream = (socket: Socket, id: string, size = 6400) => {
    for (let at = 0; at < pcm.length; at += size)
      socket.emit(
        'audio_stream',
        frame(id, { start: at === 0, final: at + size >= pcm.length }, pcm.subarray(at, at + size)),
      );
  };
  /** The records of one stream until its final record or a disconnect. */
  const recordsOf = async (emu: Emulator) => {
    const socket = await connectSocket(emu.url, emu.apiKey);
    const records: Record<string, unknown>[] = [];
    const ended = new Promise<string>((resolve) => {
      socket.once('disconnect', (reason) => resolve(reason));
      socket.on('transcription_result', (r: Record<string, unknown>) => {
        records.push(r);
        if (r.is_final) resolve('final');
      });
    });
    sendStream(socket, uuid());
    const how = await ended;
    socket.close();
    return { how, records: records.map(({ id: _id, ...rest }) => rest) };
  };

  test('slowBody: every record still arrives in order, the final one last', async () => {
    const plain = await recordsOf(await emulator());
    assert.equal(plain.how, 'final');
    assert.ok(plain.records.length > 3);
    const emu = await emulator({
      faults: [{ operation: 'stt.socket', action: { type: 'slowBody', bytesPerSecond: 5_000 } }],
    });
    const slow = await recordsOf(emu);
    assert.equal(slow.how, 'final');
    assert.deepEqual(slow.records, plain.records);
    assert.ok(emu.stats().faultsApplied.slowBody! > 1, 'each frame event is slowed');
  });

  test('reset afterRecords: N records of the stream, then the socket is disconnected', async () => {
    const plain = await recordsOf(await emulator());
    assert.ok(plain.records.length > 4);
    const emu = await emulator({
      faults: [{ operation: 'stt.socket', action: { type: 'reset', afterRecords: 3 } }],
    });
    const cut = await recordsOf(emu);
    assert.equal(cut.how, 'io server disconnect');
    assert.deepEqual(cut.records, plain.records.slice(0, 3));
    assert.equal(emu.stats().faultsApplied.reset, 1);
    await until(() => emu.stats().sessions.cancelled === 1, 'the stream cancelled by the disconnect');
  });
});

describe('a rule counts when its action acts', () => {
  test('a request refused by validation before the fault could act leaves it for the next request', async () => {
    const emu = await emulator();
    emu.faults.add({
      operation: 'tts.http',
      times: 1,
      action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE', stage: 'afterEffect' },
    });
    emu.faults.add({ operation: 'tts.http', times: 1, action: { type: 'truncateTts' } });
    const tts = (body: string) => call(`${emu.url}/http/tts`, { key: emu.apiKey, body, dispatcher });
    assert.equal((await tts('{}')).status, 400);
    assert.deepEqual(emu.stats().faultsApplied, {}, 'nothing acted on the refused request');
    const after = await tts(ttsBody());
    assert.equal(after.status, 503);
    assert.equal((after.json() as Record<string, unknown>).code, 'TTS_MODERATION_UNAVAILABLE');
    assert.deepEqual(emu.stats().faultsApplied, { status: 1 }, 'truncateTts had no output to act on');
    const id = uuid();
    const cut = await tts(ttsBody(id));
    assert.equal(cut.status, 200);
    assert.ok(
      ttsFrames(cut.body, id).every((f) => !f.final),
      'truncated',
    );
    const whole = uuid();
    assert.equal(ttsFrames((await tts(ttsBody(whole))).body, whole).at(-1)!.final, true, 'times: 1');
    assert.deepEqual(emu.stats().faultsApplied, { status: 1, truncateTts: 1 });
  });

  test('live: a fail rule waits for a frame that is accepted; a reset waits for output to cut', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'stt.http', times: 1, action: { type: 'fail' } });
    assert.equal((await live(emu, frame(uuid()))).status, 409, 'never started: the fault cannot act');
    const failed = await live(emu, frame(uuid(), { start: true }));
    assert.equal((failed.json() as Record<string, unknown>).code, 'ASR_TRANSCRIPTION_FAILED');
    assert.equal((await live(emu, frame(uuid(), { start: true }))).status, 200, 'times: 1');
    emu.faults.add({ operation: 'stt.http', times: 1, action: { type: 'reset', afterRecords: 1 } });
    const id = uuid();
    const silent = await live(emu, frame(id, { start: true }, Buffer.alloc(3200)));
    assert.equal(silent.status, 200, 'an answer without records has nothing to cut');
    await assert.rejects(live(emu, frame(id, { final: true })), 'the final record is cut');
    assert.deepEqual(emu.stats().faultsApplied, { fail: 1, reset: 1 });
  });
});

describe('reset and truncation count the same output on both transports', () => {
  test('reset afterBytes: HTTP sends exactly N bytes; Socket.IO the whole records within N (NDJSON line bytes)', async () => {
    const emu = await emulator();
    const id = uuid();
    const upload = multipart([filePart(wav)]);
    const lines = (
      await call(`${emu.url}/http/stt?id=${id}`, {
        key: emu.apiKey,
        headers: { 'content-type': MULTIPART_TYPE },
        body: upload,
        dispatcher,
      })
    ).text.split(/(?<=\n)/);
    assert.equal(lines.length, 2);
    const n = Buffer.byteLength(lines[0]!) + Buffer.byteLength(lines[1]!) - 1;
    emu.faults.add({ operation: 'fast.http', times: 1, action: { type: 'reset', afterBytes: n } });
    emu.faults.add({ operation: 'fast.socket', times: 1, action: { type: 'reset', afterBytes: n } });
    const http = await partialPost(`${emu.url}/http/stt?id=${id}`, emu.apiKey, upload, {
      'content-type': MULTIPART_TYPE,
    });
    assert.equal(http.status, 200);
    assert.equal(http.complete, false);
    assert.equal(http.body.length, n, 'exactly N bytes');
    assert.equal(http.body.toString(), lines.join('').slice(0, n));
    const socket = await connectSocket(emu.url, emu.apiKey);
    const records: { is_final: boolean }[] = [];
    // Ends at the disconnect, or (when nothing cuts it) at the final record.
    const over = new Promise((resolve) => {
      socket.once('disconnect', resolve);
      socket.on('transcription_result', (r: { is_final: boolean }) => {
        records.push(r);
        if (r.is_final) resolve(r);
      });
    });
    socket.emit('audio_file', { id, language: 'auto', audio: wav });
    await over;
    socket.close();
    assert.deepEqual(records, [JSON.parse(lines[0]!)], 'the one whole record within N');
  });

  test('reset afterRecords: N TTS frames over HTTP, N tts_audio events over Socket.IO', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'tts.http', times: 1, action: { type: 'reset', afterRecords: 2 } });
    emu.faults.add({ operation: 'tts.socket', times: 1, action: { type: 'reset', afterRecords: 2 } });
    const id = uuid();
    const http = await partialPost(`${emu.url}/http/tts`, emu.apiKey, ttsBody(id));
    assert.equal(http.complete, false);
    assert.deepEqual(ttsFrames(http.body, id), [
      { final: false, bytes: 17 + 3200 },
      { final: false, bytes: 17 + 4800 },
    ]);
    const socket = await connectSocket(emu.url, emu.apiKey);
    const events: { audio: Buffer; is_final: boolean }[] = [];
    const over = new Promise((resolve) => {
      socket.once('disconnect', resolve);
      socket.on('tts_audio', (e: { audio: Buffer; is_final: boolean }) => {
        events.push(e);
        if (e.is_final) resolve(e);
      });
    });
    socket.emit('tts_request', { id: uuid(), text: TTS_TEXT });
    await over;
    socket.close();
    assert.deepEqual(
      events.map((e) => e.audio.length),
      [4800, 7200],
    );
  });

  test('truncateTts afterBytes: the HTTP body ends after N bytes; Socket.IO audio events stop at N audio bytes', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'tts.http', times: 1, action: { type: 'truncateTts', afterBytes: 8034 } });
    emu.faults.add({
      operation: 'tts.socket',
      times: 1,
      action: { type: 'truncateTts', afterBytes: 12_000 },
    });
    const id = uuid();
    const http = await partialPost(`${emu.url}/http/tts`, emu.apiKey, ttsBody(id));
    assert.equal(http.complete, true, 'the body ends normally, only without its final frame');
    assert.equal(http.body.length, 8034);
    assert.deepEqual(ttsFrames(http.body, id), [
      { final: false, bytes: 17 + 3200 },
      { final: false, bytes: 17 + 4800 },
    ]);
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const events: { audio: Buffer; is_final: boolean }[] = [];
      socket.on('tts_audio', (e: { audio: Buffer; is_final: boolean }) => events.push(e));
      assert.deepEqual(await socket.emitWithAck('tts_request', { id: uuid(), text: TTS_TEXT }), { ok: true });
      await until(() => emu.stats().concurrent.tts === 0, 'synthesis over');
      await socket.emitWithAck('list_voices'); // every earlier event has arrived; still connected
      assert.deepEqual(
        events.map((e) => [e.audio.length, e.is_final]),
        [
          [4800, false],
          [7200, false],
        ],
      );
    } finally {
      socket.close();
    }
    assert.deepEqual(emu.stats().faultsApplied, { truncateTts: 2 });
  });
});
