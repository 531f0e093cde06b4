import assert from 'node:assert/strict';
import { Readable, type Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import fc from 'fast-check';
import { encodeNdjson, NdjsonDecoder, ProtocolError, parseNdjson } from '../src/index.ts';
import { chunksOf, cutsFor, splitAt } from './helpers/chunks.ts';

function decodeAll(chunks: Buffer[], options?: ConstructorParameters<typeof NdjsonDecoder>[0]): unknown[] {
  const d = new NdjsonDecoder(options);
  const out: unknown[] = [];
  for (const c of chunks) d.push(c, out);
  d.end(out);
  return out;
}

test('complete lines only: a line waits for its line break', () => {
  const d = new NdjsonDecoder();
  assert.deepEqual(d.push(Buffer.from('{"a":1}\n{"b"')), [{ a: 1 }]);
  assert.equal(d.pendingBytes, 4);
  assert.deepEqual(d.push(Buffer.from(':2}')), []);
  assert.deepEqual(d.push(Buffer.from('\n')), [{ b: 2 }]);
  assert.deepEqual(d.end(), []);
});

test('a UTF-8 character split across chunks at every byte survives', () => {
  const text = `${JSON.stringify({ t: 'مرحبا بالعالم — naïve 🎙️ 日本' })}\n`;
  const bytes = Buffer.from(text);
  for (let cut = 1; cut < bytes.length; cut++) {
    assert.deepEqual(decodeAll(splitAt(bytes, [cut])), [JSON.parse(text)], `cut at ${cut}`);
  }
  assert.deepEqual(decodeAll(chunksOf(bytes, 1)), [JSON.parse(text)]);
});

test('CRLF line endings and blank lines', () => {
  const input = Buffer.from('{"a":1}\r\n\r\n   \n\t\r\n{"b":2}\r\n\n');
  assert.deepEqual(decodeAll([input]), [{ a: 1 }, { b: 2 }]);
  assert.deepEqual(decodeAll(chunksOf(input, 1)), [{ a: 1 }, { b: 2 }]);
});

test('maxLineBytes: at the limit accepted, one past rejected with the line number', () => {
  const line = JSON.stringify({ x: 'y'.repeat(20) }); // 28 bytes
  assert.equal(Buffer.byteLength(line), 28);
  assert.deepEqual(decodeAll([Buffer.from(`{}\n${line}\n`)], { maxLineBytes: 28 }), [
    {},
    { x: 'y'.repeat(20) },
  ]);
  assert.throws(
    () => decodeAll([Buffer.from(`{}\n${line}\n`)], { maxLineBytes: 27 }),
    (err: unknown) =>
      err instanceof ProtocolError && err.code === 'ERR_NDJSON_LINE_TOO_LONG' && err.line === 2,
  );
});

test('maxLineBytes bounds memory before the line break arrives', () => {
  const d = new NdjsonDecoder({ maxLineBytes: 10 });
  d.push(Buffer.from('{"a":'));
  assert.throws(() => d.push(Buffer.from('"0123456789"')), { code: 'ERR_NDJSON_LINE_TOO_LONG' });
  assert.throws(() => new NdjsonDecoder({ maxLineBytes: 4 }).push(Buffer.from('123456')), {
    code: 'ERR_NDJSON_LINE_TOO_LONG',
  });
});

test('a long line split into many small reads is parsed; maxLineBytes holds on the running length', () => {
  const value = { t: 'é'.repeat(30_000) }; // 60 KB of two-byte characters
  const line = Buffer.from(`${JSON.stringify(value)}\r\n`);
  for (const size of [1, 7, 1024]) {
    assert.deepEqual(decodeAll(chunksOf(line, size)), [value], `${size}-byte reads`);
  }
  const bytes = line.length - 1; // the CR counts, the LF does not
  assert.deepEqual(decodeAll(chunksOf(line, 3), { maxLineBytes: bytes }), [value], 'at the limit');
  const d = new NdjsonDecoder({ maxLineBytes: bytes - 1 });
  const reads = chunksOf(Buffer.concat([Buffer.from('{}\n'), line]), 3);
  assert.throws(
    () => {
      for (const r of reads) d.push(r);
    },
    (err: unknown) =>
      err instanceof ProtocolError && err.code === 'ERR_NDJSON_LINE_TOO_LONG' && err.line === 2,
  );
  assert.ok(d.pendingBytes <= bytes - 1, 'never holds more than maxLineBytes');
});

test('invalid JSON names its line number, counting blank lines', () => {
  assert.throws(
    () => decodeAll([Buffer.from('{"a":1}\n\n{"b":\n')]),
    (err: unknown) =>
      err instanceof ProtocolError &&
      err.code === 'ERR_NDJSON_INVALID_JSON' &&
      err.line === 3 &&
      /line 3/.test(err.message),
  );
});

test('trailing bytes without a line break: error by default, or parse, or ignore', () => {
  assert.throws(
    () => decodeAll([Buffer.from('{"a":1}\n{"b":2}')]),
    (err: unknown) => {
      return err instanceof ProtocolError && err.code === 'ERR_NDJSON_TRUNCATED' && err.line === 2;
    },
  );
  assert.deepEqual(decodeAll([Buffer.from('{"a":1}\n{"b":2}')], { trailing: 'parse' }), [{ a: 1 }, { b: 2 }]);
  assert.deepEqual(decodeAll([Buffer.from('{"a":1}\n{"b":')], { trailing: 'ignore' }), [{ a: 1 }]);
  assert.deepEqual(decodeAll([Buffer.from('{"a":1}\n  \r')]), [{ a: 1 }], 'a blank tail is not truncation');
});

const recordArb = fc.record({
  id: fc.uuid(),
  seq: fc.integer(),
  transcription: fc.string({ unit: 'grapheme' }),
  words: fc.array(
    fc.record({
      word: fc.string({ unit: 'grapheme' }),
      start_time: fc.double({ noNaN: true, noDefaultInfinity: true }),
    }),
  ),
  is_final: fc.boolean(),
});

test('property: any split of NDJSON gives the one-chunk output', () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(recordArb, fc.constantFrom('', ' ', '\r')), { maxLength: 10 }),
      fc.constantFrom('\n', '\r\n'),
      (entries, eol) => {
        // Each record may be followed by a blank line ('', a space, or a stray CR).
        const text = entries
          .map(([r, blank]) => `${JSON.stringify(r)}${eol}${blank ? `${blank}${eol}` : ''}`)
          .join('');
        const bytes = Buffer.from(text);
        const expected = JSON.parse(JSON.stringify(entries.map(([r]) => r)));
        fc.assert(
          fc.property(cutsFor(bytes.length), (cuts) => {
            assert.deepEqual(decodeAll(splitAt(bytes, cuts)), expected);
          }),
          { numRuns: 10 },
        );
      },
    ),
    { numRuns: 50 },
  );
});

