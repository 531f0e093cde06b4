// What the first bytes of an audio input say about how to decode it: natively (WAV, Ogg Opus,
// WebM Opus) or with ffmpeg, and what ffmpeg cannot know from a pipe (an MP3's gapless length,
// an MP4 whose index follows its media data).

import { looksLikeWav, parseWavHeader, riffDataEnd, type WavInfo } from '../protocol/riff.ts';
import { type OpusHead, parseOpusHead } from './ogg-opus.ts';
import { canDecodeOpusNatively } from './opus-decoder.ts';
import { UnitWalker } from './unit-walker.ts';
import { WebmOpusDemuxer } from './webm-opus.ts';

/** Bytes looked at, at most, before deciding. */
export const MAX_SNIFF_BYTES = 1024 * 1024;

export interface Mp3Gapless {
  sampleRate: number;
  /** Samples of real audio per channel: frames * samples per frame - encoder delay - padding. */
  samples: number;
  /** The encoder's padding after the real audio (samples per channel), which a pipe keeps. */
  endPadding: number;
}

export type SniffResult =
  | { kind: 'more' }
  | { kind: 'wav'; info: WavInfo }
  | { kind: 'ogg-opus'; head: OpusHead }
  | { kind: 'webm-opus'; head: OpusHead }
  | {
      kind: 'ffmpeg';
      /** An MP4 whose `moov` follows `mdat`: ffmpeg must be able to seek, so give it a file. */
      needsFile?: boolean;
      /** An MP3 whose LAME tag gives its length: trim ffmpeg's padding to it (a pipe cannot). */
      mp3?: Mp3Gapless;
      /**
       * A WAV ffmpeg decodes (ADPCM, GSM ...): where its data chunk ends by the header, so that
       * an input ending before is known cut (ffmpeg decodes what there is without a word).
       */
      wavEnd?: number;
      /**
       * A FLAC's length by its STREAMINFO block: ffmpeg decodes a FLAC cut on a frame boundary
       * without a word, so output short of this is known cut.
       */
      flac?: { sampleRate: number; samples: number };
    };

const startsWith = (b: Buffer, text: string, at = 0) =>
  b.length >= at + text.length && b.toString('latin1', at, at + text.length) === text;

/** Decide from `head` (the input so far); `ended` when that is the whole input. */
export function sniffAudio(head: Buffer, ended: boolean): SniffResult {
  const more = !ended && head.length < MAX_SNIFF_BYTES;
  if (head.length < 12 && more) return { kind: 'more' };
  if (looksLikeWav(head)) return sniffWav(head, more);
  if (startsWith(head, 'OggS')) return sniffOgg(head, more);
  if (head.length >= 4 && head.readUInt32BE(0) === 0x1a45dfa3) return sniffWebm(head, more);
  if (startsWith(head, 'ftyp', 4)) return sniffMp4(head, more);
  if (startsWith(head, 'fLaC')) return sniffFlac(head, more);
  if (startsWith(head, 'ID3') || isMp3Frame(head, 0)) return sniffMp3(head, more);
  return { kind: 'ffmpeg' };
}

/**
 * The head of an input as it arrives, and the decision `sniffAudio` makes on it. The head is
 * joined and looked at again only when it has doubled since the last look, so however small the
 * chunks, sniffing costs time linear in the head (up to `MAX_SNIFF_BYTES`).
 */
export class HeadSniffer {
  #chunks: Buffer[] = [];
  #bytes = 0;
  #next = 12;

