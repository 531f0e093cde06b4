// Helpers for chunk-boundary tests: split bytes at arbitrary points.

import fc from 'fast-check';

/** Split `buf` at the given cut points (any order, duplicates and out-of-range ignored). */
export function splitAt(buf: Buffer, cuts: readonly number[]): Buffer[] {
  const points = [...new Set(cuts.filter((c) => c > 0 && c < buf.length))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of points) {
    out.push(buf.subarray(prev, p));
    prev = p;
  }
  out.push(buf.subarray(prev));
  return out;
}

/** Arbitrary cut points for a buffer of `length` bytes. */
export const cutsFor = (length: number) =>
  fc.array(fc.integer({ min: 0, max: Math.max(0, length) }), { maxLength: Math.min(64, length + 1) });

/** Every chunk of size `size` (the last may be shorter). */
export function chunksOf(buf: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(buf.subarray(i, i + size));
  return out;
}
