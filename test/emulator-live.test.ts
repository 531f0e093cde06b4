// Live streams against the emulator: the pseudo-session state machine over framed HTTP (start,
// 409s, finish, expiry, idle retirement, session audio and byte-rate limits, slots, frame size,
// the response window, aborted POSTs, one diarization POST at a time) and Socket.IO streams
// with frame acknowledgements.

import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import type { Admit } from '../src/emulator/admission.ts';
import { EmulatorContext } from '../src/emulator/context.ts';
import type { Emulator } from '../src/emulator/index.ts';
import { Lifecycle } from '../src/emulator/lifecycle.ts';
import { Rejection } from '../src/emulator/rejection.ts';
import { ServerSessions, type SessionScope, sessionScope } from '../src/emulator/sessions.ts';
import { decodeFrame, encodeFrame, FRAME_HEADER_BYTES } from '../src/protocol/frame.ts';
import { validateAsrRecord, validateDiarizationRecord } from '../src/protocol/records.ts';
import {
  call,
  collectUntilFinal,
  connectSocket,
  emulatorsForFile,
  expectError,
  ndjson,
  speechPcm,
  until,
  uuid,
} from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({});

const ASR = '/realtime/http/stt-stream';
const DIAR = '/http/diarization-stream';
/** Both framed HTTP operations: the frame and session rules are the same on each. */
const ROUTES = [
  ['ASR', ASR],
  ['diarization', DIAR],
] as const;
const pcm = speechPcm([{ speech: 1.0 }, { silence: 0.8 }, { speech: 0.8 }, { silence: 0.4 }]);

interface FrameInput {
  id: string;
  start?: boolean;
  final?: boolean;
  pcm?: Buffer;
}

const frameOf = (f: FrameInput) =>
  encodeFrame({
    streamId: f.id,
    isStart: f.start,
    isFinal: f.final,
    language: 'en',
    pcm: f.pcm ?? Buffer.alloc(640),
  });

async function post(emu: Emulator, path: string, body: Buffer | AsyncIterable<Buffer>, signal?: AbortSignal) {
  const reply = await call(`${emu.url}${path}`, {
    key: emu.apiKey,
    headers: { 'content-type': 'application/octet-stream' },
    body,
    dispatcher,
    signal,
  });
  return { ...reply, records: reply.status === 200 ? ndjson(reply.text) : [] };
}

const send = (emu: Emulator, path: string, f: FrameInput) => post(emu, path, frameOf(f));

/** Stream `audio` as frames of `size` bytes; returns every record of every answer. */
async function stream(emu: Emulator, path: string, id: string, audio: Buffer, size = 3200) {
  const records: Record<string, unknown>[] = [];
  for (let at = 0; at < audio.length; at += size) {
    const reply = await send(emu, path, {
      id,
      start: at === 0,
      final: at + size >= audio.length,
      pcm: audio.subarray(at, at + size),
    });
    assert.equal(reply.status, 200, reply.text);
    assert.equal(reply.headers['content-type'], 'application/x-ndjson');
    records.push(...reply.records);
  }
  return records;
}

