import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, DEFAULT_LIMITS, encodeWav, resolveLimits, writeWavHeader } from '../src/index.ts';
import {
  base64DecodedBytes,
  checkTtsRequest,
  checkTtsRequestBytes,
  countCodePoints,
  type TtsCheck,
} from '../src/protocol/tts-request.ts';

const ID = 'a0f3a1c2-7b7e-4b8e-9f5e-0c1d2e3f4a5b';
const VOICE = '1b4e28ba-2fa1-41d2-883f-0016d3cca427';
const refWav = (seconds: number, rate = 16000) =>
  encodeWav(Buffer.alloc(Math.round(seconds * rate) * 2), rate);
const ref = (audio: Buffer | string = refWav(1), text = 'a reference transcript') => ({
  audio: typeof audio === 'string' ? audio : audio.toString('base64'),
  text,
});

function rejected(result: TtsCheck, status: number, code: string, data?: object) {
  assert.equal(result.ok, false, 'expected a rejection');
  if (result.ok) return;
  assert.equal(result.rejection.status, status, result.rejection.detail);
  assert.equal(result.rejection.code, code, result.rejection.detail);
  if (data) assert.deepEqual(result.rejection.data, data);
}

test('valid bodies: voice_id, a voice reference, or neither', () => {
  for (const body of [
    { id: ID, text: 'Hello there', model: 'nebula', voice_id: VOICE },
    { id: ID, text: 'Hello there', voice_references: [ref()] },
    { id: ID, text: '  مرحبا  ' },
  ]) {
    const r = checkTtsRequest(body);
    assert.ok(r.ok, JSON.stringify(r));
    assert.deepEqual(r.body, body);
  }
});

test('malformed body or unparseable id: VALIDATION_INVALID_FORMAT, never VALIDATION_INVALID_UUID', () => {
  rejected(checkTtsRequestBytes(Buffer.from('{"id":')), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest([]), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest({ text: 'hi' }), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest({ id: 'nope', text: 'hi' }), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest({ id: 42, text: 'hi' }), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest({ id: ID, text: 5 }), 400, 'VALIDATION_INVALID_FORMAT');
  rejected(checkTtsRequest({ id: ID, text: 'hi', model: 3 }), 400, 'VALIDATION_INVALID_FORMAT');
});

test('empty, whitespace-only or letterless text: VALIDATION_REQUIRED_FIELD', () => {
  for (const text of ['', '   ', '\n\t ', '!!! ...']) {
    rejected(checkTtsRequest({ id: ID, text }), 400, 'VALIDATION_REQUIRED_FIELD');
  }
  rejected(checkTtsRequest({ id: ID }), 400, 'VALIDATION_REQUIRED_FIELD');
  assert.ok(checkTtsRequest({ id: ID, text: ' 7 ' }).ok, 'a number is enough');
});

test('both voice selectors or an empty voice_references: VALIDATION_INVALID_PARAM', () => {
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_id: VOICE, voice_references: [ref()] }),
    400,
    'VALIDATION_INVALID_PARAM',
  );
  rejected(checkTtsRequest({ id: ID, text: 'hi', voice_references: [] }), 400, 'VALIDATION_INVALID_PARAM');
});

test('voice_id not a UUID: VALIDATION_INVALID_UUID', () => {
  rejected(checkTtsRequest({ id: ID, text: 'hi', voice_id: 'alloy' }), 400, 'VALIDATION_INVALID_UUID');
});

test('reference audio not base64 mono PCM16 RIFF/WAVE: VALIDATION_INVALID_FORMAT', () => {
  const stereo = encodeWav(Buffer.alloc(64), 16000, 2);
  const eightBit = Buffer.concat([writeWavHeader({ sampleRate: 8000, dataBytes: 8 }), Buffer.alloc(8)]);
  eightBit.writeUInt16LE(8, 34);
  eightBit.writeUInt16LE(1, 32);
  const noData = encodeWav(Buffer.alloc(0), 16000);
  for (const audio of [
    'not base64!',
    Buffer.from('RIFF....WAVEjunk').toString('base64'),
    Buffer.from('ID3 an mp3 file').toString('base64'),
    stereo.toString('base64'),
    eightBit.toString('base64'),
    noData.toString('base64'),
    refWav(1).subarray(0, 30).toString('base64'),
    `-_${refWav(1).toString('base64').slice(2)}`, // URL-safe alphabet is not standard base64
  ]) {
    rejected(
      checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(audio)] }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
  }
});

