// RIFF/WAVE headers: parse (complete or streaming files) and write. Pure; the audio layer
// builds sample decoding on it, and TTS request validation uses it for reference audio.

import { ProtocolError } from './errors.ts';

/** Sample encodings of the WAV files we read: integer PCM, IEEE float, A-law, mu-law. */
export type WavSampleFormat = 'pcm' | 'float' | 'alaw' | 'mulaw';

/** What `parseWavHeader` reads from a RIFF/WAVE header. */
export interface WavInfo {
  /** Sample encoding (from the format tag, or the subformat of an extensible header). */
  format: WavSampleFormat;
  /** The format tag as stored (1 PCM, 3 float, 6 A-law, 7 mu-law, 0xFFFE extensible). */
  formatTag: number;
  /** Interleaved channels. */
  channels: number;
  /** Samples per second per channel, Hz. */
  sampleRate: number;
  /** Bits of one sample of one channel. */
  bitsPerSample: number;
  /** Bytes of one sample frame across all channels (`channels * bitsPerSample / 8`). */
  blockAlign: number;
  /** Offset of the first sample byte. */
  dataOffset: number;
  /**
   * Sample bytes declared by the `data` chunk, or `undefined` for a streaming header whose size
   * is unknown (0 or 0xFFFFFFFF, as ffmpeg writes to a pipe).
   */
  dataBytes: number | undefined;
}

const WAVE_FORMAT_PCM = 1;
const WAVE_FORMAT_IEEE_FLOAT = 3;
const WAVE_FORMAT_ALAW = 6;
const WAVE_FORMAT_MULAW = 7;
const WAVE_FORMAT_EXTENSIBLE = 0xfffe;
/** Upper bound on bytes before `data`; a header larger than this is not a WAV we accept. */
export const MAX_WAV_HEADER_BYTES = 1024 * 1024;

function fail(message: string): never {
  throw new ProtocolError('ERR_WAV_FORMAT', message);
}

/** Whether `bytes` starts like a RIFF/WAVE file. */
export function looksLikeWav(bytes: Uint8Array): boolean {
  return (
    bytes.length >= 12 &&
    bytes[0] === 0x52 &&
    bytes[1] === 0x49 &&
    bytes[2] === 0x46 &&
    bytes[3] === 0x46 && // RIFF
    bytes[8] === 0x57 &&
    bytes[9] === 0x41 &&
    bytes[10] === 0x56 &&
    bytes[11] === 0x45 // WAVE
  );
}

/**
 * Parse a WAV header from the start of a file. Returns `null` when `bytes` ends before the
 * `data` chunk starts (feed more), throws `ProtocolError` (`ERR_WAV_FORMAT`) for anything that
 * is not a WAV file we can read.
 */
export function parseWavHeader(bytes: Uint8Array): WavInfo | null {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < 12) {
    if (!'RIFF'.startsWith(buf.subarray(0, 4).toString('latin1'))) fail('not a RIFF file');
    return null;
  }
  if (buf.toString('latin1', 0, 4) !== 'RIFF')
    fail('not a RIFF file (RIFX, RF64 and others are not supported)');
  if (buf.toString('latin1', 8, 12) !== 'WAVE') fail('RIFF file is not WAVE');
  let fmt: Omit<WavInfo, 'dataOffset' | 'dataBytes'> | undefined;
  let next = 12;
  for (const { id, body, size } of riffChunks(buf)) {
    if (body - 8 > MAX_WAV_HEADER_BYTES) fail('no data chunk within the first MiB');
    if (id === 'data') {
      if (!fmt) fail('data chunk before fmt chunk');
      return { ...fmt, dataOffset: body, dataBytes: dataSize(size) };
    }
    if (id === 'fmt ') {
      if (body + size > buf.length) return null;
      fmt = parseFmt(buf.subarray(body, body + size));
    }
    next = body + size + (size % 2);
  }
  if (next > MAX_WAV_HEADER_BYTES) fail('no data chunk within the first MiB');
  return null;
}

/**
 * Where a RIFF file's data chunk ends by its header (any codec: ADPCM, GSM ... that
 * `parseWavHeader` does not read), when `bytes` reaches the chunk's header and it gives a size
 * (not a streaming one).
 */
export function riffDataEnd(bytes: Uint8Array): number | undefined {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.toString('latin1', 0, 4) !== 'RIFF') return undefined;
  for (const { id, body, size } of riffChunks(buf)) {
    if (id === 'data') {
      const known = dataSize(size);
      return known === undefined ? undefined : body + known;
    }
  }
  return undefined;
}

/** The data chunk's size, or undefined for a streaming header's (0 or 0xFFFFFFFF: to the end). */
const dataSize = (size: number): number | undefined => (size === 0 || size === 0xffffffff ? undefined : size);

