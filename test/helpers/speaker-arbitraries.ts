// fast-check arbitraries of words and speaker segments that make the speaker rules' ties.

import fc from 'fast-check';

/**
 * Times that make ties: tenths (shared and equal boundaries, midpoints halfway between two),
 * sums of decimal fractions (0.1 + 0.2 style noise), offsets below a microsecond (distinct times
 * equal once rounded), and now and then a time no recording has.
 */
export const time = fc.oneof(
  { weight: 12, arbitrary: fc.integer({ min: -5, max: 45 }).map((i) => i / 10) },
  { weight: 4, arbitrary: fc.tuple(fc.nat(40), fc.nat(9)).map(([a, b]) => a / 10 + b / 100) },
  {
    weight: 3,
    arbitrary: fc.tuple(fc.nat(40), fc.integer({ min: -3, max: 3 })).map(([a, k]) => a / 10 + k * 3e-7),
  },
  { weight: 1, arbitrary: fc.constantFrom(Number.NaN, Infinity, -Infinity, 1e303, -1e303, 1e10) },
);

/**
 * A span: its end drawn alone (any order, equal, far) or as a length from its start (zero,
 * short, long, negative, below a microsecond).
 */
export const span = fc.oneof(
  fc.tuple(time, time),
  fc
    .tuple(time, fc.constantFrom(0, 0.05, 0.1, 0.3, 1, 2.5, -0.1, 3e-7))
    .map(([start, length]): [number, number] => [start, start + length]),
);

/** Up to 40 segments of three speakers: overlapping, nested, equal, zero-length and reversed among them. */
export const segments = fc.array(
  fc
    .tuple(fc.constantFrom('A', 'B', 'C'), span)
    .map(([speaker, [start_time, end_time]]) => ({ speaker, start_time, end_time })),
  { maxLength: 40, size: 'medium' },
);

/** Up to 40 words, inside, between and outside the segments, zero-length and reversed among them. */
export const words = fc.array(
  span.map(([start_time, end_time]) => ({ word: 'x', start_time, end_time })),
  { maxLength: 40, size: 'medium' },
);