describe('realtime ASR over HTTP', () => {
  test('a stream: provisional records, speech-final records at pauses, one final record, then finished', async () => {
    const emu = await emulator();
    const id = uuid();
    const records = await stream(emu, ASR, id, pcm);
    for (const r of records) assert.ok(validateAsrRecord(r).ok, JSON.stringify(r));
    assert.ok(records.every((r) => r.id === id));
    assert.equal(records.filter((r) => r.is_final).length, 1);
    assert.equal(records.at(-1)!.is_final, true);
    assert.ok(records.filter((r) => r.is_speech_final && !r.is_final).length >= 1);
    assert.ok(records.some((r) => !r.is_speech_final));
    const s = emu.stats();
    assert.deepEqual([s.sessions.opened, s.sessions.finished, s.sessions.active], [1, 1, 0]);
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
    // The same audio in any framing commits the same words.
    const again = await stream(emu, ASR, uuid(), pcm, 1000);
    const committed = (rs: Record<string, unknown>[]) =>
      rs
        .filter((r) => r.is_speech_final)
        .map((r) => r.transcription)
        .join(' | ');
    assert.equal(committed(again), committed(records));
  });

  test('one frame with both flags is a whole stream; the alias path works the same', async () => {
    const emu = await emulator();
    const reply = await send(emu, '/http/realtime-asr', { id: uuid(), start: true, final: true, pcm });
    assert.equal(reply.records.at(-1)!.is_final, true);
  });

  test('409 SESSION_EXPIRED: a frame for an id never started, is_start on a live id', async () => {
    const emu = await emulator();
    expectError(await send(emu, ASR, { id: uuid() }), 409, 'SESSION_EXPIRED');
    expectError(await send(emu, ASR, { id: uuid(), final: true }), 409, 'SESSION_EXPIRED');
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true })).status, 200);
    expectError(await send(emu, ASR, { id, start: true }), 409, 'SESSION_EXPIRED');
    assert.equal((await send(emu, ASR, { id })).status, 200, 'the live stream is unchanged');
  });

  for (const [name, path] of ROUTES) {
    test(`${name}: frame validation, the 400s of decodeFrame`, async () => {
      const emu = await emulator();
      const good = frameOf({ id: uuid(), start: true });
      const zero = Buffer.from(good);
      zero.fill(0, 0, 16);
      const reserved = Buffer.from(good);
      reserved[16] = 0b100;
      const language = Buffer.from(good);
      language[17] = 7;
      expectError(await post(emu, path, good.subarray(0, 10)), 400, 'VALIDATION_FILE_CORRUPT');
      expectError(await post(emu, path, zero), 400, 'VALIDATION_FILE_CORRUPT');
      expectError(
        await post(emu, path, good.subarray(0, FRAME_HEADER_BYTES)),
        400,
        'VALIDATION_FILE_CORRUPT',
      );
      expectError(
        await post(emu, path, good.subarray(0, FRAME_HEADER_BYTES + 3)),
        400,
        'VALIDATION_INVALID_FORMAT',
      );
      expectError(await post(emu, path, reserved), 400, 'VALIDATION_INVALID_FORMAT');
      expectError(await post(emu, path, language), 400, 'VALIDATION_INVALID_LANGUAGE');
      assert.equal(emu.stats().sessions.opened, 0);
    });
  }

  test('frame body: at the limit accepted, one byte over it 413 with the bound (declared and chunked)', async () => {
    const emu = await emulator({
      limits: { realtimeAsrFrameBytes: 3218, realtimeDiarizationFrameBytes: 1018 },
    });
    assert.equal((await send(emu, ASR, { id: uuid(), start: true, pcm: Buffer.alloc(3200) })).status, 200);
    // An odd PCM count: the size is checked before the frame is decoded.
    const over = Buffer.concat([
      frameOf({ id: uuid(), start: true, pcm: Buffer.alloc(3200) }),
      Buffer.alloc(1),
    ]);
    assert.equal(over.length, 3219);
    const declared = expectError(await post(emu, ASR, over), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(declared.data, {
      limit: 3218,
      observed: 3219,
      unit: 'bytes',
      bound: 'realtime_asr_frame_bytes',
    });
    const big = frameOf({ id: uuid(), start: true, pcm: Buffer.alloc(40_000) });
    for (const body of [over, big]) {
      const chunked = expectError(
        await post(emu, ASR, Readable.from([body.subarray(0, 1000), body.subarray(1000)])),
        413,
        'PAYLOAD_TOO_LARGE',
      );
      assert.deepEqual(chunked.data, {
        limit: 3218,
        observed: 3219,
        unit: 'bytes',
        bound: 'realtime_asr_frame_bytes',
      });
    }
    assert.equal((await send(emu, DIAR, { id: uuid(), start: true, pcm: Buffer.alloc(1000) })).status, 200);
    const d = expectError(
      await post(
        emu,
        DIAR,
        Buffer.concat([frameOf({ id: uuid(), start: true, pcm: Buffer.alloc(1000) }), Buffer.alloc(1)]),
      ),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    assert.deepEqual(d.data, {
      limit: 1018,
      observed: 1019,
      unit: 'bytes',
      bound: 'realtime_diarization_frame_bytes',
    });
    assert.equal(emu.stats().sessions.opened, 2);
  });

  for (const [name, path] of ROUTES) {
    test(`${name}: session audio, exactly the limit accepted; more retires the stream (422), then 409`, async () => {
      const emu = await emulator({ limits: { sessionAudioDurationSec: 1 } });
      const id = uuid();
      assert.equal((await send(emu, path, { id, start: true, pcm: Buffer.alloc(16_000) })).status, 200);
      assert.equal(
        (await send(emu, path, { id, pcm: Buffer.alloc(16_000) })).status,
        200,
        'exactly one second in all',
      );
      const over = expectError(
        await send(emu, path, { id, pcm: Buffer.alloc(2) }),
        422,
        'AUDIO_DURATION_EXCEEDED',
      );
      assert.deepEqual(over.data, {
        limit: 1,
        observed: 2,
        unit: 'seconds',
        bound: 'session_audio_duration',
      });
      expectError(await send(emu, path, { id, final: true }), 409, 'SESSION_EXPIRED');
      expectError(await send(emu, path, { id, start: true }), 409, 'SESSION_EXPIRED');
      assert.equal(emu.stats().sessions.retired, 1);
    });
  }

  test('session audio: a start frame already over the limit is 422 and leaves its id unused', async () => {
    const emu = await emulator({ limits: { sessionAudioDurationSec: 1 } });
    for (const path of [ASR, DIAR]) {
      const id = uuid();
      const over = expectError(
        await send(emu, path, { id, start: true, pcm: Buffer.alloc(32_002) }),
        422,
        'AUDIO_DURATION_EXCEEDED',
      );
      assert.equal((over.data as { bound: string }).bound, 'session_audio_duration');
      // Nothing was live, so nothing was retired: the id can still start a stream.
      assert.equal(
        (await send(emu, path, { id, start: true, final: true, pcm: Buffer.alloc(3200) })).status,
        200,
      );
    }
    assert.equal(emu.stats().sessions.retired, 0);
    assert.equal(emu.stats().sessions.finished, 2);
  });

  for (const [name, path] of ROUTES) {
    test(`${name}: byte rate, exactly the burst accepted; one sample more is 429 with Retry-After and the stream stays live`, async () => {
      // A sustained rate so low (3.2e-5 B/s) that nothing refills while the test runs: the
      // outcome does not depend on how fast the requests follow one another.
      const burst = 64_000;
      const emu = await emulator({
        limits: { sessionAudioRateBurstBytes: burst, sessionAudioRateRealtime: 1e-9 },
      });
      const id = uuid();
      assert.equal((await send(emu, path, { id, start: true, pcm: Buffer.alloc(burst - 2) })).status, 200);
      assert.equal((await send(emu, path, { id, pcm: Buffer.alloc(2) })).status, 200, 'exactly the burst');
      const fast = await send(emu, path, { id, pcm: Buffer.alloc(2) });
      const body = expectError(fast, 429, 'SESSION_BYTE_RATE_EXCEEDED');
      assert.ok(Number(fast.headers['retry-after']) >= 60_000, '2 bytes at 3.2e-5 B/s');
      assert.equal(body.retryable, true);
      assert.deepEqual(body.data, {
        limit: burst,
        observed: burst + 2,
        unit: 'bytes',
        bound: 'session_audio_rate_burst',
      });
      assert.equal(emu.stats().sessions.active, 1, 'still live');
      expectError(await send(emu, path, { id, start: true }), 409, 'SESSION_EXPIRED');
      assert.equal(emu.stats().framesAccepted, 2);
    });
  }

  test('session slots: 429 SESSION_SLOTS_EXHAUSTED until a stream ends', async () => {
    const emu = await emulator({ sessionSlots: 1 });
    const first = uuid();
    assert.equal((await send(emu, ASR, { id: first, start: true })).status, 200);
    const refused = await send(emu, DIAR, { id: uuid(), start: true });
    expectError(refused, 429, 'SESSION_SLOTS_EXHAUSTED');
    assert.ok(Number(refused.headers['retry-after']) >= 1);
    assert.equal((await send(emu, ASR, { id: first, final: true })).status, 200);
    assert.equal((await send(emu, DIAR, { id: uuid(), start: true })).status, 200);
  });

  test('expiry counts from the last released record too: a stream is kept alive by its responses', async () => {
    const emu = await emulator({
      latency: { perAudioSecondMs: 10_000 },
      limits: { sessionExpirySec: 0.5, nonFinalResponseWindowMs: 1 },
    });
    const quiet = uuid();
    const busy = uuid();
    // Both streams' audio is accepted now; `quiet`'s records are released at once, `busy`'s
    // 300 ms later (0.03 s of audio at 10 s per audio second), after its answer ended.
    assert.equal((await send(emu, ASR, { id: quiet, start: true, pcm: Buffer.alloc(2) })).status, 200);
    assert.equal((await send(emu, ASR, { id: busy, start: true, pcm: Buffer.alloc(960) })).status, 200);
    await until(() => emu.stats().sessions.expired === 1, 'the first expiry');
    expectError(await send(emu, ASR, { id: quiet }), 409, 'SESSION_EXPIRED');
    assert.equal(
      (await send(emu, ASR, { id: busy, pcm: Buffer.alloc(2) })).status,
      200,
      'the stream whose records came later is still live',
    );
    assert.equal(emu.stats().sessions.expired, 1);
  });

  test('expiry: no audio or response for the expiry window ends the stream; later frames get 409', async () => {
    const emu = await emulator({ limits: { sessionExpirySec: 0.05 } });
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true })).status, 200);
    await until(() => emu.stats().sessions.expired === 1, 'expiry');
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
    assert.equal(emu.stats().concurrent.realtime_asr, 0, 'the expired stream released its slot');
    assert.equal((await send(emu, ASR, { id, start: true })).status, 200, 'an expired id is not tombstoned');
  });

  test('idle retirement: a timer retires the stream; the next frame gets 408 SESSION_IDLE_TIMEOUT, later ones 409', async () => {
    const emu = await emulator({ limits: { sessionIdleSec: 0.03, sessionExpirySec: 60 } });
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true })).status, 200);
    await until(() => emu.stats().sessions.retired === 1, 'idle retirement without a frame');
    assert.equal(emu.stats().sessions.active, 0);
    assert.equal(emu.stats().concurrent.realtime_asr, 0, 'the retired stream released its slot');
    const idle = expectError(await send(emu, ASR, { id }), 408, 'SESSION_IDLE_TIMEOUT');
    const data = idle.data as { bound: string; unit: string; observed: number; limit: number };
    assert.equal(data.bound, 'session_idle');
    assert.equal(data.unit, 'seconds');
    assert.ok(data.observed > data.limit);
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
    expectError(await send(emu, ASR, { id, start: true }), 409, 'SESSION_EXPIRED');
    assert.equal(emu.stats().sessions.retired, 1);
    // The 408 goes to the next frame whatever its flags; the id stays tombstoned.
    const other = uuid();
    assert.equal((await send(emu, ASR, { id: other, start: true })).status, 200);
    await until(() => emu.stats().sessions.retired === 2, 'idle retirement');
    expectError(await send(emu, ASR, { id: other, start: true }), 408, 'SESSION_IDLE_TIMEOUT');
    expectError(await send(emu, ASR, { id: other, start: true }), 409, 'SESSION_EXPIRED');
  });

  test('expiry waits for a POST being answered, without spinning, and comes once it is answered', async (t) => {
    // Count the emulator's timers: a held POST must not make the expiry timer re-arm every ms.
    let timers = 0;
    const original = Lifecycle.prototype.timeout;
    Lifecycle.prototype.timeout = function (this: Lifecycle, ms: number, fn: () => void) {
      timers++;
      return original.call(this, ms, fn);
    };
    t.after(() => {
      Lifecycle.prototype.timeout = original;
    });
    // The expiry window is short against the response window, and long enough that the next
    // POST reaches the stream inside it on a loaded machine (10 ms was not, under CI's load).
    const emu = await emulator({
      latency: { perAudioSecondMs: 100_000 },
      limits: { sessionExpirySec: 0.1, nonFinalResponseWindowMs: 2000 },
    });
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true, pcm: Buffer.alloc(2) })).status, 200);
    // Its records take 10 s: the POST is held for the whole response window, 20 expiry windows.
    timers = 0;
    const held = await send(emu, ASR, { id, pcm: Buffer.alloc(3200) });
    assert.equal(held.status, 200, 'not expired while it was answered');
    assert.deepEqual(held.records, []);
    // Not a timer per millisecond, nor one per expiry window (3 here, 5 on a loaded machine).
    assert.ok(timers < 10, `${timers} timers while one POST was held`);
    await until(() => emu.stats().sessions.expired === 1, 'expiry after the answer');
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
  });

  test('the non-final response window: late records come with a later answer, nothing is lost', async () => {
    const strip = (rs: Record<string, unknown>[]) => rs.map(({ id: _id, ...rest }) => rest);
    const reference = await stream(await emulator(), ASR, uuid(), pcm, 16_000);
    const emu = await emulator({
      latency: { perAudioSecondMs: 100 },
      limits: { nonFinalResponseWindowMs: 1 },
    });
    const id = uuid();
    const answers: Record<string, unknown>[][] = [];
    for (let at = 0; at < pcm.length; at += 16_000) {
      const reply = await send(emu, ASR, {
        id,
        start: at === 0,
        final: at + 16_000 >= pcm.length,
        pcm: pcm.subarray(at, at + 16_000),
      });
      assert.equal(reply.status, 200);
      answers.push(reply.records);
    }
    assert.deepEqual(answers[0], [], 'the window closed before the first records were ready');
    assert.deepEqual(strip(answers.flat()), strip(reference));
    assert.equal(emu.stats().sessions.finished, 1);
  });

  test('an aborted POST cancels its stream', async () => {
    const emu = await emulator({
      latency: { perAudioSecondMs: 100_000 },
      limits: { nonFinalResponseWindowMs: 60_000 },
    });
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true, pcm: Buffer.alloc(2) })).status, 200);
    const controller = new AbortController();
    const pending = post(emu, ASR, frameOf({ id, pcm: Buffer.alloc(3200) }), controller.signal).catch(
      (e: Error) => e,
    );
    await until(() => emu.stats().framesAccepted === 2, 'the second frame accepted');
    controller.abort();
    assert.ok((await pending) instanceof Error);
    await until(() => emu.stats().sessions.cancelled === 1, 'cancellation');
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
  });

  for (const [name, path] of ROUTES) {
    test(`${name}: a POST aborted while its frame is still arriving cancels its stream`, async () => {
      const emu = await emulator();
      const id = uuid();
      assert.equal((await send(emu, path, { id, start: true })).status, 200);
      const body = frameOf({ id, pcm: Buffer.alloc(32_000) });
      let finishBody!: () => void;
      const rest = new Promise<void>((resolve) => {
        finishBody = resolve;
      });
      async function* stalledBody() {
        yield body.subarray(0, 100); // the stream id and a little PCM; the rest never comes
        await rest;
      }
      const controller = new AbortController();
      const received = emu.stats().bytesIn;
      const pending = post(emu, path, stalledBody(), controller.signal).catch((e: Error) => e);
      await until(() => emu.stats().bytesIn >= received + 100, 'the head of the frame read');
      controller.abort();
      assert.ok((await pending) instanceof Error);
      finishBody();
      await until(() => emu.stats().sessions.cancelled === 1, 'cancellation');
      assert.equal(emu.stats().sessions.active, 0);
      assert.equal(emu.stats().framesAccepted, 1, 'the cut frame was never accepted');
      expectError(await send(emu, path, { id, final: true }), 409, 'SESSION_EXPIRED');
    });
  }

  test('a final answer cut short (reset after N bytes) cancels its stream and releases its slot', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'stt.http', nth: 2, action: { type: 'reset', afterBytes: 5 } });
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true })).status, 200);
    await assert.rejects(send(emu, ASR, { id, final: true }));
    await until(() => emu.stats().sessions.cancelled === 1, 'cancellation');
    assert.equal(emu.stats().concurrent.realtime_asr, 0);
    assert.equal(emu.stats().sessions.active, 0);
  });

  test('a non-final answer cut short (reset after N bytes) cancels its stream at once', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'stt.http', nth: 1, action: { type: 'reset', afterBytes: 5 } });
    const id = uuid();
    await assert.rejects(send(emu, ASR, { id, start: true, pcm: pcm.subarray(0, 32_000) }));
    await until(() => emu.stats().sessions.cancelled === 1, 'cancellation');
    assert.equal(emu.stats().concurrent.realtime_asr, 0);
    assert.equal(emu.stats().sessions.active, 0);
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
  });

  test('a final answer that times out cancels the stream and ends without the final record', async () => {
    const emu = await emulator({
      latency: { perAudioSecondMs: 100_000 },
      limits: { sessionExpirySec: 0.05 },
    });
    const reply = await send(emu, ASR, { id: uuid(), start: true, final: true, pcm: Buffer.alloc(3200) });
    assert.equal(reply.status, 200);
    assert.equal(
      reply.records.some((r) => r.is_final),
      false,
    );
    assert.equal(emu.stats().sessions.cancelled, 1);
  });

  test('a registered transcript for a stream UUID', async () => {
    const emu = await emulator();
    const id = uuid();
    emu.registerTranscript(id, 'the quick brown fox jumps over the lazy dog');
    const records = await stream(emu, ASR, id, pcm);
    const committed = records.filter((r) => r.is_speech_final).map((r) => r.transcription);
    assert.equal(
      committed.join(' ').replace(/\s+/g, ' ').trim(),
      'the quick brown fox jumps over the lazy dog',
    );
  });
});