  /** Bytes seen so far. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Add the next chunk: the decision, or `more`. */
  push(chunk: Buffer): SniffResult {
    if (chunk.length > 0) {
      this.#chunks.push(chunk);
      this.#bytes += chunk.length;
    }
    if (this.#bytes < this.#next) return { kind: 'more' };
    const result = sniffAudio(this.#head(), false);
    if (result.kind === 'more') this.#next = Math.min(MAX_SNIFF_BYTES, 2 * this.#bytes);
    return result;
  }

  /** The input ended: decide on what there is. */
  end(): SniffResult {
    return sniffAudio(this.#head(), true);
  }

  /** Every byte seen so far, as one Buffer, handed over: the sniffer forgets them. */
  take(): Buffer {
    const head = this.#head();
    this.#chunks = [];
    return head;
  }

  #head(): Buffer {
    if (this.#chunks.length > 1) this.#chunks = [Buffer.concat(this.#chunks)];
    return this.#chunks[0] ?? Buffer.alloc(0);
  }
}

function sniffWav(head: Buffer, more: boolean): SniffResult {
  try {
    const info = parseWavHeader(head);
    if (info) return { kind: 'wav', info };
    return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  } catch {
    // A WAV we do not read (ADPCM, GSM, MP3 in RIFF, RF64): ffmpeg may.
    const wavEnd = riffDataEnd(head);
    return wavEnd === undefined ? { kind: 'ffmpeg' } : { kind: 'ffmpeg', wavEnd };
  }
}

function sniffOgg(head: Buffer, more: boolean): SniffResult {
  if (head.length < 27) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  const segments = head[26]!;
  const body = 27 + segments;
  if (head.length < body + 19) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  if (!startsWith(head, 'OpusHead', body)) return { kind: 'ffmpeg' }; // Vorbis, FLAC, Speex ...
  try {
    const opus = parseOpusHead(head.subarray(body, body + head[27]!));
    return canDecodeOpusNatively(opus) ? { kind: 'ogg-opus', head: opus } : { kind: 'ffmpeg' };
  } catch {
    return { kind: 'ffmpeg' };
  }
}

function sniffWebm(head: Buffer, more: boolean): SniffResult {
  const demuxer = new WebmOpusDemuxer();
  try {
    demuxer.push(head);
  } catch {
    return { kind: 'ffmpeg' };
  }
  if (!demuxer.tracks) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  const track = demuxer.track;
  if (!track?.codecPrivate) return { kind: 'ffmpeg' };
  try {
    const opus = parseOpusHead(track.codecPrivate);
    return canDecodeOpusNatively(opus) ? { kind: 'webm-opus', head: opus } : { kind: 'ffmpeg' };
  } catch {
    return { kind: 'ffmpeg' };
  }
}

function sniffMp4(head: Buffer, more: boolean): SniffResult {
  let at = 0;
  while (at + 8 <= head.length) {
    let size = head.readUInt32BE(at);
    const type = head.toString('latin1', at + 4, at + 8);
    if (type === 'moov') return { kind: 'ffmpeg' };
    if (type === 'mdat') return { kind: 'ffmpeg', needsFile: true };
    if (size === 1) {
      if (at + 16 > head.length) break;
      size = Number(head.readBigUInt64BE(at + 8));
    }
    if (size < 8) return { kind: 'ffmpeg' }; // to the end, or malformed: ffmpeg reports it
    at += size;
  }
  return more ? { kind: 'more' } : { kind: 'ffmpeg', needsFile: true };
}

/** A native FLAC stream: its STREAMINFO (the first metadata block, 34 bytes) says its length. */
function sniffFlac(head: Buffer, more: boolean): SniffResult {
  if (head.length < 8 + 34) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  if ((head[4]! & 0x7f) !== 0 || head.readUIntBE(5, 3) !== 34) return { kind: 'ffmpeg' };
  // From byte 18: 20 bits of rate, 3 of channels, 5 of bits per sample, 36 of total samples.
  const sampleRate = (head[18]! << 12) | (head[19]! << 4) | (head[20]! >> 4);
  const samples = (head[21]! & 0x0f) * 2 ** 32 + head.readUInt32BE(22);
  // 0 samples: the encoder did not know the length (a stream); ffmpeg judges it alone.
  return sampleRate > 0 && samples > 0
    ? { kind: 'ffmpeg', flac: { sampleRate, samples } }
    : { kind: 'ffmpeg' };
}

const MP3_RATES = [
  [11025, 12000, 8000], // MPEG 2.5
  null,
  [22050, 24000, 16000], // MPEG 2
  [44100, 48000, 32000], // MPEG 1
] as const;

function isMp3Frame(b: Buffer, at: number): boolean {
  if (at + 4 > b.length) return false;
  const h = b.readUInt32BE(at);
  const version = (h >>> 19) & 3;
  const layer = (h >>> 17) & 3;
  const bitrate = (h >>> 12) & 15;
  const rate = (h >>> 10) & 3;
  return (
    (h & 0xffe00000) >>> 0 === 0xffe00000 && version !== 1 && layer === 1 && bitrate !== 15 && rate !== 3
  );
}

function sniffMp3(head: Buffer, more: boolean): SniffResult {
  let at = 0;
  if (startsWith(head, 'ID3')) {
    if (head.length < 10) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
    const size =
      ((head[6]! & 0x7f) << 21) | ((head[7]! & 0x7f) << 14) | ((head[8]! & 0x7f) << 7) | (head[9]! & 0x7f);
    at = 10 + size + (head[5]! & 0x10 ? 10 : 0);
  }
  // The Xing/Info and LAME tags sit in the first frame, within ~200 bytes of its header.
  if (head.length < at + 200) return more ? { kind: 'more' } : { kind: 'ffmpeg' };
  if (!isMp3Frame(head, at)) return { kind: 'ffmpeg' };
  const mp3 = mp3GaplessInfo(head, at);
  return mp3 ? { kind: 'ffmpeg', mp3 } : { kind: 'ffmpeg' };
}

/** The gapless length from the Xing/Info and LAME tags of the frame at `at`, as ffmpeg reads it. */
export function mp3GaplessInfo(b: Buffer, at: number): Mp3Gapless | undefined {
  const h = b.readUInt32BE(at);
  const version = (h >>> 19) & 3;
  const mpeg1 = version === 3;
  const mono = ((h >>> 6) & 3) === 3;
  const sampleRate = MP3_RATES[version]![(h >>> 10) & 3]!;
  const samplesPerFrame = mpeg1 ? 1152 : 576;
  let p = at + 4 + (mpeg1 ? (mono ? 17 : 32) : mono ? 9 : 17);
  const tag = b.toString('latin1', p, p + 4);
  if (tag !== 'Xing' && tag !== 'Info') return undefined;
  const flags = b.readUInt32BE(p + 4);
  p += 8;
  if (!(flags & 1)) return undefined;
  const frames = b.readUInt32BE(p);
  p += 4;
  if (flags & 2) p += 4;
  if (flags & 4) p += 100;
  if (flags & 8) p += 4;
  if (p + 24 > b.length) return undefined;
  const encoder = b.toString('latin1', p, p + 4);
  if (encoder !== 'LAME' && encoder !== 'Lavf' && encoder !== 'Lavc') return undefined;
  const delays = b.readUIntBE(p + 21, 3);
  const startPad = delays >> 12;
  const endPad = delays & 0xfff;
  const samples = frames * samplesPerFrame - startPad - endPad;
  return samples > 0 ? { sampleRate, samples, endPadding: endPad } : undefined;
}

/**
 * Follows the top-level boxes of an ISO media file (MP4, M4A, MOV) without keeping them:
 * whether the input so far ends inside one. ffmpeg decodes an MP4 whose index comes first and
 * whose media data is cut without a word (the samples past the end are just missing).
 */
export class Mp4BoxWalker extends UnitWalker {
  constructor() {
    super(16);
  }

  /** 8 bytes (size, type), or 16 when the size is 64-bit (size field 1). */
  protected headNeed(have: number): number {
    return have >= 8 && this.head.readUInt32BE(0) === 1 ? 16 : 8;
  }

  /** The box's size less its header; a box to the end of the input (0), or malformed: no verdict. */
  protected bodyLength(have: number): number | undefined {
    const size32 = this.head.readUInt32BE(0);
    const size = size32 === 1 ? Number(this.head.readBigUInt64BE(8)) : size32;
    return size < have || !Number.isSafeInteger(size) ? undefined : size - have;
  }
}
