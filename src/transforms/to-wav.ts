// toWav(): PCM16LE in, a WAV file's bytes out, with a streaming header (sizes 0xFFFFFFFF) since
// the length is not known up front. For a seekable file, `wavFile()` patches the real sizes.

import type { Transform } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { checkPcmFormat, type PcmFormat } from '../audio/resampler.ts';
import { writeWavHeader } from '../protocol/riff.ts';
import { LIVE_SAMPLE_RATE } from '../protocol/socket-events.ts';
import { coreTransform } from './core-transform.ts';

/** The format of the PCM16LE written as WAV. */
export interface WavFormatOptions {
  /** Hz. Default 16000. */
  sampleRate?: number;
  /** Interleaved channels. Default 1. */
  channels?: number;
}

/** Largest data size a RIFF header can state; beyond it the streaming sizes stay. */
const MAX_RIFF_DATA = 0xffffffff - 36;

/**
 * Pure core of a WAV writer (for `toWav()` and the `wavFile()` sink): the streaming header, then
 * the whole sample frames of the PCM; `end` fails if the PCM stopped inside a frame.
 */
export class WavEncoder {
  readonly format: PcmFormat;
  readonly #frames: ByteAligner;
  #dataBytes = 0;

  /** `name` goes into the error for bad options. */
  constructor(options: WavFormatOptions = {}, name = 'WavEncoder') {
    this.format = checkPcmFormat(name, {
      sampleRate: options.sampleRate ?? LIVE_SAMPLE_RATE,
      channels: options.channels ?? 1,
    });
    this.#frames = new ByteAligner(2 * this.format.channels);
  }

  /** Sample bytes passed so far. */
  get dataBytes(): number {
    return this.#dataBytes;
  }

  /** The 44-byte header with sizes 0xFFFFFFFF ("to the end of the file"). */
  header(): Buffer {
    return writeWavHeader(this.format);
  }

  /** The whole sample frames `chunk` completes (possibly none). */
  push(chunk: Uint8Array): Buffer {
    const whole = this.#frames.push(chunk);
    this.#dataBytes += whole.length;
    return whole;
  }

  /** End of the PCM: `MediaError` `ERR_MEDIA_TRUNCATED` if it stopped inside a sample frame. */
  end(): void {
    this.#frames.end('PCM16 input');
  }

  /**
   * The real RIFF and data sizes for the samples passed, to write over the header's at their
   * offsets (a seekable file); none past what a RIFF header can state (the streaming sizes stay).
   */
  sizePatches(): Array<{ offset: number; bytes: Buffer }> {
    if (this.#dataBytes > MAX_RIFF_DATA) return [];
    const size = (n: number) => {
      const b = Buffer.alloc(4);
      b.writeUInt32LE(n, 0);
      return b;
    };
    return [
      { offset: 4, bytes: size(36 + this.#dataBytes) },
      { offset: 40, bytes: size(this.#dataBytes) },
    ];
  }
}

/**
 * A Transform from PCM16LE to a WAV byte stream: a 44-byte header with sizes 0xFFFFFFFF (read
 * as "to the end of the file" by ffmpeg, sox and `parseWavHeader`), then the samples. PCM that
 * ends inside a sample frame fails with `MediaError` (`ERR_MEDIA_TRUNCATED`).
 */
export function toWav(options: WavFormatOptions = {}): Transform {
  const encoder = new WavEncoder(options, 'toWav');
  let headerSent = false;
  const header = (): Buffer[] => {
    if (headerSent) return [];
    headerSent = true;
    return [encoder.header()];
  };
  return coreTransform<Buffer, Buffer>({
    push: (chunk) => {
      const whole = encoder.push(chunk);
      return whole.length > 0 ? [...header(), whole] : header();
    },
    end: () => {
      const out = header();
      encoder.end();
      return out;
    },
  });
}