describe('frames after the final frame', () => {
  const slow = { latency: { perAudioSecondMs: 100_000 }, limits: { nonFinalResponseWindowMs: 20 } };

  test('HTTP: once the final frame is accepted, later frames are 409 SESSION_EXPIRED', async () => {
    const emu = await emulator(slow);
    const id = uuid();
    assert.equal((await send(emu, ASR, { id, start: true, pcm: Buffer.alloc(2) })).status, 200);
    // The final frame is accepted but its answer is an error, while its records are still due.
    emu.faults.add({
      operation: 'stt.http',
      times: 1,
      action: { type: 'status', status: 503, stage: 'afterEffect' },
    });
    assert.equal((await send(emu, ASR, { id, final: true, pcm: Buffer.alloc(3200) })).status, 503);
    expectError(await send(emu, ASR, { id }), 409, 'SESSION_EXPIRED');
    expectError(await send(emu, ASR, { id, final: true }), 409, 'SESSION_EXPIRED');
    expectError(await send(emu, ASR, { id, start: true }), 409, 'SESSION_EXPIRED');
    assert.equal(emu.stats().framesAccepted, 2);
  });

  test('Socket.IO: once the final frame is accepted, later frames are 409 SESSION_EXPIRED', async () => {
    const emu = await emulator(slow);
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const id = uuid();
      const code = async (f: FrameInput) => {
        const ack = (await socket.emitWithAck('audio_stream', frameOf(f))) as {
          ok: boolean;
          error?: { code: string };
        };
        return ack.ok ? 'ok' : ack.error!.code;
      };
      assert.equal(await code({ id, start: true, pcm: Buffer.alloc(2) }), 'ok');
      assert.equal(await code({ id, final: true, pcm: Buffer.alloc(3200) }), 'ok');
      assert.equal(await code({ id }), 'SESSION_EXPIRED', 'the final record is still due');
      assert.equal(await code({ id, final: true }), 'SESSION_EXPIRED');
      assert.equal(await code({ id, start: true }), 'SESSION_EXPIRED');
      assert.equal(emu.stats().framesAccepted, 2);
    } finally {
      socket.close();
    }
  });
});

