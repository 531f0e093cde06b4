// Fast transcription against the emulator: POST /http/stt (query precedence, one file part,
// the 64 MiB and 1800 s limits, NDJSON fast records ending with is_final) and Socket.IO
// `audio_file`.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import type { Emulator } from '../src/emulator/index.ts';
import { validateFastRecord } from '../src/protocol/records.ts';
import {
  call,
  collectUntilFinal,
  connectSocket,
  emulatorsForFile,
  expectError,
  filePart,
  MULTIPART_TYPE,
  multipart,
  ndjson,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({});

const speech = wavOf(speechPcm([{ speech: 1.0 }, { silence: 0.8 }, { speech: 0.9 }, { silence: 0.2 }]));

function fast(emu: Emulator, query: string, body: Buffer, path = '/realtime/http/stt') {
  return call(`${emu.url}${path}?${query}`, {
    key: emu.apiKey,
    headers: { 'content-type': MULTIPART_TYPE },
    body,
    dispatcher,
  });
}

describe('fast transcription over HTTP', () => {
  test('NDJSON fast records, one per speech region, the last with is_final', async () => {
    const emu = await emulator();
    const id = uuid();
    for (const path of ['/http/stt', '/realtime/http/stt']) {
      const reply = await fast(emu, `id=${id}&language=en`, multipart([filePart(speech)]), path);
      assert.equal(reply.status, 200, reply.text);
      assert.equal(reply.headers['content-type'], 'application/x-ndjson');
      const records = ndjson(reply.text);
      assert.equal(records.length, 2);
      for (const r of records) {
        assert.ok(validateFastRecord(r).ok, JSON.stringify(r));
        assert.equal(r.id, id);
        assert.equal('is_speech_final' in r, false);
      }
      assert.deepEqual(
        records.map((r) => r.is_final),
        [false, true],
      );
    }
  });

  test('query: id required and a UUID; nonempty language wins over lang; nonempty asr wins over model', async () => {
    const emu = await emulator();
    const body = () => multipart([filePart(speech)]);
    expectError(await fast(emu, 'language=en', body()), 400, 'VALIDATION_REQUIRED_FIELD');
    expectError(await fast(emu, 'id=12', body()), 400, 'VALIDATION_INVALID_UUID');
    const id = uuid();
    const language = expectError(
      await fast(emu, `id=${id}&language=xx&lang=en`, body()),
      400,
      'VALIDATION_INVALID_LANGUAGE',
    );
    assert.equal(language.job_id, id, 'the client-supplied id');
    assert.equal(
      (await fast(emu, `id=${id}&language=&lang=ar`, body())).status,
      200,
      'an empty language defers to lang',
    );
    expectError(await fast(emu, `id=${id}&language=&lang=xx`, body()), 400, 'VALIDATION_INVALID_LANGUAGE');
    assert.equal((await fast(emu, `id=${id}`, body())).status, 200, 'no language is auto');
    expectError(
      await fast(emu, `id=${id}&language=en&asr=nope&model=nova-en`, body()),
      400,
      'ASR_MODEL_NOT_FOUND',
    );
    assert.equal((await fast(emu, `id=${id}&language=en&asr=&model=nova-en-fast`, body())).status, 200);
    expectError(await fast(emu, `id=${id}&language=en&asr=&model=nope`, body()), 400, 'ASR_MODEL_NOT_FOUND');
    assert.equal((await fast(emu, `id=${id}&language=en&asr=nova-en&model=nope`, body())).status, 200);
  });

  test('one file part; corrupt audio 422', async () => {
    const emu = await emulator();
    const id = uuid();
    expectError(
      await fast(
        emu,
        `id=${id}`,
        multipart([filePart(speech), { name: 'b', filename: 'b.wav', data: speech }]),
      ),
      422,
      'FILE_COUNT_EXCEEDED',
    );
    expectError(
      await fast(emu, `id=${id}`, multipart([{ name: 'x', data: 'y' }])),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
    expectError(
      await fast(emu, `id=${id}`, multipart([filePart(Buffer.from('garbage'.repeat(50)))])),
      422,
      'VALIDATION_FILE_CORRUPT',
    );
  });

  test('bytes and duration: at the limit accepted, one byte over 413 fast_audio_bytes / one sample over 422 fast_audio_duration', async () => {
    const wav = wavOf(Buffer.alloc(2 * 32_000));
    const body = multipart([filePart(wav)]);
    const emu = await emulator({ limits: { fastAudioBytes: body.length, fastAudioDurationSec: 2 } });
    const id = uuid();
    assert.equal((await fast(emu, `id=${id}`, body)).status, 200);
    // One byte more (the byte count is checked before the audio is read).
    const oneMore = multipart([filePart(Buffer.concat([wav, Buffer.alloc(1)]))]);
    assert.equal(oneMore.length, body.length + 1);
    const tooBig = expectError(await fast(emu, `id=${id}`, oneMore), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(tooBig.data, {
      limit: body.length,
      observed: body.length + 1,
      unit: 'bytes',
      bound: 'fast_audio_bytes',
    });
    const chunked = await call(`${emu.url}/http/stt?id=${id}`, {
      key: emu.apiKey,
      headers: { 'content-type': MULTIPART_TYPE },
      body: Readable.from([oneMore.subarray(0, 1000), oneMore.subarray(1000)]),
      dispatcher,
    });
    assert.deepEqual(expectError(chunked, 413, 'PAYLOAD_TOO_LARGE').data, tooBig.data);
    const longer = multipart([filePart(wavOf(Buffer.alloc(2 * 32_000 + 2)))]);
    const roomy = await emulator({ limits: { fastAudioDurationSec: 2 } });
    const tooLong = expectError(await fast(roomy, `id=${id}`, longer), 422, 'AUDIO_DURATION_EXCEEDED');
    assert.deepEqual(tooLong.data, { limit: 2, observed: 3, unit: 'seconds', bound: 'fast_audio_duration' });
  });

  test('a registered transcript (SHA-256 of the file) is spread over the records', async () => {
    const emu = await emulator();
    emu.registerTranscript(
      createHash('sha256').update(speech).digest('hex').toUpperCase(),
      'one two three four five',
    );
    const records = ndjson((await fast(emu, `id=${uuid()}`, multipart([filePart(speech)]))).text);
    assert.equal(records.map((r) => r.transcription).join(' '), 'one two three four five');
  });

  test('admission: per-key request rate, 429 RATE_LIMIT_EXCEEDED with Retry-After', async () => {
    const emu = await emulator({ rateLimit: { requestsPerSecond: 0.001, burst: 1 } });
    assert.equal((await fast(emu, `id=${uuid()}`, multipart([filePart(speech)]))).status, 200);
    const limited = await fast(emu, `id=${uuid()}`, multipart([filePart(speech)]));
    const body = expectError(limited, 429, 'RATE_LIMIT_EXCEEDED');
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    assert.equal(body.retryable, true);
    assert.equal(body.data, undefined, 'the usual error body, not the batch 429');
    assert.equal(typeof body.request_id, 'string');
  });

  test('admission: per-account fast concurrency', async () => {
    const emu = await emulator({
      limits: { accountConcurrency: { fast: 1 } },
      latency: { perRequestMs: 60_000 },
    });
    const controller = new AbortController();
    const pending = call(`${emu.url}/http/stt?id=${uuid()}`, {
      key: emu.apiKey,
      headers: { 'content-type': MULTIPART_TYPE },
      body: multipart([filePart(speech)]),
      dispatcher,
      signal: controller.signal,
    }).catch((e: Error) => e);
    await until(() => emu.stats().concurrent.fast === 1, 'the first request admitted');
    const second = await fast(emu, `id=${uuid()}`, multipart([filePart(speech)]));
    const body = expectError(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal((body.data as { bound: string }).bound, 'account_concurrency_fast');
    controller.abort();
    await pending;
    await until(() => emu.stats().concurrent.fast === 0, 'release after the client went away');
  });
});

describe('fast transcription over Socket.IO (audio_file)', () => {
  test('acknowledged, then transcription_result records with the id, the last final', async () => {
    const emu = await emulator();
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const id = uuid();
      const { events: records, done } = collectUntilFinal<Record<string, unknown>>(
        socket,
        'transcription_result',
      );
      assert.deepEqual(await socket.emitWithAck('audio_file', { id, language: 'en', audio: speech }), {
        ok: true,
      });
      await done;
      assert.equal(records.length, 2);
      for (const r of records) {
        assert.ok(validateFastRecord(r).ok);
        assert.equal(r.id, id);
      }
    } finally {
      socket.close();
    }
  });

  test('errors: bad id, language, model, non-binary audio, too large, corrupt', async () => {
    const emu = await emulator({ limits: { fastAudioBytes: 1000 } });
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const codeOf = async (payload: unknown) =>
        ((await socket.emitWithAck('audio_file', payload)) as { ok: boolean; error: Record<string, unknown> })
          .error;
      const id = uuid();
      assert.equal(
        (await codeOf({ id: 'x', language: 'en', audio: speech })).code,
        'VALIDATION_INVALID_UUID',
      );
      assert.equal((await codeOf({ id, language: 'de', audio: speech })).code, 'VALIDATION_INVALID_LANGUAGE');
      assert.equal(
        (await codeOf({ id, language: 'en', model: 'nope', audio: speech })).code,
        'ASR_MODEL_NOT_FOUND',
      );
      assert.equal((await codeOf({ id, language: 'en', audio: 'text' })).code, 'VALIDATION_INVALID_FORMAT');
      const big = await codeOf({ id, language: 'en', audio: speech });
      assert.equal(big.code, 'PAYLOAD_TOO_LARGE');
      assert.deepEqual(big.data, {
        limit: 1000,
        observed: speech.length,
        unit: 'bytes',
        bound: 'fast_audio_bytes',
      });
      const corrupt = await codeOf({ id, language: 'en', audio: Buffer.from('nope'.repeat(100)) });
      assert.equal(corrupt.code, 'VALIDATION_FILE_CORRUPT');
      assert.equal(corrupt.id, id);
      const event = new Promise<Record<string, unknown>>((resolve) => socket.once('error', resolve));
      socket.emit('audio_file', { id, language: 'xx', audio: speech });
      assert.equal((await event).id, id);
    } finally {
      socket.close();
    }
  });
});
