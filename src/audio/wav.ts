// Streaming WAV reader: bytes of a RIFF/WAVE file in, PCM16LE (interleaved, the file's rate and
// channels) out, for every format `parseWavHeader` accepts. A partial sample is carried across
// chunks; one left at the end is an error, never dropped.

import { ProtocolError } from '../protocol/errors.ts';
import { parseWavHeader, type WavInfo } from '../protocol/riff.ts';
import { bytesPerSample, int16ToBuffer, toPcm16 } from './pcm.ts';

export class WavReader {
  #info: WavInfo | null = null;
  #head: Buffer | null = Buffer.alloc(0);
  /** Sample bytes still expected per the header (undefined: until end of input). */
  #remaining: number | undefined;
  #carry: Buffer | null = null;
  #frameBytes = 0;

  /** The header, once parsed. */
  get info(): WavInfo | null {
    return this.#info;
  }

  /** Feed bytes; returns PCM16LE for the whole sample frames (all channels) they complete. */
  push(chunk: Uint8Array): Buffer {
    let data = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.#info === null) {
      const head = Buffer.concat([this.#head!, data]);
      const info = parseWavHeader(head);
      if (info === null) {
        this.#head = head;
        return Buffer.alloc(0);
      }
      this.#info = info;
      this.#head = null;
      this.#remaining = info.dataBytes;
      this.#frameBytes = bytesPerSample(info.format, info.bitsPerSample) * info.channels;
      data = head.subarray(info.dataOffset);
    }
    if (this.#remaining !== undefined) {
      // Bytes after the data chunk (LIST, id3 ...) are not samples.
      if (data.length > this.#remaining) data = data.subarray(0, this.#remaining);
      this.#remaining -= data.length;
    }
    if (this.#carry !== null) {
      data = Buffer.concat([this.#carry, data]);
      this.#carry = null;
    }
    const whole = data.length - (data.length % this.#frameBytes);
    if (whole < data.length) this.#carry = Buffer.from(data.subarray(whole));
    if (whole === 0) return Buffer.alloc(0);
    const info = this.#info;
    return int16ToBuffer(toPcm16(data.subarray(0, whole), info.format, info.bitsPerSample));
  }

  /**
   * End of input: throws if no header arrived, a partial sample frame is left, or the data
   * ended before the size its header declares (a cut file: its samples were passed on).
   */
  end(): void {
    if (this.#info === null)
      throw new ProtocolError('ERR_WAV_FORMAT', 'input ended before the WAV data chunk');
    if (this.#remaining !== undefined && this.#remaining > 0) {
      const declared = this.#info.dataBytes!;
      throw new ProtocolError(
        'ERR_WAV_FORMAT',
        `WAV data ends after ${declared - this.#remaining} of the ${declared} bytes its header declares (a cut file)`,
      );
    }
    if (this.#carry !== null) {
      throw new ProtocolError(
        'ERR_WAV_FORMAT',
        `WAV data ends with a partial sample frame (${this.#carry.length} of ${this.#frameBytes} bytes)`,
      );
    }
  }
}

export interface DecodedWav {
  info: WavInfo;
  /** PCM16LE, interleaved, at `info.sampleRate` with `info.channels`. */
  pcm: Buffer;
}

/** Decode a complete WAV file to PCM16LE. */
export function decodeWav(bytes: Uint8Array): DecodedWav {
  const reader = new WavReader();
  const pcm = reader.push(bytes);
  reader.end();
  return { info: reader.info!, pcm };
}