describe('realtime diarization over HTTP', () => {
  test('closed segments once each, an active snapshot, the final record last', async () => {
    const emu = await emulator();
    const records = await stream(emu, DIAR, uuid(), pcm);
    for (const r of records) assert.ok(validateDiarizationRecord(r).ok, JSON.stringify(r));
    const finals = records.flatMap((r) => r.final_segments as { start_time: number; speaker: string }[]);
    assert.equal(finals.length, 2);
    assert.deepEqual(
      finals.map((s) => s.speaker),
      ['SPEAKER_00', 'SPEAKER_01'],
    );
    assert.ok(records.some((r) => (r.active_segments as unknown[]).length > 0));
    assert.equal(records.filter((r) => r.is_final).length, 1);
    assert.equal(records.at(-1)!.is_final, true);
  });

  test('a stream that never got a start frame is 400 VALIDATION_REQUIRED_FIELD; an ended one 409', async () => {
    const emu = await emulator();
    expectError(await send(emu, DIAR, { id: uuid() }), 400, 'VALIDATION_REQUIRED_FIELD');
    expectError(await send(emu, DIAR, { id: uuid(), final: true }), 400, 'VALIDATION_REQUIRED_FIELD');
    const id = uuid();
    assert.equal((await send(emu, DIAR, { id, start: true, final: true })).status, 200);
    expectError(await send(emu, DIAR, { id }), 409, 'SESSION_EXPIRED');
  });

  test('one POST in flight counts from the frame header: a POST whose body is still arriving holds the stream', async () => {
    const emu = await emulator();
    const id = uuid();
    assert.equal((await send(emu, DIAR, { id, start: true, pcm: Buffer.alloc(3200) })).status, 200);
    const body = frameOf({ id, pcm: Buffer.alloc(3200) });
    let finishBody!: () => void;
    const rest = new Promise<void>((resolve) => {
      finishBody = resolve;
    });
    async function* slowBody() {
      yield body.subarray(0, 100); // the header and a little PCM, then the rest later
      await rest;
      yield body.subarray(100);
    }
    const received = emu.stats().bytesIn;
    const first = post(emu, DIAR, slowBody());
    await until(() => emu.stats().bytesIn >= received + 100, 'the first POST header read');
    const second = await send(emu, DIAR, { id, pcm: Buffer.alloc(3200) });
    expectError(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal(second.headers['retry-after'], '1');
    finishBody();
    assert.equal((await first).status, 200, 'the first POST is answered');
    assert.equal(emu.stats().framesAccepted, 2);
    assert.equal((await send(emu, DIAR, { id, final: true })).status, 200, 'one at a time again');
  });

  test('one POST in flight per stream: a second concurrent POST is 429 and the stream goes on', async () => {
    const emu = await emulator({
      latency: { perAudioSecondMs: 100_000 },
      limits: { nonFinalResponseWindowMs: 60_000 },
    });
    const id = uuid();
    assert.equal((await send(emu, DIAR, { id, start: true, pcm: Buffer.alloc(2) })).status, 200);
    const controller = new AbortController();
    const pending = post(emu, DIAR, frameOf({ id, pcm: Buffer.alloc(3200) }), controller.signal).catch(
      (e: Error) => e,
    );
    await until(() => emu.stats().framesAccepted === 2, 'the first POST in flight');
    const second = await send(emu, DIAR, { id });
    const refused = expectError(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal(second.headers['retry-after'], '1');
    // Not the account's plan concurrency (bound account_concurrency_*): this stream's own POST.
    assert.deepEqual(refused.data, {
      limit: 1,
      observed: 2,
      unit: 'requests',
      bound: 'stream_requests_in_flight',
    });
    assert.equal(emu.stats().sessions.active, 1, 'the stream is still live');
    controller.abort();
    await pending;
  });
});

describe('realtime HTTP: admission and the remaining codes', () => {
  test('diarization concurrency: 429 CONCURRENCY_LIMIT_EXCEEDED with bound account_concurrency_diarization', async () => {
    const emu = await emulator({ limits: { accountConcurrency: { diarization: 1 } } });
    const first = uuid();
    assert.equal((await send(emu, DIAR, { id: first, start: true })).status, 200);
    const second = await send(emu, DIAR, { id: uuid(), start: true });
    const body = expectError(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal(second.headers['retry-after'], '1');
    assert.deepEqual(body.data, {
      limit: 1,
      observed: 2,
      unit: 'operations',
      bound: 'account_concurrency_diarization',
    });
    assert.equal((await send(emu, ASR, { id: uuid(), start: true })).status, 200, 'ASR is counted apart');
    assert.equal((await send(emu, DIAR, { id: first, final: true })).status, 200);
    assert.equal((await send(emu, DIAR, { id: uuid(), start: true })).status, 200, 'the slot came back');
  });

  test('idle retirement on the diarization route: 408 SESSION_IDLE_TIMEOUT, then 409', async () => {
    const emu = await emulator({ limits: { sessionIdleSec: 0.03, sessionExpirySec: 60 } });
    const id = uuid();
    assert.equal((await send(emu, DIAR, { id, start: true })).status, 200);
    await until(() => emu.stats().sessions.retired === 1, 'idle retirement');
    const idle = expectError(await send(emu, DIAR, { id }), 408, 'SESSION_IDLE_TIMEOUT');
    assert.equal((idle.data as { bound: string }).bound, 'session_idle');
    expectError(await send(emu, DIAR, { id }), 409, 'SESSION_EXPIRED');
  });

  test('per-key request rate over HTTP: 429 RATE_LIMIT_EXCEEDED on both framed routes, with Retry-After', async () => {
    const keys = ['rate-asr', 'rate-diarization'].map((key) => ({
      key,
      account: key,
      tier: 'standard' as const,
      capabilities: ['realtime_asr' as const, 'diarization' as const],
    }));
    const emu = await emulator({ keys, rateLimit: { requestsPerSecond: 0.001, burst: 1 } });
    for (const [i, path] of [ASR, DIAR].entries()) {
      const key = keys[i]!.key;
      const frame = (f: FrameInput) => call(`${emu.url}${path}`, { key, body: frameOf(f), dispatcher });
      const id = uuid();
      assert.equal((await frame({ id, start: true })).status, 200);
      const limited = await frame({ id });
      const body = expectError(limited, 429, 'RATE_LIMIT_EXCEEDED');
      assert.ok(Number(limited.headers['retry-after']) >= 1);
      assert.equal(body.retryable, true);
      assert.equal(typeof body.request_id, 'string', 'the usual error body, not the batch 429');
      assert.equal(body.data, undefined);
    }
    assert.equal(emu.stats().framesAccepted, 2);
    assert.equal(emu.stats().sessions.active, 2, 'the streams stay live');
  });

  test('a frame built byte by byte (not with the protocol encoder) is a whole stream', async () => {
    const emu = await emulator();
    const id = uuid();
    const audio = pcm.subarray(0, 32_000 * 2);
    const handFrame = (flags: number, language: number, samples: Buffer) =>
      Buffer.concat([
        Buffer.from(id.replaceAll('-', ''), 'hex'), // bytes 0..15: the stream UUID, raw
        Buffer.from([flags, language]), // byte 16: bit 0 is_start, bit 1 is_final; byte 17: language
        samples, // PCM16LE 16 kHz mono
      ]);
    // Languages 0 (ar), 1 (en), 2 (codeswitch) and 255 (auto); 3 is not one.
    for (const language of [0, 1, 2, 255]) {
      const one = await post(emu, ASR, handFrame(0b11, language, audio));
      assert.equal(one.status, 200, one.text);
      assert.equal(one.records.at(-1)!.is_final, true);
      assert.ok(one.records.every((r) => r.id === id));
    }
    expectError(await post(emu, ASR, handFrame(0b01, 3, audio)), 400, 'VALIDATION_INVALID_LANGUAGE');
    const start = await post(emu, DIAR, handFrame(0b01, 255, audio.subarray(0, 32_000)));
    assert.equal(start.status, 200, start.text);
    const end = await post(emu, DIAR, handFrame(0b10, 255, audio.subarray(32_000)));
    assert.equal(end.records.at(-1)!.is_final, true);
    assert.equal(emu.stats().sessions.finished, 5);
  });
});

describe('live streams over Socket.IO', () => {
  test('audio_stream: acknowledged frames, transcription_result records, one final', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const id = uuid();
      const { events: records, done } = collectUntilFinal<Record<string, unknown>>(
        socket,
        'transcription_result',
      );
      for (let at = 0; at < pcm.length; at += 6400) {
        const frame = encodeFrame({
          streamId: id,
          isStart: at === 0,
          isFinal: at + 6400 >= pcm.length,
          language: 'en',
          pcm: pcm.subarray(at, at + 6400),
        });
        assert.deepEqual(await socket.emitWithAck('audio_stream', frame), { ok: true });
      }
      await done;
      for (const r of records) assert.ok(validateAsrRecord(r).ok);
      assert.ok(records.every((r) => r.id === id));
      assert.equal(records.filter((r) => r.is_final).length, 1);
      assert.equal(emu.stats().requests['stt.socket'], Math.ceil(pcm.length / 6400));
      await until(() => emu.stats().sessions.finished === 1, 'finished');
    } finally {
      socket.close();
    }
  });

  test('rejections: a negative acknowledgement, or an error event with the id', async () => {
    const emu = await emulator({ limits: { realtimeAsrFrameBytes: 1000 } });
    const socket = await connectSocket(emu.url, emu.apiKey, { path: '/realtime/socket.io' });
    try {
      const id = uuid();
      const never = (await socket.emitWithAck('audio_stream', frameOf({ id }))) as {
        ok: false;
        error: Record<string, unknown>;
      };
      assert.equal(never.ok, false);
      assert.equal(never.error.code, 'SESSION_EXPIRED');
      assert.equal(never.error.id, id);
      const event = new Promise<Record<string, unknown>>((resolve) => socket.once('error', resolve));
      socket.emit('diarization_stream', frameOf({ id }));
      const diarization = await event;
      assert.equal(diarization.code, 'VALIDATION_REQUIRED_FIELD');
      assert.equal(diarization.id, id);
      const text = (await socket.emitWithAck('audio_stream', 'not binary')) as {
        error: Record<string, unknown>;
      };
      assert.equal(text.error.code, 'VALIDATION_INVALID_FORMAT');
      const big = (await socket.emitWithAck(
        'audio_stream',
        frameOf({ id, start: true, pcm: Buffer.alloc(2000) }),
      )) as {
        error: Record<string, unknown>;
      };
      assert.equal(big.error.code, 'PAYLOAD_TOO_LARGE');
      assert.deepEqual(big.error.data, {
        limit: 1000,
        observed: 2018,
        unit: 'bytes',
        bound: 'realtime_asr_frame_bytes',
      });
      const odd = (await socket.emitWithAck(
        'audio_stream',
        frameOf({ id, start: true }).subarray(0, 21),
      )) as {
        error: Record<string, unknown>;
      };
      assert.equal(odd.error.code, 'VALIDATION_INVALID_FORMAT');
    } finally {
      socket.close();
    }
  });

  test('diarization_stream records, and a disconnect cancels live streams', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    const id = uuid();
    const records: Record<string, unknown>[] = [];
    socket.on('diarization_result', (r: Record<string, unknown>) => records.push(r));
    assert.deepEqual(
      await socket.emitWithAck(
        'diarization_stream',
        frameOf({ id, start: true, pcm: pcm.subarray(0, 32_000) }),
      ),
      { ok: true },
    );
    await until(() => records.length > 0, 'a diarization record');
    for (const r of records) assert.ok(validateDiarizationRecord(r).ok);
    socket.close();
    await until(() => emu.stats().sessions.cancelled === 1, 'cancellation on disconnect');
    assert.equal(emu.stats().sessions.active, 0);
  });
});