test('a reference whose data chunk declares 0 bytes is empty, whatever chunks follow it', () => {
  const header = writeWavHeader({ sampleRate: 16000, dataBytes: 0 });
  const list = Buffer.concat([Buffer.from('LIST'), Buffer.from([8, 0, 0, 0]), Buffer.from('INFOabcd')]);
  const emptyThenList = Buffer.concat([header, list]);
  emptyThenList.writeUInt32LE(emptyThenList.length - 8, 4);
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(emptyThenList)] }),
    400,
    'VALIDATION_INVALID_FORMAT',
  );
  // A streaming header (size unknown, 0xFFFFFFFF) still counts the bytes that follow.
  const streaming = Buffer.concat([writeWavHeader({ sampleRate: 16000 }), Buffer.alloc(3200)]);
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(streaming)] }).ok);
});

test('voice_references not an array, or its element not an object: VALIDATION_INVALID_FORMAT', () => {
  for (const voice_references of [ref(), 'abc', 3, { 0: ref() }]) {
    rejected(checkTtsRequest({ id: ID, text: 'hi', voice_references }), 400, 'VALIDATION_INVALID_FORMAT');
  }
  for (const element of [null, 'audio', 7, [ref().audio, ref().text]]) {
    rejected(
      checkTtsRequest({ id: ID, text: 'hi', voice_references: [element] }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
  }
});

test('missing reference audio or transcript: VALIDATION_REQUIRED_FIELD', () => {
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [{ text: 'x' }] }),
    400,
    'VALIDATION_REQUIRED_FIELD',
  );
  for (const text of ['', '  ']) {
    rejected(
      checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(refWav(1), text)] }),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
  }
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [{ audio: ref().audio }] }),
    400,
    'VALIDATION_REQUIRED_FIELD',
  );
});

test('more than one reference: 422 VOICE_REFERENCE_COUNT_EXCEEDED', () => {
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(), ref()] }),
    422,
    'VOICE_REFERENCE_COUNT_EXCEEDED',
    {
      limit: 1,
      observed: 2,
      unit: 'references',
      bound: 'tts_voice_reference_count',
    },
  );
});

test('text length in code points per tier: at the limit accepted, one past rejected', () => {
  const emoji = '🎙️'; // two code points, four UTF-16 units
  assert.equal(countCodePoints(emoji), 2);
  assert.equal(countCodePoints('a\u{1F600}b'), 3);
  assert.equal(countCodePoints('\ud800x'), 2, 'a lone surrogate counts as one');
  const at = (n: number) => `a${' '.repeat(n - 1)}`; // whitespace is kept and counted
  assert.ok(checkTtsRequest({ id: ID, text: at(500) }).ok);
  rejected(checkTtsRequest({ id: ID, text: at(501) }), 422, 'CHARACTER_COUNT_EXCEEDED', {
    limit: 500,
    observed: 501,
    unit: 'characters',
    bound: 'tts_input_characters',
  });
  assert.ok(checkTtsRequest({ id: ID, text: at(1000) }, { tier: 'standard' }).ok);
  rejected(
    checkTtsRequest({ id: ID, text: at(1001) }, { tier: 'enterprise' }),
    422,
    'CHARACTER_COUNT_EXCEEDED',
  );
  rejected(checkTtsRequest({ id: ID, text: at(501) }, { tier: 'platinum' }), 422, 'CHARACTER_COUNT_EXCEEDED');
  const astral = '😀'.repeat(500);
  assert.ok(checkTtsRequest({ id: ID, text: `a${astral.slice(2)}` }).ok, '500 code points, 999 UTF-16 units');
});

