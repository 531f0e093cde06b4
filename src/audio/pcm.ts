// Sample conversions to and from PCM16: integer PCM of 8/16/24/32 bits, float32/64, G.711
// A-law and mu-law, and channel downmix. Little-endian throughout (typed-array views assume a
// little-endian host, as every platform Node supports is).

import type { WavSampleFormat } from '../protocol/riff.ts';

function buildAlaw(): Int16Array {
  const table = new Int16Array(256);
  for (let i = 0; i < 256; i++) {
    const a = i ^ 0x55;
    let t = (a & 0x0f) << 4;
    const seg = (a & 0x70) >> 4;
    if (seg === 0) t += 8;
    else if (seg === 1) t += 0x108;
    else t = (t + 0x108) << (seg - 1);
    table[i] = a & 0x80 ? t : -t;
  }
  return table;
}

function buildMulaw(): Int16Array {
  const table = new Int16Array(256);
  for (let i = 0; i < 256; i++) {
    const u = ~i & 0xff;
    let t = ((u & 0x0f) << 3) + 0x84;
    t <<= (u & 0x70) >> 4;
    table[i] = u & 0x80 ? 0x84 - t : t - 0x84;
  }
  return table;
}

/** G.711 A-law byte to PCM16. */
export const ALAW_TO_PCM16: Int16Array = buildAlaw();
/** G.711 mu-law byte to PCM16. */
export const MULAW_TO_PCM16: Int16Array = buildMulaw();

/** Bytes per sample of one channel for a WAV-style format. */
export function bytesPerSample(format: WavSampleFormat, bitsPerSample: number): number {
  return format === 'alaw' || format === 'mulaw' ? 1 : bitsPerSample / 8;
}

/** A copy of the first `bytes` bytes in a fresh (so aligned) buffer, for typed-array views. */
function aligned(src: Uint8Array, bytes: number): ArrayBuffer {
  const copy = new Uint8Array(bytes);
  copy.set(src.subarray(0, bytes));
  return copy.buffer;
}

/**
 * Convert whole samples of `format`/`bits` to PCM16 (interleaved, channels untouched).
 * `src.length` must be a multiple of the sample size. Typed-array views throughout: unaligned
 * input (a chunk starting at an odd offset) costs one copy, not a DataView call per sample.
 */
export function toPcm16(src: Uint8Array, format: WavSampleFormat, bitsPerSample: number): Int16Array {
  const size = bytesPerSample(format, bitsPerSample);
  const n = Math.floor(src.length / size);
  const bytes = n * size;
  if (format === 'pcm' && bitsPerSample === 16) {
    if (src.byteOffset % 2 === 0) return new Int16Array(src.buffer, src.byteOffset, n).slice();
    return new Int16Array(aligned(src, bytes), 0, n);
  }
  const out = new Int16Array(n);
  if (format === 'alaw') for (let i = 0; i < n; i++) out[i] = ALAW_TO_PCM16[src[i]!]!;
  else if (format === 'mulaw') for (let i = 0; i < n; i++) out[i] = MULAW_TO_PCM16[src[i]!]!;
  else if (format === 'pcm' && bitsPerSample === 8) for (let i = 0; i < n; i++) out[i] = (src[i]! - 128) << 8;
  else if (format === 'pcm' && bitsPerSample === 24) {
    // The top two bytes of each little-endian 24-bit sample are its PCM16 value.
    for (let i = 0, j = 1; i < n; i++, j += 3) out[i] = ((src[j]! | (src[j + 1]! << 8)) << 16) >> 16;
  } else if (format === 'pcm' && bitsPerSample === 32) {
    const ints =
      src.byteOffset % 4 === 0
        ? new Int32Array(src.buffer, src.byteOffset, n)
        : new Int32Array(aligned(src, bytes), 0, n);
    for (let i = 0; i < n; i++) out[i] = ints[i]! >> 16;
  } else if (format === 'float' && bitsPerSample === 32) {
    const floats =
      src.byteOffset % 4 === 0
        ? new Float32Array(src.buffer, src.byteOffset, n)
        : new Float32Array(aligned(src, bytes), 0, n);
    for (let i = 0; i < n; i++) out[i] = floatToInt16(floats[i]!);
  } else if (format === 'float' && bitsPerSample === 64) {
    const floats =
      src.byteOffset % 8 === 0
        ? new Float64Array(src.buffer, src.byteOffset, n)
        : new Float64Array(aligned(src, bytes), 0, n);
    for (let i = 0; i < n; i++) out[i] = floatToInt16(floats[i]!);
  } else throw new RangeError(`unsupported sample format ${format}/${bitsPerSample}`);
  return out;
}

/** A float sample in [-1, 1] to PCM16, clamped, rounded to nearest. */
export function floatToInt16(x: number): number {
  const v = Math.round(x * 32768);
  return v > 32767 ? 32767 : v < -32768 ? -32768 : v;
}

export function pcm16ToFloat32(src: Int16Array): Float32Array {
  const out = new Float32Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = src[i]! / 32768;
  return out;
}

export function float32ToPcm16(src: Float32Array): Int16Array {
  const out = new Int16Array(src.length);
  for (let i = 0; i < src.length; i++) out[i] = floatToInt16(src[i]!);
  return out;
}

/** Average interleaved channels into mono. */
export function downmixToMono(interleaved: Int16Array, channels: number): Int16Array {
  if (channels === 1) return interleaved;
  const frames = Math.floor(interleaved.length / channels);
  const out = new Int16Array(frames);
  for (let f = 0, i = 0; f < frames; f++) {
    let sum = 0;
    for (let c = 0; c < channels; c++) sum += interleaved[i++]!;
    out[f] = Math.round(sum / channels);
  }
  return out;
}

/** An Int16Array's bytes as a Buffer (no copy). */
export function int16ToBuffer(samples: Int16Array): Buffer {
  return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength);
}

/** A PCM16LE Buffer as Int16Array samples (copies only when the Buffer is not 2-byte aligned). */
export function bufferToInt16(bytes: Uint8Array): Int16Array {
  const n = Math.floor(bytes.length / 2);
  if (bytes.byteOffset % 2 === 0) return new Int16Array(bytes.buffer, bytes.byteOffset, n);
  const copy = new Uint8Array(n * 2);
  copy.set(bytes.subarray(0, n * 2));
  return new Int16Array(copy.buffer);
}

/** Seconds of audio in `bytes` of PCM16 at `sampleRate` with `channels`. */
export function pcm16Seconds(bytes: number, sampleRate: number, channels = 1): number {
  return bytes / (2 * channels * sampleRate);
}