describe('the session state machine (ServerSessions)', () => {
  const SOCKET: SessionScope = sessionScope('socket', 'unit');
  const decoded = (f: FrameInput) => decodeFrame(frameOf(f));
  /** Admission without a request rate (what the transports pass when none is configured). */
  const admit: Admit = (acquire) => (acquire ? acquire() : () => {});
  const rejected = (code: string) => (err: unknown) => {
    assert.ok(err instanceof Rejection, String(err));
    assert.equal(err.code, code);
    return true;
  };

  test('session audio is counted in whole bytes: exactly 14400 s in 0.1 s frames is accepted', (t) => {
    const ctx = new EmulatorContext({ limits: { sessionAudioRateBurstBytes: 2 ** 40 } });
    const sessions = new ServerSessions(ctx);
    t.after(() => {
      sessions.closeAll();
      ctx.lifecycle.close();
    });
    const key = ctx.keys.first;
    const id = uuid();
    const tenth = Buffer.alloc(3200); // 0.1 s, not exact in binary floating point
    sessions.accept(decoded({ id, start: true, pcm: tenth }), 'stt', SOCKET, key, admit);
    const next = decoded({ id, pcm: tenth });
    for (let i = 1; i < 144_000; i++) sessions.accept(next, 'stt', SOCKET, key, admit);
    assert.equal(ctx.stats.framesAccepted, 144_000, 'exactly 14400 s were accepted');
    assert.throws(
      () => sessions.accept(decoded({ id, pcm: Buffer.alloc(2) }), 'stt', SOCKET, key, admit),
      (err: unknown) => {
        rejected('AUDIO_DURATION_EXCEEDED')(err);
        assert.deepEqual((err as Rejection).init.data, {
          limit: 14_400,
          observed: 14_401,
          unit: 'seconds',
          bound: 'session_audio_duration',
        });
        return true;
      },
    );
    assert.equal(ctx.stats.sessions.retired, 1);
  });

  test('a retired id stays tombstoned however many streams end after it', (t) => {
    const ctx = new EmulatorContext({ limits: { sessionAudioDurationSec: 0.001 } }); // 32 bytes
    const sessions = new ServerSessions(ctx);
    t.after(() => {
      sessions.closeAll();
      ctx.lifecycle.close();
    });
    const key = ctx.keys.first;
    // Socket scope: the same tombstones as HTTP, without a slot and an expiry timer per stream.
    const retire = (id: string) => {
      sessions.accept(decoded({ id, start: true, pcm: Buffer.alloc(2) }), 'stt', SOCKET, key, admit);
      assert.throws(
        () => sessions.accept(decoded({ id, pcm: Buffer.alloc(40) }), 'stt', SOCKET, key, admit),
        rejected('AUDIO_DURATION_EXCEEDED'),
      );
    };
    const first = uuid();
    retire(first);
    // More ended ids than the 100000 remembered per scope: the tombstone is kept apart.
    for (let i = 0; i < 100_001; i++) {
      const id = uuid();
      const whole = decoded({ id, start: true, final: true, pcm: Buffer.alloc(2) });
      sessions.end(sessions.accept(whole, 'stt', SOCKET, key, admit), 'finished');
    }
    assert.throws(
      () =>
        sessions.accept(decoded({ id: first, start: true, pcm: Buffer.alloc(2) }), 'stt', SOCKET, key, admit),
      rejected('SESSION_EXPIRED'),
    );
    assert.equal(ctx.stats.sessions.retired, 1);
    assert.equal(ctx.stats.sessions.finished, 100_001);
  });

  test('byte rate: exactly 4x real time is sustained after the burst; one sample more is refused', (t) => {
    // The bucket reads performance.now(): a mocked clock makes the rate exact without timing.
    let clock = 1000;
    t.mock.method(performance, 'now', () => clock);
    const burst = 64_000;
    const ctx = new EmulatorContext({ limits: { sessionAudioRateBurstBytes: burst } });
    const sessions = new ServerSessions(ctx);
    t.after(() => {
      sessions.closeAll();
      ctx.lifecycle.close();
    });
    const key = ctx.keys.first;
    const id = uuid();
    assert.equal(ctx.limits.sessionAudioRateRealtime, 4, 'the interface default');
    sessions.accept(decoded({ id, start: true, pcm: Buffer.alloc(burst) }), 'stt', SOCKET, key, admit);
    const next = (bytes: number) =>
      sessions.accept(decoded({ id, pcm: Buffer.alloc(bytes) }), 'stt', SOCKET, key, admit);
    assert.throws(() => next(2), rejected('SESSION_BYTE_RATE_EXCEEDED'), 'the burst is spent');
    // Every 250 ms, 1 s of audio (4 x 0.25 s): exactly the sustained rate, for 20 s.
    for (let i = 0; i < 80; i++) {
      clock += 250;
      next(32_000);
    }
    assert.throws(() => next(2), rejected('SESSION_BYTE_RATE_EXCEEDED'));
    clock += 250;
    assert.throws(
      () => next(32_002),
      (err: unknown) => {
        rejected('SESSION_BYTE_RATE_EXCEEDED')(err);
        assert.deepEqual((err as Rejection).init.data, {
          limit: burst,
          observed: burst + 2,
          unit: 'bytes',
          bound: 'session_audio_rate_burst',
        });
        return true;
      },
    );
    next(32_000);
    assert.equal(ctx.stats.framesAccepted, 82);
    assert.equal(ctx.stats.sessions.active, 1);
  });
});

test('a pipelined frame whose client went away while it waited behind another answer opens nothing that stays', async () => {
  // Answers held 300 ms: the second request's answer waits in Node's queue behind the first.
  const emu = await emulator({ latency: { perRequestMs: 300 } });
  const { connect } = await import('node:net');
  const { port } = new URL(emu.url);
  const socket = connect(Number(port), '127.0.0.1');
  socket.on('error', () => {});
  socket.resume();
  const request = (f: FrameInput) => {
    const body = frameOf(f);
    return Buffer.concat([
      Buffer.from(
        `POST ${ASR} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/octet-stream\r\ncontent-length: ${body.length}\r\n\r\n`,
      ),
      body,
    ]);
  };
  // Two streams started in one write (HTTP/1.1 pipelining), then the client leaves.
  socket.write(Buffer.concat([request({ id: uuid(), start: true }), request({ id: uuid(), start: true })]));
  await until(() => emu.stats().concurrent.realtime_asr === 2, 'both streams started');
  socket.destroy();
  // Both POSTs were aborted, so both streams are cancelled at once, not held until their
  // expiry (60 s): the queued answer's response never closes, its request does.
  await until(() => emu.stats().concurrent.realtime_asr === 0, 'both streams cancelled');
});
