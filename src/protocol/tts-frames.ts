// TTS service frames: the body of a TTS 200 is an undelimited sequence of
// [16-byte request UUID][final-flag byte][PCM16LE 16 kHz ...] with no length field, so frame
// boundaries are found by searching for the request UUID. This core splits it incrementally.

import { IncompleteStreamError, InvalidArgumentError, ProtocolError } from './errors.ts';
import type { OperationName } from './operations.ts';
import { bytesToUuid, idToBytes } from './uuid.ts';

/** Bytes before the PCM of a TTS service frame: 16 request UUID, 1 final flag (interface, TTS service frame). */
export const TTS_FRAME_HEADER_BYTES = 17;

/** One chunk of PCM out of `TtsDemuxer`. */
export interface TtsChunk {
  /** True only on the last chunk of a complete body: the final frame was seen and input ended. */
  final: boolean;
  /** Whole PCM16LE samples (even byte count), possibly empty on the final chunk. */
  pcm: Buffer;
}

/** One service frame; used by the emulator and tests to produce bodies. */
export function encodeTtsFrame(requestId: string | Uint8Array, final: boolean, pcm: Uint8Array): Buffer {
  const id = idToBytes(requestId);
  const out = Buffer.allocUnsafe(TTS_FRAME_HEADER_BYTES + pcm.length);
  out.set(id, 0);
  out[16] = final ? 1 : 0;
  out.set(pcm, TTS_FRAME_HEADER_BYTES);
  return out;
}

/** Options of `TtsDemuxer`. */
export interface TtsDemuxerOptions {
  /**
   * Reads smaller than this are staged and parsed together, and PCM that continues across
   * reads is gathered into chunks of about this size: fewer, larger chunks, at the cost of up
   * to this much delay (16384 bytes is 512 ms at 16 kHz) when the body arrives in small reads;
   * errors in staged bytes surface when their block is parsed, or at `end()`. 0 parses and
   * emits every read at once. Default 16384.
   */
  coalesceBytes?: number;
}

const DEFAULT_COALESCE_BYTES = 16384;
/** Service frames are the body of an HTTP TTS answer only (Socket.IO TTS carries plain PCM). */
const TTS_OPERATION: OperationName = 'tts.http';
const SLAB_BYTES = 256 * 1024;

/**
 * Incremental demuxer of a TTS frame stream for one request UUID. Feed it any read
 * boundaries; it emits whole PCM16 samples, carries a half sample across chunks and frames,
 * and ends with one `{ final: true }` chunk once input ends after the final frame. Errors:
 * `ProtocolError` (`ERR_TTS_FRAME`) for a body that does not start with the request's header,
 * a bad flag byte, a header after the final frame or a trailing half sample;
 * `IncompleteStreamError` when input ends before the final frame.
 *
 * PCM inside one read is passed on as views of the read; pieces that straddle reads are
 * copied into a small accumulator, which is also what re-aligns a sample split by a read.
 */
export class TtsDemuxer {
  readonly requestId: string;
  readonly #id: Buffer;
  readonly #first: number;
  readonly #coalesce: number;
  /** Bytes that may be (part of) a header; never more than a header. */
  #pending: Buffer | null = null;
  #frames = 0;
  #finalSeen = false;
  #ended = false;
  #offset = 0;
  #pcmBytes = 0;
  /** Accumulated PCM not yet emitted: slab[accStart, accStart + accLen), possibly odd. */
  #slab: Buffer = Buffer.allocUnsafeSlow(0);
  #accStart = 0;
  #accLen = 0;
  /** Small reads not yet parsed: stage[stageStart, stageStart + stageLen). */
  #stage: Buffer = Buffer.allocUnsafeSlow(0);
  #stageStart = 0;
  #stageLen = 0;
  /** Bytes of the opening header checked as they arrived. */
  #opening = 0;
  /** Segments shorter than this are gathered (0 while parsing staged blocks: views only). */
  #threshold = 0;

