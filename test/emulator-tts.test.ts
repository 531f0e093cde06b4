// TTS against the emulator: the frame stream of POST /http/tts (16 kHz, frames of varying
// size, a final frame always last), validation in the interface's order, voices and hidden
// variants, content policy, admission, the synthesis deadline, cancellation on abort, the
// failure codes, and Socket.IO TTS at 24 kHz with the voice listing.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { findEspeak } from '../src/emulator/engine/tts.ts';
import { type Emulator, type EmulatorKey, physicalVariantIds } from '../src/emulator/index.ts';
import { IncompleteStreamError } from '../src/protocol/errors.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { TtsDemuxer } from '../src/protocol/tts-frames.ts';
import {
  call,
  collectUntilFinal,
  connectSocket,
  emulatorsForFile,
  expectError,
  until,
  uuid,
} from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({ tts: { engine: 'synthetic' } });

const tts = (emu: Emulator, body: unknown, options: { key?: string; signal?: AbortSignal } = {}) =>
  call(`${emu.url}/http/tts`, {
    key: options.key ?? emu.apiKey,
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    dispatcher,
    signal: options.signal,
  });

/** Split a TTS body into its frames (the request UUID marks each header). */
function frames(body: Buffer, id: string): { final: boolean; pcm: number }[] {
  const head = Buffer.from(id.replaceAll('-', ''), 'hex');
  const out: { final: boolean; pcm: number }[] = [];
  let at = body.indexOf(head);
  assert.equal(at, 0, 'the body starts with a frame header');
  while (at >= 0) {
    const next = body.indexOf(head, at + 17);
    out.push({ final: body[at + 16] === 1, pcm: (next < 0 ? body.length : next) - at - 17 });
    at = next;
  }
  return out;
}

function demux(body: Buffer, id: string): Buffer {
  const demuxer = new TtsDemuxer(id);
  const pcm = demuxer.push(body).map((c) => c.pcm);
  const end = demuxer.end();
  return Buffer.concat([...pcm, ...end.map((c) => c.pcm)]);
}

