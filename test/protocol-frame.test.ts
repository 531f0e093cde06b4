import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  decodeFrame,
  encodeFrame,
  FRAME_HEADER_BYTES,
  LANGUAGES,
  type Language,
  SpeechServiceError,
} from '../src/index.ts';
import { uuidToBytes } from '../src/protocol/uuid.ts';

const ID = '0f8fad5b-d9cb-469f-a165-70867728950e';
const pcm = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => i & 0xff));

function rejects(fn: () => unknown, code: string) {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof SpeechServiceError, `expected SpeechServiceError, got ${err}`);
    assert.equal(err.code, code);
    assert.equal(err.status, 400);
    assert.equal(err.origin, 'local');
    assert.equal(err.retryable, false);
    return true;
  });
}

test('encodeFrame lays out UUID, flags, language and PCM exactly', () => {
  const frame = encodeFrame({ streamId: ID, isStart: true, isFinal: false, language: 'en', pcm: pcm(4) });
  assert.equal(frame.length, FRAME_HEADER_BYTES + 4);
  assert.deepEqual(frame.subarray(0, 16), uuidToBytes(ID));
  assert.equal(frame[16], 0b01);
  assert.equal(frame[17], 1);
  assert.deepEqual(frame.subarray(18), pcm(4));
  assert.equal(encodeFrame({ streamId: ID, isFinal: true, language: 'ar', pcm: pcm(2) })[16], 0b10);
  assert.equal(
    encodeFrame({ streamId: ID, isStart: true, isFinal: true, language: 'auto', pcm: pcm(2) })[16],
    0b11,
  );
  assert.equal(encodeFrame({ streamId: ID, language: 'codeswitch', pcm: pcm(2) })[16], 0);
});

test('LANGUAGES maps names to the interface bytes', () => {
  assert.deepEqual({ ...LANGUAGES }, { ar: 0, en: 1, codeswitch: 2, auto: 255 });
});

test('streamId accepts a UUID string or 16 bytes', () => {
  const a = encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) });
  const b = encodeFrame({ streamId: uuidToBytes(ID), language: 'en', pcm: pcm(2) });
  assert.deepEqual(a, b);
  assert.equal(decodeFrame(a).streamId, ID);
  assert.throws(() => encodeFrame({ streamId: Buffer.alloc(15, 1), language: 'en', pcm: pcm(2) }), {
    code: 'ERR_INVALID_ARGUMENT',
  });
  assert.throws(() => encodeFrame({ streamId: 'not-a-uuid', language: 'en', pcm: pcm(2) }), {
    code: 'ERR_INVALID_ARGUMENT',
  });
});

test('encodeFrame refuses what the service would reject', () => {
  rejects(
    () => encodeFrame({ streamId: Buffer.alloc(16), language: 'en', pcm: pcm(2) }),
    'VALIDATION_FILE_CORRUPT',
  );
  rejects(() => encodeFrame({ streamId: ID, language: 'en', pcm: pcm(0) }), 'VALIDATION_FILE_CORRUPT');
  rejects(() => encodeFrame({ streamId: ID, language: 'en', pcm: pcm(3) }), 'VALIDATION_INVALID_FORMAT');
  rejects(
    () => encodeFrame({ streamId: ID, language: 'fr' as Language, pcm: pcm(2) }),
    'VALIDATION_INVALID_LANGUAGE',
  );
  // Prototype keys are no languages (a plain lookup would find a function and write byte 0).
  for (const name of ['toString', 'constructor', '__proto__', 'hasOwnProperty', 'valueOf']) {
    rejects(
      () => encodeFrame({ streamId: ID, language: name as Language, pcm: pcm(2) }),
      'VALIDATION_INVALID_LANGUAGE',
    );
  }
});

test('decodeFrame: short header is VALIDATION_FILE_CORRUPT', () => {
  for (const n of [0, 1, 16, 17]) rejects(() => decodeFrame(Buffer.alloc(n, 1)), 'VALIDATION_FILE_CORRUPT');
});

test('decodeFrame: all-zero UUID is VALIDATION_FILE_CORRUPT', () => {
  const f = encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) });
  f.fill(0, 0, 16);
  rejects(() => decodeFrame(f), 'VALIDATION_FILE_CORRUPT');
});

test('decodeFrame: empty PCM is VALIDATION_FILE_CORRUPT', () => {
  const f = encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) }).subarray(0, 18);
  rejects(() => decodeFrame(f), 'VALIDATION_FILE_CORRUPT');
});

test('decodeFrame: bad language byte is VALIDATION_INVALID_LANGUAGE', () => {
  for (const byte of [3, 4, 100, 254]) {
    const f = encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) });
    f[17] = byte;
    rejects(() => decodeFrame(f), 'VALIDATION_INVALID_LANGUAGE');
  }
});

test('decodeFrame: odd PCM byte count is VALIDATION_INVALID_FORMAT', () => {
  const f = Buffer.concat([encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) }), Buffer.of(7)]);
  rejects(() => decodeFrame(f), 'VALIDATION_INVALID_FORMAT');
});

test('decodeFrame: reserved flag bits are rejected (VALIDATION_INVALID_FORMAT)', () => {
  for (let bit = 2; bit < 8; bit++) {
    const f = encodeFrame({ streamId: ID, language: 'en', pcm: pcm(2) });
    f[16] = 1 << bit;
    rejects(() => decodeFrame(f), 'VALIDATION_INVALID_FORMAT');
  }
});

const languageArb = fc.constantFrom<Language>('ar', 'en', 'codeswitch', 'auto');
const nonzeroId = fc.uint8Array({ minLength: 16, maxLength: 16 }).filter((b) => b.some((x) => x !== 0));

test('property: decodeFrame(encodeFrame(x)) round-trips', () => {
  fc.assert(
    fc.property(
      nonzeroId,
      fc.boolean(),
      fc.boolean(),
      languageArb,
      fc
        .uint8Array({ minLength: 1, maxLength: 400 })
        .map((a) => Buffer.from(a.length % 2 ? a.subarray(1) : a)),
      (id, isStart, isFinal, language, samples) => {
        fc.pre(samples.length > 0);
        const frame = decodeFrame(encodeFrame({ streamId: id, isStart, isFinal, language, pcm: samples }));
        assert.deepEqual(frame.streamIdBytes, Buffer.from(id));
        assert.equal(frame.isStart, isStart);
        assert.equal(frame.isFinal, isFinal);
        assert.equal(frame.language, language);
        assert.deepEqual(frame.pcm, samples);
      },
    ),
  );
});

test('property: random bytes either decode or throw a typed 400, never crash', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      try {
        const f = decodeFrame(bytes);
        assert.equal(f.pcm.length % 2, 0);
        assert.ok(f.pcm.length > 0);
      } catch (err) {
        assert.ok(err instanceof SpeechServiceError);
        assert.equal(err.status, 400);
        assert.ok(
          ['VALIDATION_FILE_CORRUPT', 'VALIDATION_INVALID_FORMAT', 'VALIDATION_INVALID_LANGUAGE'].includes(
            err.code,
          ),
        );
      }
    }),
  );
});
