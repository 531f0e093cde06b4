// Whole blocks (samples, sample frames) out of arbitrarily split bytes: the remainder of each
// chunk is carried to the next; a remainder left at the end is an error, never dropped.

import { MediaError } from './media-error.ts';

export class ByteAligner {
  readonly blockBytes: number;
  #carry: Buffer | null = null;

  constructor(blockBytes: number) {
    if (!Number.isInteger(blockBytes) || blockBytes < 1) throw new RangeError(`bad block size ${blockBytes}`);
    this.blockBytes = blockBytes;
  }

  /** Bytes carried from earlier chunks (less than one block). */
  get pending(): number {
    return this.#carry?.length ?? 0;
  }

  /** The whole blocks `chunk` completes (possibly empty); a view of `chunk` when nothing is carried. */
  push(chunk: Uint8Array): Buffer {
    let data = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.#carry) {
      data = Buffer.concat([this.#carry, data]);
      this.#carry = null;
    }
    const whole = data.length - (data.length % this.blockBytes);
    if (whole < data.length) this.#carry = Buffer.from(data.subarray(whole));
    return data.subarray(0, whole);
  }

  /** End of input: `MediaError` `ERR_MEDIA_TRUNCATED` if it stopped inside a block (`what`: the input's name). */
  end(what: string): void {
    const left = this.pending;
    if (left > 0) {
      throw new MediaError(
        'ERR_MEDIA_TRUNCATED',
        `${what} ends inside a sample frame (${left} of ${this.blockBytes} bytes)`,
      );
    }
  }
}
