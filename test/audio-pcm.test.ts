// Sample conversions give the same PCM16 whatever the byte offset of the input chunk.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { toPcm16 } from '../src/audio/pcm.ts';

const FORMATS = [
  ['pcm', 8],
  ['pcm', 16],
  ['pcm', 24],
  ['pcm', 32],
  ['float', 32],
  ['float', 64],
  ['alaw', 8],
  ['mulaw', 8],
] as const;

function reference(bytes: Buffer, format: string, bits: number): number[] {
  const out: number[] = [];
  const size = format === 'alaw' || format === 'mulaw' ? 1 : bits / 8;
  for (let at = 0; at + size <= bytes.length; at += size) {
    if (format === 'pcm' && bits === 16) out.push(bytes.readInt16LE(at));
    else if (format === 'pcm' && bits === 24) out.push(bytes.readInt16LE(at + 1));
    else if (format === 'pcm' && bits === 32) out.push(bytes.readInt32LE(at) >> 16);
    else if (format === 'pcm' && bits === 8) out.push((bytes[at]! - 128) << 8);
    else if (format === 'float') {
      const x = bits === 32 ? bytes.readFloatLE(at) : bytes.readDoubleLE(at);
      out.push(Math.max(-32768, Math.min(32767, Math.round(x * 32768))));
    } else out.push(Number.NaN); // G.711: compared against toPcm16 at offset 0 below
  }
  return out;
}

test('property: every format converts the same at any byte offset', () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...FORMATS),
      fc.uint8Array({ minLength: 0, maxLength: 96 }),
      fc.integer({ min: 0, max: 7 }),
      ([format, bits], raw, offset) => {
        // Floats from random bytes can be NaN or huge; keep them in [-1.5, 1.5].
        let body = Buffer.from(raw);
        if (format === 'float') {
          const n = Math.floor(body.length / (bits / 8));
          body = Buffer.alloc(n * (bits / 8));
          for (let i = 0; i < n; i++) {
            const x = ((raw[i] ?? 0) / 255) * 3 - 1.5;
            if (bits === 32) body.writeFloatLE(x, i * 4);
            else body.writeDoubleLE(x, i * 8);
          }
        }
        const shifted = Buffer.alloc(body.length + offset);
        body.copy(shifted, offset);
        const atOffset = Array.from(toPcm16(shifted.subarray(offset), format, bits));
        const atZero = Array.from(toPcm16(Buffer.from(body), format, bits));
        assert.deepEqual(atOffset, atZero);
        const expected = reference(body, format, bits);
        if (!expected.some(Number.isNaN)) assert.deepEqual(atZero, expected);
      },
    ),
    { numRuns: 500 },
  );
});