describe('TTS over HTTP', () => {
  test('a frame stream at 16 kHz: frames of varying size, one final frame, last', async () => {
    const emu = await emulator();
    for (const text of ['Hello there, how are you today?', 'Hello there, how are you today']) {
      const id = uuid();
      const reply = await tts(emu, { id, text, model: 'nebula' });
      assert.equal(reply.status, 200, reply.text);
      assert.equal(reply.headers['content-type'], 'application/octet-stream');
      const list = frames(reply.body, id);
      assert.ok(list.length > 3);
      assert.equal(list.filter((f) => f.final).length, 1);
      assert.equal(list.at(-1)!.final, true);
      assert.ok(new Set(list.slice(0, -1).map((f) => f.pcm)).size > 1, 'frames vary in size');
      const pcm = demux(reply.body, id);
      assert.ok(pcm.length / 32_000 > 1, 'a second or more of speech');
      // One of the two texts ends with PCM in its final frame, the other with an empty one.
      assert.equal(list.at(-1)!.pcm === 0, [...text].length % 2 === 1);
    }
    assert.equal(emu.stats().ttsSyntheses, 2);
  });

  test('one body parsed by hand: [16-byte request UUID][final flag byte][PCM16LE], the final frame last', async () => {
    const emu = await emulator();
    const id = uuid();
    const text = 'Hello there, how are you today';
    const reply = await tts(emu, { id, text });
    assert.equal(reply.status, 200, reply.text);
    const head = Buffer.from(id.replaceAll('-', ''), 'hex');
    assert.equal(head.length, 16);
    // No length field: a frame runs to the next request UUID, the last to the end of the body.
    const parsed: { flag: number; pcm: Buffer }[] = [];
    let at = 0;
    while (at < reply.body.length) {
      assert.ok(reply.body.subarray(at, at + 16).equals(head), `a frame header at byte ${at}`);
      const next = reply.body.indexOf(head, at + 17);
      const end = next < 0 ? reply.body.length : next;
      parsed.push({ flag: reply.body[at + 16]!, pcm: reply.body.subarray(at + 17, end) });
      at = end;
    }
    assert.ok(parsed.length > 3);
    assert.deepEqual(
      parsed.map((f) => f.flag),
      [...parsed.slice(0, -1).map(() => 0), 1],
      'flag 0 on every frame but the last, which is 1',
    );
    assert.ok(
      parsed.every((f) => f.pcm.length % 2 === 0),
      'whole PCM16 samples',
    );
    assert.ok(parsed.slice(0, -1).every((f) => f.pcm.length > 0));
    const pcm = Buffer.concat(parsed.map((f) => f.pcm));
    // 16 kHz mono PCM16: over a second of audible signal for this text.
    assert.ok(pcm.length / 32_000 > 1);
    let peak = 0;
    for (let i = 0; i < pcm.length; i += 2) peak = Math.max(peak, Math.abs(pcm.readInt16LE(i)));
    assert.ok(peak > 1000, 'audible');
    assert.ok(pcm.equals(demux(reply.body, id)), 'the protocol demuxer agrees');
  });

  test('duration grows with the text', async () => {
    const emu = await emulator();
    const seconds = async (text: string) => {
      const id = uuid();
      return demux((await tts(emu, { id, text })).body, id).length / 32_000;
    };
    const short = await seconds('Good morning.');
    const long = await seconds('Good morning. The weather today is sunny with a light breeze from the west.');
    assert.ok(long > short * 2, `${long} s vs ${short} s`);
  });

  test('espeak-ng speech in English and Arabic when it is on the PATH', async (t) => {
    if (!findEspeak()) {
      t.skip('espeak-ng is not on the PATH');
      return;
    }
    const emu = await emulator({ tts: { engine: 'espeak' } });
    for (const text of ['The quick brown fox.', 'مرحبا بكم في الخدمة']) {
      const id = uuid();
      const reply = await tts(emu, { id, text, voice_id: emu.voices[2]!.id });
      assert.equal(reply.status, 200, reply.text);
      const pcm = demux(reply.body, id);
      assert.ok(pcm.length / 32_000 > 0.5);
      const samples = new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2);
      assert.ok(
        samples.some((s) => Math.abs(s) > 1000),
        'audible',
      );
    }
  });

  test('body rules, in order, with the service codes', async () => {
    const emu = await emulator({ limits: { ttsRequestBytes: 2000 } });
    const id = uuid();
    expectError(await tts(emu, '{not json'), 400, 'VALIDATION_INVALID_FORMAT');
    expectError(await tts(emu, { id: 'nope', text: 'hi' }), 400, 'VALIDATION_INVALID_FORMAT');
    expectError(await tts(emu, { id, text: '   ' }), 400, 'VALIDATION_REQUIRED_FIELD');
    expectError(
      await tts(emu, { id, text: 'hi', voice_id: uuid(), voice_references: [] }),
      400,
      'VALIDATION_INVALID_PARAM',
    );
    expectError(await tts(emu, { id, text: 'hi', voice_references: [] }), 400, 'VALIDATION_INVALID_PARAM');
    expectError(await tts(emu, { id, text: 'hi', voice_id: 'voice-1' }), 400, 'VALIDATION_INVALID_UUID');
    const big = expectError(await tts(emu, { id, text: 'x'.repeat(2001) }), 413, 'PAYLOAD_TOO_LARGE');
    assert.equal(big.data, undefined, 'the body limit carries no data');
    assert.equal(emu.stats().ttsSyntheses, 0);
  });

  test('a body breaking two rules gets the code of the earlier rule', async () => {
    const emu = await emulator({ limits: { ttsInputCharacters: { standard: 20 } } });
    const id = uuid();
    const wav = encodeWav(Buffer.alloc(3200), 16_000).toString('base64');
    const long = 'x'.repeat(21);
    const cases: [string, Record<string, unknown>, number, string][] = [
      ['id before text', { id: 'nope', text: '   ' }, 400, 'VALIDATION_INVALID_FORMAT'],
      [
        'text before selectors',
        { id, text: ' ', voice_id: uuid(), voice_references: [] },
        400,
        'VALIDATION_REQUIRED_FIELD',
      ],
      [
        'selectors before the voice_id format',
        { id, text: 'hi', voice_id: 'voice-1', voice_references: [{ audio: wav, text: 't' }] },
        400,
        'VALIDATION_INVALID_PARAM',
      ],
      [
        'reference count before reference audio',
        {
          id,
          text: 'hi',
          voice_references: [
            { audio: 'bad', text: '' },
            { audio: 'bad', text: '' },
          ],
        },
        422,
        'VOICE_REFERENCE_COUNT_EXCEEDED',
      ],
      [
        'reference audio before its transcript',
        { id, text: 'hi', voice_references: [{ audio: 'bm90IGEgd2F2', text: ' ' }] },
        400,
        'VALIDATION_INVALID_FORMAT',
      ],
      [
        'voice_id format before the text limit',
        { id, text: long, voice_id: 'voice-1' },
        400,
        'VALIDATION_INVALID_UUID',
      ],
      [
        'text limit before the voice lookup',
        { id, text: long, voice_id: uuid() },
        422,
        'CHARACTER_COUNT_EXCEEDED',
      ],
      [
        'voice lookup before the content policy',
        { id, text: 'emulator-blocked', voice_id: uuid() },
        400,
        'TTS_VOICE_NOT_FOUND',
      ],
      [
        'content policy before the model',
        { id, text: 'emulator-blocked', model: 'other' },
        400,
        'TTS_INPUT_NOT_ALLOWED',
      ],
    ];
    for (const [order, body, status, code] of cases) {
      const reply = await tts(emu, body);
      assert.equal(`${reply.status} ${(reply.json() as { code: string }).code}`, `${status} ${code}`, order);
    }
    assert.equal(emu.stats().ttsSyntheses, 0);
  });

  test("voice references: checked in the interface's order, accepted when valid", async () => {
    const emu = await emulator({
      limits: { ttsVoiceReferenceBytes: 40_000, ttsVoiceReferenceDurationSec: 1 },
    });
    const wavB64 = (seconds: number) =>
      encodeWav(Buffer.alloc(Math.round(seconds * 16_000) * 2), 16_000).toString('base64');
    const ref = (audio: string, text = 'the reference transcript') => ({ audio, text });
    assert.equal(
      (await tts(emu, { id: uuid(), text: 'hi', voice_references: [ref(wavB64(0.5))] })).status,
      200,
    );
    const count = expectError(
      await tts(emu, { id: uuid(), text: 'hi', voice_references: [ref(wavB64(0.5)), ref(wavB64(0.5))] }),
      422,
      'VOICE_REFERENCE_COUNT_EXCEEDED',
    );
    assert.equal((count.data as { bound: string }).bound, 'tts_voice_reference_count');
    const size = expectError(
      await tts(emu, { id: uuid(), text: 'hi', voice_references: [ref(wavB64(1.5))] }),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    assert.equal((size.data as { bound: string }).bound, 'tts_voice_reference_bytes');
    const long = expectError(
      await tts(emu, { id: uuid(), text: 'hi', voice_references: [ref(wavB64(1.2))] }),
      422,
      'AUDIO_DURATION_EXCEEDED',
    );
    assert.deepEqual(long.data, {
      limit: 1,
      observed: 2,
      unit: 'seconds',
      bound: 'tts_voice_reference_duration',
    });
    expectError(
      await tts(emu, {
        id: uuid(),
        text: 'hi',
        voice_references: [ref(Buffer.from('not a wav').toString('base64'))],
      }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
    expectError(
      await tts(emu, { id: uuid(), text: 'hi', voice_references: [ref(wavB64(0.5), '  ')] }),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
    assert.equal(emu.stats().ttsSyntheses, 1);
  });

  test('voice references: decoded size and duration exactly at the limit accepted, one byte or sample more refused', async () => {
    const second = encodeWav(Buffer.alloc(32_000), 16_000); // exactly 1 s
    const emu = await emulator({
      limits: { ttsVoiceReferenceBytes: second.length, ttsVoiceReferenceDurationSec: 1 },
    });
    const request = (audio: Buffer) =>
      tts(emu, {
        id: uuid(),
        text: 'hi',
        voice_references: [{ audio: audio.toString('base64'), text: 'the reference transcript' }],
      });
    assert.equal((await request(second)).status, 200, 'exactly the size and the duration');
    // One byte more is refused from the base64 length alone, before the audio is read.
    const bigger = expectError(
      await request(Buffer.concat([second, Buffer.alloc(1)])),
      413,
      'PAYLOAD_TOO_LARGE',
    );
    assert.deepEqual(bigger.data, {
      limit: second.length,
      observed: second.length + 1,
      unit: 'bytes',
      bound: 'tts_voice_reference_bytes',
    });
    const roomy = await emulator({ limits: { ttsVoiceReferenceDurationSec: 1 } });
    const longer = expectError(
      await tts(roomy, {
        id: uuid(),
        text: 'hi',
        voice_references: [
          { audio: encodeWav(Buffer.alloc(32_002), 16_000).toString('base64'), text: 'the transcript' },
        ],
      }),
      422,
      'AUDIO_DURATION_EXCEEDED',
    );
    assert.deepEqual(longer.data, {
      limit: 1,
      observed: 2,
      unit: 'seconds',
      bound: 'tts_voice_reference_duration',
    });
    assert.equal(emu.stats().ttsSyntheses + roomy.stats().ttsSyntheses, 1);
  });

  test('text limit of the enterprise tier: 1000 code points accepted, 1001 refused', async () => {
    const enterprise: EmulatorKey = { key: 'ent', account: 'e', tier: 'enterprise', capabilities: ['tts'] };
    const emu = await emulator({ keys: [enterprise] });
    const text = (n: number) => `${'ab '.repeat(Math.ceil(n / 3)).slice(0, n - 1)}z`;
    assert.equal((await tts(emu, { id: uuid(), text: text(1000) }, { key: 'ent' })).status, 200);
    const over = expectError(
      await tts(emu, { id: uuid(), text: text(1001) }, { key: 'ent' }),
      422,
      'CHARACTER_COUNT_EXCEEDED',
    );
    assert.deepEqual(over.data, {
      limit: 1000,
      observed: 1001,
      unit: 'characters',
      bound: 'tts_input_characters',
    });
  });

  test('env: the TTS_MAX_INPUT_CHARACTERS_* deployment settings; limits win over them; none by default', async () => {
    const keys: EmulatorKey[] = (['free', 'standard', 'enterprise'] as const).map((tier) => ({
      key: tier,
      account: tier,
      tier,
      capabilities: ['tts'],
    }));
    const emu = await emulator({
      keys,
      env: {
        TTS_MAX_INPUT_CHARACTERS_FREE: '5',
        TTS_MAX_INPUT_CHARACTERS_STANDARD: '7',
        TTS_MAX_INPUT_CHARACTERS_ENTERPRISE: '9',
      },
      limits: { ttsInputCharacters: { enterprise: 8 } },
    });
    for (const [key, limit] of [
      ['free', 5],
      ['standard', 7],
      ['enterprise', 8],
    ] as const) {
      assert.equal((await tts(emu, { id: uuid(), text: 'a'.repeat(limit) }, { key })).status, 200, key);
      const over = expectError(
        await tts(emu, { id: uuid(), text: 'a'.repeat(limit + 1) }, { key }),
        422,
        'CHARACTER_COUNT_EXCEEDED',
      );
      assert.equal((over.data as { limit: number }).limit, limit, key);
    }
    // Without `env` the process environment is not read, whatever it holds.
    const saved = process.env.TTS_MAX_INPUT_CHARACTERS_FREE;
    process.env.TTS_MAX_INPUT_CHARACTERS_FREE = '3';
    try {
      const plain = await emulator({ keys });
      assert.equal((await tts(plain, { id: uuid(), text: 'a'.repeat(500) }, { key: 'free' })).status, 200);
    } finally {
      if (saved === undefined) delete process.env.TTS_MAX_INPUT_CHARACTERS_FREE;
      else process.env.TTS_MAX_INPUT_CHARACTERS_FREE = saved;
    }
    await assert.rejects(
      emulator({ env: { TTS_MAX_INPUT_CHARACTERS_FREE: 'many' } }),
      /TTS_MAX_INPUT_CHARACTERS_FREE must be a positive integer/,
    );
  });

  test('text limit by tier: at the limit accepted, one more 422 CHARACTER_COUNT_EXCEEDED', async () => {
    const free: EmulatorKey = { key: 'free', account: 'a', tier: 'free', capabilities: ['tts'] };
    const standard: EmulatorKey = { key: 'std', account: 'b', tier: 'standard', capabilities: ['tts'] };
    const emu = await emulator({
      keys: [free, standard],
      limits: { ttsInputCharacters: { free: 10, standard: 20 } },
    });
    assert.equal((await tts(emu, { id: uuid(), text: 'a'.repeat(10) }, { key: 'free' })).status, 200);
    const requestId = uuid();
    const over = expectError(
      await tts(emu, { id: requestId, text: 'a'.repeat(11) }, { key: 'free' }),
      422,
      'CHARACTER_COUNT_EXCEEDED',
    );
    assert.equal(over.job_id, requestId, 'the client-supplied id');
    assert.deepEqual(over.data, {
      limit: 10,
      observed: 11,
      unit: 'characters',
      bound: 'tts_input_characters',
    });
    assert.equal((await tts(emu, { id: uuid(), text: 'ab'.repeat(10) }, { key: 'std' })).status, 200);
    expectError(
      await tts(emu, { id: uuid(), text: 'a'.repeat(21) }, { key: 'std' }),
      422,
      'CHARACTER_COUNT_EXCEEDED',
    );
  });

  test('voices: the seven profiles work; hidden physical variants and unknown UUIDs are TTS_VOICE_NOT_FOUND', async () => {
    const emu = await emulator();
    assert.equal(emu.voices.length, 7);
    for (const voice of emu.voices)
      assert.equal((await tts(emu, { id: uuid(), text: 'hi', voice_id: voice.id })).status, 200);
    const variants = physicalVariantIds();
    assert.equal(variants.length, 14);
    for (const variant of variants.slice(0, 3)) {
      expectError(await tts(emu, { id: uuid(), text: 'hi', voice_id: variant }), 400, 'TTS_VOICE_NOT_FOUND');
    }
    expectError(await tts(emu, { id: uuid(), text: 'hi', voice_id: uuid() }), 400, 'TTS_VOICE_NOT_FOUND');
  });

  test('content policy and model', async () => {
    const emu = await emulator();
    expectError(
      await tts(emu, { id: uuid(), text: 'say emulator-blocked please' }),
      400,
      'TTS_INPUT_NOT_ALLOWED',
    );
    expectError(await tts(emu, { id: uuid(), text: 'hi', model: 'other' }), 400, 'VALIDATION_INVALID_PARAM');
    const custom = await emulator({ contentPolicy: (text) => !text.includes('banana') });
    expectError(await tts(custom, { id: uuid(), text: 'banana' }), 400, 'TTS_INPUT_NOT_ALLOWED');
    assert.equal((await tts(custom, { id: uuid(), text: 'emulator-blocked is fine here' })).status, 200);
    assert.equal(custom.stats().ttsSyntheses, 1);
  });

  test('admission: 429 CONCURRENCY_LIMIT_EXCEEDED with Retry-After and bound account_concurrency_tts', async () => {
    const emu = await emulator({
      limits: { accountConcurrency: { tts: 1 } },
      latency: { perRequestMs: 60_000 },
    });
    const controller = new AbortController();
    const pending = tts(emu, { id: uuid(), text: 'first' }, { signal: controller.signal }).catch(
      (e: Error) => e,
    );
    await until(() => emu.stats().concurrent.tts === 1, 'the first synthesis admitted');
    const second = await tts(emu, { id: uuid(), text: 'second' });
    const body = expectError(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal(second.headers['retry-after'], '1');
    assert.deepEqual(body.data, {
      limit: 1,
      observed: 2,
      unit: 'operations',
      bound: 'account_concurrency_tts',
    });
    assert.equal(body.retryable, true);
    assert.equal(emu.stats().ttsSyntheses, 1, 'the rejection consumed nothing');
    controller.abort();
    await pending;
    await until(() => emu.stats().concurrent.tts === 0, 'the aborted synthesis released its slot');
  });

  test('the synthesis deadline: no output within it is TTS_DEADLINE_EXCEEDED (504, retryable)', async () => {
    const emu = await emulator({ latency: { perRequestMs: 5_000 }, limits: { ttsSynthesisDeadlineMs: 20 } });
    const body = expectError(await tts(emu, { id: uuid(), text: 'hello' }), 504, 'TTS_DEADLINE_EXCEEDED');
    assert.equal(body.retryable, true);
    assert.equal(emu.stats().concurrent.tts, 0);
  });

  test('aborting the request stops its synthesis (espeak-ng is killed)', async (t) => {
    if (!findEspeak()) {
      t.skip('espeak-ng is not on the PATH');
      return;
    }
    const processes = () => process.getActiveResourcesInfo().filter((r) => r === 'ProcessWrap').length;
    const emu = await emulator({
      tts: { engine: 'espeak' },
      faults: [{ operation: 'tts.http', action: { type: 'slowBody', bytesPerSecond: 2_000 } }],
    });
    const controller = new AbortController();
    const pending = tts(
      emu,
      { id: uuid(), text: 'a long sentence to speak. '.repeat(30) },
      { signal: controller.signal },
    ).catch((e: Error) => e);
    await until(() => emu.stats().bytesOut > 0, 'output begun');
    assert.equal(processes(), 1, 'espeak-ng is running, held back by the slow client');
    controller.abort();
    await pending;
    await until(() => processes() === 0, 'espeak-ng gone');
    await until(() => emu.stats().concurrent.tts === 0, 'slot released');
  });

  test('failures: fail is 500 TTS_SYNTHESIS_FAILED; 500/503 codes by status faults; truncateTts', async () => {
    const emu = await emulator();
    emu.faults.add({ operation: 'tts.http', nth: 1, action: { type: 'fail' } });
    const failed = expectError(await tts(emu, { id: uuid(), text: 'hi' }), 500, 'TTS_SYNTHESIS_FAILED');
    assert.equal(failed.retryable, true);
    for (const [status, code, retryable] of [
      [503, 'SERVER_DEPENDENCY_FAILURE', true],
      [503, 'TTS_MODERATION_UNAVAILABLE', true],
      [500, 'TTS_VOICE_RESOLUTION_FAILED', false],
    ] as const) {
      const rule = emu.faults.add({ operation: 'tts.http', action: { type: 'status', status, code } });
      assert.equal(
        expectError(await tts(emu, { id: uuid(), text: 'hi' }), status, code).retryable,
        retryable,
      );
      rule.remove();
    }
    const rule = emu.faults.add({ operation: 'tts.http', action: { type: 'truncateTts' } });
    const id = uuid();
    const cut = await tts(emu, { id, text: 'hello there' });
    assert.equal(cut.status, 200);
    assert.ok(frames(cut.body, id).every((f) => !f.final));
    assert.throws(() => demux(cut.body, id), IncompleteStreamError);
    rule.remove();
    emu.faults.add({ operation: 'tts.http', action: { type: 'truncateTts', afterBytes: 1000 } });
    const early = await tts(emu, { id, text: 'hello there' });
    assert.equal(early.body.length, 1000);
  });
});

describe('TTS over Socket.IO', () => {
  test('tts_request: acknowledged, tts_audio at 24 kHz, the last event final', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const text = 'Hello there, how are you today?';
      const id = uuid();
      const { events, done } = collectUntilFinal<{ id: string; audio: Buffer; is_final: boolean }>(
        socket,
        'tts_audio',
      );
      assert.deepEqual(await socket.emitWithAck('tts_request', { id, text }), { ok: true });
      await done;
      assert.ok(events.every((e) => e.id === id && Buffer.isBuffer(e.audio) && e.audio.length % 2 === 0));
      assert.equal(events.filter((e) => e.is_final).length, 1);
      const socketBytes = events.reduce((n, e) => n + e.audio.length, 0);
      const httpId = uuid();
      const httpBytes = demux((await tts(emu, { id: httpId, text })).body, httpId).length;
      assert.ok(
        Math.abs(socketBytes / httpBytes - 1.5) < 0.01,
        `24 kHz vs 16 kHz: ${socketBytes} / ${httpBytes}`,
      );
    } finally {
      socket.close();
    }
  });

  test('errors as negative acknowledgements or error events with the id', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const id = uuid();
      const bad = (await socket.emitWithAck('tts_request', { id, text: '' })) as {
        ok: boolean;
        error: Record<string, unknown>;
      };
      assert.equal(bad.error.code, 'VALIDATION_REQUIRED_FIELD');
      assert.equal(bad.error.id, id);
      const event = new Promise<Record<string, unknown>>((resolve) => socket.once('error', resolve));
      socket.emit('tts_request', { id, text: 'hi', voice_id: physicalVariantIds()[0] });
      const error = await event;
      assert.equal(error.code, 'TTS_VOICE_NOT_FOUND');
      assert.equal(error.id, id);
    } finally {
      socket.close();
    }
  });

  test('list_voices: seven profiles with id, name and languages', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const { voices } = (await socket.emitWithAck('list_voices')) as {
        voices: { id: string; name: string; languages: string[] }[];
      };
      assert.equal(voices.length, 7);
      assert.deepEqual(voices, [...emu.voices]);
      for (const v of voices) assert.deepEqual(Object.keys(v).sort(), ['id', 'languages', 'name']);
      assert.equal(new Set(voices.map((v) => v.id)).size, 7);
      assert.equal(emu.stats().requests['voices.socket'], 1);
    } finally {
      socket.close();
    }
  });
});
