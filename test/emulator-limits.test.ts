// Limits exactly at their value and one past it, over HTTP against the emulator: the TTS request
// body (16 MiB), the TTS reference transcript (500 characters) and the batch request bytes.
// The interface: a request exactly at a limit is accepted; only one exceeding it is rejected.

import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, test } from 'node:test';
import type { Emulator } from '../src/emulator/index.ts';
import { DEFAULT_LIMITS } from '../src/protocol/limits.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import {
  call,
  emulatorsForFile,
  expectError,
  filePart,
  MULTIPART_TYPE,
  multipart,
  RATE,
  speechPcm,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({
  tts: { engine: 'synthetic' },
  jobTiming: { queuedMs: 0, processingMs: 0 },
});

/** A body sent with chunked transfer encoding (no Content-Length). */
const chunked = (body: Buffer): AsyncIterable<Buffer> =>
  Readable.from(
    (function* () {
      for (let i = 0; i < body.length; i += 1 << 20) yield body.subarray(i, i + (1 << 20));
    })(),
  );

const tts = (emu: Emulator, body: Buffer | string | AsyncIterable<Buffer>) =>
  call(`${emu.url}/http/tts`, {
    key: emu.apiKey,
    headers: { 'content-type': 'application/json' },
    body,
    dispatcher,
  });

/** The final-flag byte of the last frame of a TTS body (frames start with the request UUID). */
function endsWithFinalFrame(body: Buffer, id: string): boolean {
  const head = Buffer.from(id.replaceAll('-', ''), 'hex');
  const last = body.lastIndexOf(head);
  return last >= 0 && body[last + 16] === 1;
}

describe('TTS limits', () => {
  test('request body: exactly 16 MiB is accepted; one byte more is 413 with no data (declared or chunked)', async () => {
    const emu = await emulator();
    const limit = DEFAULT_LIMITS.ttsRequestBytes;
    assert.equal(limit, 16 * 1024 * 1024);
    const id = uuid();
    // Valid JSON padded with trailing whitespace to an exact size.
    const json = Buffer.from(JSON.stringify({ id, text: 'Hello there' }));
    const sized = (size: number) => Buffer.concat([json, Buffer.alloc(size - json.length, 0x20)]);
    for (const body of [sized(limit), chunked(sized(limit))]) {
      const reply = await tts(emu, body);
      assert.equal(reply.status, 200, reply.text.slice(0, 300));
      assert.ok(endsWithFinalFrame(reply.body, id), 'a whole frame stream');
    }
    for (const body of [sized(limit + 1), chunked(sized(limit + 1))]) {
      const over = expectError(await tts(emu, body), 413, 'PAYLOAD_TOO_LARGE');
      assert.equal(over.data, undefined, 'the body limit carries no data');
    }
    assert.equal(emu.stats().ttsSyntheses, 2);
  });

  test('reference transcript: 500 characters accepted; 501 is 422 CHARACTER_COUNT_EXCEEDED', async () => {
    const emu = await emulator();
    const limit = DEFAULT_LIMITS.ttsVoiceReferenceTextCharacters;
    assert.equal(limit, 500);
    const audio = encodeWav(Buffer.alloc(RATE), RATE).toString('base64'); // 0.5 s, mono PCM16
    const request = (text: string) =>
      JSON.stringify({ id: uuid(), text: 'Hello', voice_references: [{ audio, text }] });
    assert.equal((await tts(emu, request('a'.repeat(limit)))).status, 200);
    const over = expectError(await tts(emu, request('a'.repeat(limit + 1))), 422, 'CHARACTER_COUNT_EXCEEDED');
    assert.deepEqual(over.data, {
      limit,
      observed: limit + 1,
      unit: 'characters',
      bound: 'tts_voice_reference_text_characters',
    });
    // Counted like the text, in code points: 500 astral letters (1000 UTF-16 units) still fit.
    assert.equal((await tts(emu, request('𝒜'.repeat(limit)))).status, 200);
    const astral = expectError(
      await tts(emu, request('𝒜'.repeat(limit + 1))),
      422,
      'CHARACTER_COUNT_EXCEEDED',
    );
    assert.equal((astral.data as { observed: number }).observed, limit + 1);
    assert.equal(emu.stats().ttsSyntheses, 2);
  });
});

describe('batch limits', () => {
  test('request bytes: exactly at the limit accepted, one more 413 (declared and chunked)', async () => {
    const limit = 300_000;
    // The tail limit is lifted so that only the byte limit can answer.
    const emu = await emulator({ limits: { batchRequestBytes: limit, batchUnvalidatableTailBytes: limit } });
    const speech = wavOf(speechPcm([{ silence: 0.2 }, { speech: 1 }, { silence: 0.2 }]));
    const sized = (size: number) => {
      const probe = multipart([filePart(speech), { name: 'pad', data: '' }]);
      const body = multipart([filePart(speech), { name: 'pad', data: 'p'.repeat(size - probe.length) }]);
      assert.equal(body.length, size);
      return body;
    };
    const submit = (body: Buffer | AsyncIterable<Buffer>) =>
      call(`${emu.url}/v1/transcribe/en`, {
        key: emu.apiKey,
        headers: { 'content-type': MULTIPART_TYPE },
        body,
        dispatcher,
      });
    for (const body of [sized(limit), chunked(sized(limit))]) {
      const reply = await submit(body);
      assert.equal(reply.status, 200, reply.text);
    }
    const declared = expectError(await submit(sized(limit + 1)), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(declared.data, { limit, observed: limit + 1, unit: 'bytes', bound: 'request_bytes' });
    const streamed = expectError(await submit(chunked(sized(limit + 100_000))), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(streamed.data, { limit, observed: limit + 1, unit: 'bytes', bound: 'request_bytes' });
    assert.equal(emu.stats().jobsCreated, 2, 'no job for a refused upload');
  });
});