test('tier limits follow TTS_MAX_INPUT_CHARACTERS_* overrides', () => {
  const limits = resolveLimits(
    {},
    { TTS_MAX_INPUT_CHARACTERS_FREE: '10', TTS_MAX_INPUT_CHARACTERS_STANDARD: '20' },
  );
  assert.deepEqual(limits.ttsInputCharacters, { free: 10, standard: 20, enterprise: 1000 });
  assert.ok(checkTtsRequest({ id: ID, text: 'a'.repeat(10) }, { limits }).ok);
  rejected(checkTtsRequest({ id: ID, text: 'a'.repeat(11) }, { limits }), 422, 'CHARACTER_COUNT_EXCEEDED');
  assert.throws(() => resolveLimits({}, { TTS_MAX_INPUT_CHARACTERS_FREE: 'ten' }), ConfigError);
});

test('reference transcript over 500 characters: 422', () => {
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(refWav(1), 'x'.repeat(500))] }).ok);
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(refWav(1), 'x'.repeat(501))] }),
    422,
    'CHARACTER_COUNT_EXCEEDED',
    {
      limit: 500,
      observed: 501,
      unit: 'characters',
      bound: 'tts_voice_reference_text_characters',
    },
  );
});

test('reference duration over 15 s: 422 with whole seconds rounded up', () => {
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(refWav(15, 8000))] }).ok);
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(refWav(15.001, 8000))] }),
    422,
    'AUDIO_DURATION_EXCEEDED',
    {
      limit: 15,
      observed: 16,
      unit: 'seconds',
      bound: 'tts_voice_reference_duration',
    },
  );
});

test('reference size is checked from the base64 length before decoding (413 with data)', () => {
  const limits = { ...DEFAULT_LIMITS, ttsVoiceReferenceBytes: 1000 };
  const exact = encodeWav(Buffer.alloc(1000 - 44), 16000);
  assert.equal(base64DecodedBytes(exact.toString('base64')), 1000);
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(exact)] }, { limits }).ok);
  // One byte over, and not even valid base64: the size rule answers first.
  const over = `${encodeWav(Buffer.alloc(1000 - 44 + 2), 16000)
    .toString('base64')
    .slice(0, -4)}!!!!`;
  rejected(
    checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(over)] }, { limits }),
    413,
    'PAYLOAD_TOO_LARGE',
    {
      limit: 1000,
      observed: 1002,
      unit: 'bytes',
      bound: 'tts_voice_reference_bytes',
    },
  );
});

test('a reference allowed past the default size is checked, never thrown on (base64 of 8 MiB)', () => {
  // A regular expression with a repeated group checked the base64: past about 3 MiB decoded
  // its backtracking overflowed and it threw a RangeError (the emulator answered 500) when a
  // deployment's limits allowed such a reference.
  const limits = {
    ...DEFAULT_LIMITS,
    ttsVoiceReferenceBytes: 12 * 1024 * 1024,
    ttsVoiceReferenceDurationSec: 300,
  };
  const big = refWav(262, 16000); // 8.4 MB decoded
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(big)] }, { limits }).ok);
  rejected(
    checkTtsRequest(
      { id: ID, text: 'hi', voice_references: [ref(`${big.toString('base64').slice(0, -4)}!!!!`)] },
      { limits },
    ),
    400,
    'VALIDATION_INVALID_FORMAT',
  );
  assert.ok(big.toString('base64').endsWith('=='));
  const padded = big.subarray(0, -2); // two bytes less: its base64 ends with one `=`
  assert.match(padded.toString('base64'), /[^=]=$/);
  assert.ok(checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(padded)] }, { limits }).ok);
  for (const bad of ['AAA', 'A===', 'AB=A', '====', 'AAAA=', 'AAAAAA==']) {
    rejected(
      checkTtsRequest({ id: ID, text: 'hi', voice_references: [ref(bad)] }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
  }
});

test('request body over 16 MiB: 413 without data', () => {
  const result = checkTtsRequestBytes(Buffer.alloc(DEFAULT_LIMITS.ttsRequestBytes + 1, 0x20));
  rejected(result, 413, 'PAYLOAD_TOO_LARGE');
  assert.ok(!result.ok && result.rejection.data === undefined);
  const atLimit = Buffer.alloc(DEFAULT_LIMITS.ttsRequestBytes, 0x20);
  Buffer.from(JSON.stringify({ id: ID, text: 'hi' })).copy(atLimit);
  assert.ok(checkTtsRequestBytes(atLimit).ok, 'a body exactly at the limit is accepted');
});