  constructor(requestId: string | Uint8Array, options: TtsDemuxerOptions = {}) {
    this.#id = idToBytes(requestId);
    this.#first = this.#id[0]!;
    this.requestId = bytesToUuid(this.#id);
    const coalesce = options.coalesceBytes ?? DEFAULT_COALESCE_BYTES;
    if (!Number.isSafeInteger(coalesce) || coalesce < 0 || coalesce > SLAB_BYTES / 4) {
      throw new InvalidArgumentError(`coalesceBytes must be an integer from 0 to ${SLAB_BYTES / 4}`);
    }
    this.#coalesce = coalesce;
  }

  /** Frame headers seen so far. */
  get frames(): number {
    return this.#frames;
  }

  /** Whether the final frame's header has been seen. */
  get finalSeen(): boolean {
    return this.#finalSeen;
  }

  /** PCM bytes emitted so far. */
  get pcmBytes(): number {
    return this.#pcmBytes;
  }

  /**
   * Feed a chunk; returns the chunks it completed (appended to `out`). On an error, `out`
   * already holds every whole sample before the failure, however the body was split.
   */
  push(chunk: Uint8Array, out: TtsChunk[] = []): TtsChunk[] {
    if (this.#ended) throw new ProtocolError('ERR_TTS_FRAME', 'push() after end()');
    const bytes =
      chunk instanceof Buffer ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    try {
      if (this.#opening < TTS_FRAME_HEADER_BYTES) this.#checkOpening(bytes);
      // Small reads are staged and parsed together: one search per block instead of per read,
      // and views of our own staging memory instead of a copy or a view per read. Errors in
      // staged bytes surface when their block is parsed (at most `coalesceBytes` later, or at end()).
      if (bytes.length < this.#coalesce) {
        this.#stageAppend(bytes);
        if (this.#stageLen >= this.#coalesce) this.#parse(this.#stageTake(), out, 0);
        return out;
      }
      if (this.#stageLen > 0) this.#parse(this.#stageTake(), out, 0);
      return this.#parse(bytes, out, this.#coalesce);
    } catch (err) {
      // PCM gathered for a later chunk would otherwise be lost, making the output before the
      // error depend on read boundaries.
      this.#flush(out);
      throw err;
    }
  }

  /** Validate the opening header byte by byte as it arrives, so a wrong body fails at once. */
  #checkOpening(bytes: Buffer): void {
    const n = Math.min(bytes.length, TTS_FRAME_HEADER_BYTES - this.#opening);
    for (let i = 0; i < n; i++, this.#opening++) {
      const byte = bytes[i]!;
      if (this.#opening < 16 && byte !== this.#id[this.#opening]) {
        throw new ProtocolError(
          'ERR_TTS_FRAME',
          `TTS body does not start with a frame header for request ${this.requestId}`,
          {
            offset: this.#opening,
          },
        );
      }
      if (this.#opening === 16 && byte > 1) {
        throw new ProtocolError('ERR_TTS_FRAME', `invalid final-flag byte ${byte} in frame 1`, {
          offset: 16,
        });
      }
    }
  }

  #stageAppend(bytes: Buffer): void {
    if (this.#stageStart + this.#stageLen + bytes.length > this.#stage.length) {
      const slab = Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, this.#stageLen + bytes.length));
      this.#stage.copy(slab, 0, this.#stageStart, this.#stageStart + this.#stageLen);
      this.#stage = slab;
      this.#stageStart = 0;
    }
    this.#stage.set(bytes, this.#stageStart + this.#stageLen);
    this.#stageLen += bytes.length;
  }

  /** The staged bytes as one block; staging continues after it (emitted views point into it). */
  #stageTake(): Buffer {
    const block = this.#stage.subarray(this.#stageStart, this.#stageStart + this.#stageLen);
    this.#stageStart = (this.#stageStart + this.#stageLen + 7) & ~7;
    this.#stageLen = 0;
    return block;
  }

  #parse(chunk: Buffer, out: TtsChunk[], threshold: number): TtsChunk[] {
    this.#threshold = threshold;
    let data = chunk;
    let base = this.#offset;
    if (this.#pending !== null) {
      base -= this.#pending.length;
      data = Buffer.concat([this.#pending, data]);
      this.#pending = null;
    }
    this.#offset += chunk.length;
    const id = this.#id;
    const len = data.length;
    let pos = 0;
    while (pos < len) {
      if (this.#frames === 0) {
        // The body must open with this request's header.
        const have = Math.min(len - pos, TTS_FRAME_HEADER_BYTES);
        const idBytes = Math.min(have, 16);
        if (data.compare(id, 0, idBytes, pos, pos + idBytes) !== 0) {
          throw new ProtocolError(
            'ERR_TTS_FRAME',
            `TTS body does not start with a frame header for request ${this.requestId}`,
            { offset: base + pos },
          );
        }
        if (have < TTS_FRAME_HEADER_BYTES) {
          this.#pending = Buffer.from(data.subarray(pos));
          return out;
        }
        this.#header(data, pos, base);
        pos += TTS_FRAME_HEADER_BYTES;
        continue;
      }
      const next = data.indexOf(id, pos);
      if (next === -1) {
        const hold = partialHeaderStart(data, pos, id, this.#first);
        this.#segment(data, pos, hold, false, out);
        if (hold < len) this.#pending = Buffer.from(data.subarray(hold));
        return out;
      }
      if (this.#finalSeen) {
        // The final frame's PCM up to the extra header is passed on, as when it came in an
        // earlier read.
        this.#segment(data, pos, next, true, out);
        throw new ProtocolError('ERR_TTS_FRAME', `data after the final frame of request ${this.requestId}`, {
          offset: base + next,
        });
      }
      if (next + TTS_FRAME_HEADER_BYTES > len) {
        this.#segment(data, pos, next, false, out);
        this.#pending = Buffer.from(data.subarray(next));
        return out;
      }
      this.#segment(data, pos, next, true, out);
      this.#header(data, next, base);
      pos = next + TTS_FRAME_HEADER_BYTES;
    }
    return out;
  }

  /** End of input. Emits the closing `{ final: true }` chunk, or throws if the body is incomplete. */
  end(out: TtsChunk[] = []): TtsChunk[] {
    if (this.#ended) return out;
    this.#ended = true;
    try {
      if (this.#stageLen > 0) this.#parse(this.#stageTake(), out, 0);
    } catch (err) {
      this.#flush(out);
      throw err;
    }
    const pending = this.#pending;
    this.#pending = null;
    if (!this.#finalSeen) {
      // What arrived is passed on (bytes that may be a header cut short are not PCM).
      this.#flush(out);
      throw new IncompleteStreamError(
        `TTS body for request ${this.requestId} ended without its final frame (${this.#frames} frames, ${this.#pcmBytes} PCM bytes)`,
        { operation: TTS_OPERATION, id: this.requestId, received: this.#frames },
      );
    }
    // Held-back bytes that never became a header are PCM of the final frame.
    if (pending !== null) this.#append(pending, 0, pending.length);
    if (this.#accLen % 2 !== 0) {
      this.#flush(out);
      throw new ProtocolError('ERR_TTS_FRAME', 'TTS body ends with half a PCM16 sample', {
        offset: this.#offset - 1,
      });
    }
    const tail = this.#slab.subarray(this.#accStart, this.#accStart + this.#accLen);
    this.#accLen = 0;
    this.#pcmBytes += tail.length;
    out.push({ final: true, pcm: tail });
    return out;
  }

  #header(data: Buffer, at: number, base: number): void {
    const flag = data[at + 16]!;
    if (flag > 1) {
      throw new ProtocolError(
        'ERR_TTS_FRAME',
        `invalid final-flag byte ${flag} in frame ${this.#frames + 1}`,
        {
          offset: base + at + 16,
        },
      );
    }
    this.#frames++;
    if (flag === 1) this.#finalSeen = true;
  }

  /**
   * PCM data[start, end) of the current frame. `frameEnds` when a header follows it in this
   * read; otherwise the frame continues into the next read.
   */
  #segment(data: Buffer, start: number, end: number, frameEnds: boolean, out: TtsChunk[]): void {
    const length = end - start;
    if (length === 0) return;
    if (this.#accLen === 0) {
      if (frameEnds || length >= this.#threshold) {
        this.#direct(data, start, end, out);
        return;
      }
      this.#append(data, start, end);
      return;
    }
    if (this.#accLen + length <= this.#threshold) {
      this.#append(data, start, end);
      if (frameEnds || this.#accLen === this.#threshold) this.#flush(out);
      return;
    }
    // A long segment: complete the half sample (if any) from it, flush, pass the rest on as is.
    const take = this.#accLen % 2;
    this.#append(data, start, start + take);
    this.#flush(out);
    this.#direct(data, start + take, end, out);
  }

  /** Emit whole samples of data[start, end) as a view; an odd last byte goes to the accumulator. */
  #direct(data: Buffer, start: number, end: number, out: TtsChunk[]): void {
    if ((end - start) % 2 !== 0) {
      end--;
      this.#append(data, end, end + 1);
    }
    if (end === start) return;
    this.#pcmBytes += end - start;
    // A read that is all PCM is passed on as is: no new view to construct.
    out.push({ final: false, pcm: start === 0 && end === data.length ? data : data.subarray(start, end) });
  }

  #append(data: Buffer, start: number, end: number): void {
    const n = end - start;
    if (n === 0) return;
    if (this.#accStart + this.#accLen + n > this.#slab.length) {
      const slab = Buffer.allocUnsafeSlow(Math.max(SLAB_BYTES, this.#accLen + n));
      this.#slab.copy(slab, 0, this.#accStart, this.#accStart + this.#accLen);
      this.#slab = slab;
      this.#accStart = 0;
    }
    const at = this.#accStart + this.#accLen;
    if (start === 0 && end === data.length) this.#slab.set(data, at);
    else if (n === 1) this.#slab[at] = data[start]!;
    else this.#slab.set(new Uint8Array(data.buffer, data.byteOffset + start, n), at);
    this.#accLen += n;
  }

  /** Emit the accumulator's whole samples; keep a half sample. */
  #flush(out: TtsChunk[]): void {
    const even = this.#accLen & ~1;
    if (even === 0) return;
    const pcm = this.#slab.subarray(this.#accStart, this.#accStart + even);
    const odd = this.#accLen - even;
    const last = odd ? this.#slab[this.#accStart + even]! : 0;
    // Keep slices 8-byte aligned so consumers can view them as Int16Array.
    this.#accStart = (this.#accStart + even + 7) & ~7;
    this.#accLen = 0;
    if (odd) {
      if (this.#accStart >= this.#slab.length) {
        this.#slab = Buffer.allocUnsafeSlow(SLAB_BYTES);
        this.#accStart = 0;
      }
      this.#slab[this.#accStart] = last;
      this.#accLen = 1;
    }
    this.#pcmBytes += even;
    out.push({ final: false, pcm });
  }
}

/**
 * The first index in [from, len) from which the rest of `data` is a proper prefix of `id`, or
 * `len`. Only the last 16 bytes can start a header that has not fully arrived.
 */
function partialHeaderStart(data: Buffer, from: number, id: Buffer, first: number): number {
  const len = data.length;
  for (let i = Math.max(from, len - 16); i < len; i++) {
    if (data[i] === first && data.compare(id, 0, len - i, i, len) === 0) return i;
  }
  return len;
}