test('property: random bytes only ever produce ProtocolError', () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 200 }), cutsFor(200), (bytes, cuts) => {
      try {
        decodeAll(splitAt(Buffer.from(bytes), cuts), { maxLineBytes: 64 });
      } catch (err) {
        assert.ok(err instanceof ProtocolError, String(err));
      }
    }),
  );
});

test('parseNdjson stream adapter', async () => {
  const values = [{ a: 1 }, { b: [1, 2] }, 'text', 3];
  const got: unknown[] = [];
  await pipeline(
    Readable.from(chunksOf(Buffer.from(encodeNdjson(values)), 3)),
    parseNdjson(),
    async (source) => {
      for await (const v of source) got.push(v);
    },
  );
  assert.deepEqual(got, values);
});

test('parseNdjson rejects a null line (object streams cannot carry null)', async () => {
  await assert.rejects(
    pipeline(Readable.from([Buffer.from('{"a":1}\nnull\n')]), parseNdjson(), async (source) => {
      for await (const _ of source);
    }),
    (err: unknown) =>
      err instanceof ProtocolError && err.code === 'ERR_NDJSON_NULL' && /line 2/.test(err.message),
  );
});

/** Values a stream passed on before it failed, and the error; a Writable sink (flowing mode). */
async function runUntilError(
  stream: Transform,
  chunks: Buffer[],
): Promise<{ values: unknown[]; error: unknown }> {
  const values: unknown[] = [];
  let error: unknown;
  try {
    await pipeline(
      Readable.from(chunks),
      stream,
      new Writable({
        objectMode: true,
        write(value, _encoding, callback) {
          values.push(value);
          callback();
        },
      }),
    );
  } catch (err) {
    error = err;
  }
  return { values, error };
}

test('parseNdjson: a null line is named by its own line number, blank lines counted', async () => {
  for (const [text, line, before] of [
    ['null\n\n{"a":1}\n', 1, []],
    ['{"a":1}\n\n\r\nnull\n{"b":2}\n', 4, [{ a: 1 }]],
    ['\n{"a":1}\n \n{"b":2}\nnull\n', 5, [{ a: 1 }, { b: 2 }]],
  ] as const) {
    const { values, error } = await runUntilError(parseNdjson(), [Buffer.from(text)]);
    assert.ok(error instanceof ProtocolError && error.code === 'ERR_NDJSON_NULL', String(error));
    assert.equal(error.line, line, text);
    assert.match(error.message, new RegExp(`line ${line} is null`));
    assert.deepEqual(values, before, 'the lines before it are passed on');
  }
});

test('property: parseNdjson passes on the same values before an error for any split', async () => {
  const badLine = fc.constantFrom('null', '{"a":', 'x'.repeat(80), '[1,]');
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.tuple(recordArb, fc.constantFrom('', ' ', '\r')), { maxLength: 6 }),
      badLine,
      fc.nat(),
      fc.constantFrom('\n', '\r\n'),
      fc.boolean(),
      (entries, bad, at, eol, truncated) => {
        const lines = entries.map(
          ([r, blank]) => `${JSON.stringify(r)}${eol}${blank ? `${blank}${eol}` : ''}`,
        );
        // A bad line somewhere, or a last line cut short.
        if (truncated) lines.push('{"cut":');
        else lines.splice(at % (lines.length + 1), 0, `${bad}${eol}`);
        const bytes = Buffer.from(lines.join(''));
        return fc.assert(
          fc.asyncProperty(cutsFor(bytes.length), async (cuts) => {
            const one = await runUntilError(parseNdjson({ maxLineBytes: 64 * 1024 }), [bytes]);
            const many = await runUntilError(parseNdjson({ maxLineBytes: 64 * 1024 }), splitAt(bytes, cuts));
            assert.ok(one.error instanceof ProtocolError, String(one.error));
            assert.ok(many.error instanceof ProtocolError, String(many.error));
            assert.equal(many.error.code, one.error.code);
            assert.equal(many.error.line, one.error.line);
            assert.deepEqual(many.values, one.values);
          }),
          { numRuns: 5 },
        );
      },
    ),
    { numRuns: 40 },
  );
});

test('parseNdjson fails the pipeline on a truncated last line', async () => {
  await assert.rejects(
    pipeline(
      Readable.from([Buffer.from('{"a":1}\n{"a"')]),
      parseNdjson({ maxLineBytes: 100 }),
      async (source) => {
        for await (const _ of source);
      },
    ),
    { code: 'ERR_NDJSON_TRUNCATED' },
  );
});