/** The chunks of a RIFF file after its 12-byte header, as far as `buf` holds their own headers. */
function* riffChunks(buf: Buffer): Generator<{ id: string; body: number; size: number }> {
  for (let pos = 12; pos + 8 <= buf.length; ) {
    const size = buf.readUInt32LE(pos + 4);
    yield { id: buf.toString('latin1', pos, pos + 4), body: pos + 8, size };
    pos += 8 + size + (size % 2);
  }
}

function parseFmt(chunk: Buffer): Omit<WavInfo, 'dataOffset' | 'dataBytes'> {
  if (chunk.length < 16) fail('fmt chunk shorter than 16 bytes');
  const formatTag = chunk.readUInt16LE(0);
  const channels = chunk.readUInt16LE(2);
  const sampleRate = chunk.readUInt32LE(4);
  const blockAlign = chunk.readUInt16LE(12);
  const bitsPerSample = chunk.readUInt16LE(14);
  let tag = formatTag;
  if (formatTag === WAVE_FORMAT_EXTENSIBLE) {
    if (chunk.length < 40) fail('extensible fmt chunk shorter than 40 bytes');
    tag = chunk.readUInt16LE(24); // first two bytes of the sub-format GUID
  }
  let format: WavSampleFormat;
  if (tag === WAVE_FORMAT_PCM) format = 'pcm';
  else if (tag === WAVE_FORMAT_IEEE_FLOAT) format = 'float';
  else if (tag === WAVE_FORMAT_ALAW) format = 'alaw';
  else if (tag === WAVE_FORMAT_MULAW) format = 'mulaw';
  else fail(`unsupported WAV format tag 0x${tag.toString(16)}`);
  if (channels < 1) fail('WAV with zero channels');
  if (sampleRate < 1) fail('WAV with zero sample rate');
  const valid =
    (format === 'pcm' &&
      (bitsPerSample === 8 || bitsPerSample === 16 || bitsPerSample === 24 || bitsPerSample === 32)) ||
    (format === 'float' && (bitsPerSample === 32 || bitsPerSample === 64)) ||
    ((format === 'alaw' || format === 'mulaw') && bitsPerSample === 8);
  if (!valid) fail(`unsupported ${format} WAV with ${bitsPerSample} bits per sample`);
  if (blockAlign !== (channels * bitsPerSample) / 8) fail(`inconsistent block align ${blockAlign}`);
  return { format, formatTag, channels, sampleRate, bitsPerSample, blockAlign };
}

/** The format of a header written by `writeWavHeader`. */
export interface WavHeaderInput {
  /** Samples per second per channel, Hz. */
  sampleRate: number;
  /** Interleaved channels; default 1. */
  channels?: number;
  /** Bits per sample; default 16. */
  bitsPerSample?: 16 | 32;
  /** Integer PCM (default) or IEEE float. */
  format?: 'pcm' | 'float';
  /** Sample bytes; omit for a streaming header (sizes set to 0xFFFFFFFF). */
  dataBytes?: number;
}

/** A canonical 44-byte header. */
export function writeWavHeader(input: WavHeaderInput): Buffer {
  const channels = input.channels ?? 1;
  const bits = input.bitsPerSample ?? 16;
  const tag = input.format === 'float' ? WAVE_FORMAT_IEEE_FLOAT : WAVE_FORMAT_PCM;
  const blockAlign = (channels * bits) / 8;
  const streaming = input.dataBytes === undefined;
  const dataBytes = input.dataBytes ?? 0;
  if (!streaming && (dataBytes < 0 || dataBytes > 0xffffffff - 36)) {
    throw new RangeError(`WAV data of ${dataBytes} bytes does not fit a RIFF header`);
  }
  const h = Buffer.alloc(44);
  h.write('RIFF', 0, 'latin1');
  h.writeUInt32LE(streaming ? 0xffffffff : 36 + dataBytes, 4);
  h.write('WAVE', 8, 'latin1');
  h.write('fmt ', 12, 'latin1');
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(tag, 20);
  h.writeUInt16LE(channels, 22);
  h.writeUInt32LE(input.sampleRate, 24);
  h.writeUInt32LE(input.sampleRate * blockAlign, 28);
  h.writeUInt16LE(blockAlign, 32);
  h.writeUInt16LE(bits, 34);
  h.write('data', 36, 'latin1');
  h.writeUInt32LE(streaming ? 0xffffffff : dataBytes, 40);
  return h;
}

/** A complete WAV file of PCM16LE samples. */
export function encodeWav(pcm: Uint8Array, sampleRate: number, channels = 1): Buffer {
  return Buffer.concat([writeWavHeader({ sampleRate, channels, dataBytes: pcm.length }), pcm]);
}
