// toFrames(): PCM16LE 16 kHz mono bytes in, encoded live input frames out (one Buffer per
// object), with is_start on the first and is_final on the last frame that carries audio.

import type { Transform } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { encodeFrame } from '../protocol/frame.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import { DEFAULT_LIMITS } from '../protocol/limits.ts';
import { LIVE_SAMPLE_RATE } from '../protocol/socket-events.ts';
import { idToBytes, idToString, randomUuid } from '../protocol/uuid.ts';
import { coreTransform } from './core-transform.ts';

/** Default frame length per transport: each HTTP frame is a POST, a Socket.IO frame is an event. */
export const DEFAULT_FRAME_MS = { http: 1000, socketio: 100 } as const;

/** Options of {@link toFrames}. */
export interface ToFramesOptions {
  /** Language byte of every frame. Default `'auto'`. */
  language?: Language;
  /** Milliseconds of audio per frame (the last may be shorter). Default by `transport`. */
  frameMs?: number;
  /**
   * Picks the default `frameMs`: `'http'` (default, as for `sttStream` and the client) 1000 ms,
   * `'socketio'` 100 ms.
   */
  transport?: 'http' | 'socketio';
  /** The stream UUID (string or 16 bytes). Default: a fresh random UUID. */
  streamId?: string | Uint8Array;
  /** Frame body limit, bytes. Default: the realtime ASR frame limit (16 MiB). */
  maxFrameBytes?: number;
}

/** The Transform `toFrames()` returns: it says which stream id and frame size it uses. */
export interface FramesTransform extends Transform {
  readonly streamId: string;
  readonly language: Language;
  readonly frameBytes: number;
}

/**
 * Pure core: PCM bytes in, frame payloads out. Holds one full frame back so the last frame that
 * carries audio can be marked final; carries an odd byte to the next chunk.
 */
export class FrameCutter {
  readonly frameBytes: number;
  /** Carries an odd byte to the next chunk: `#pending` holds whole samples. */
  readonly #samples = new ByteAligner(2);
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  #held: Buffer | null = null;
  #first = true;

  constructor(frameBytes: number) {
    if (!Number.isInteger(frameBytes) || frameBytes < 2 || frameBytes % 2 !== 0) {
      throw new RangeError(`frame size must be a positive even number of bytes, got ${frameBytes}`);
    }
    this.frameBytes = frameBytes;
  }

  /** Feed PCM bytes; returns the frames that are now known not to be the last. */
  push(chunk: Uint8Array): Array<{ pcm: Buffer; isStart: boolean; isFinal: boolean }> {
    const whole = this.#samples.push(chunk);
    if (whole.length > 0) {
      this.#pending.push(whole);
      this.#pendingBytes += whole.length;
    }
    const out: Array<{ pcm: Buffer; isStart: boolean; isFinal: boolean }> = [];
    // The held frame goes out (not final) only once a sample follows it.
    while (true) {
      if (this.#held && this.#pendingBytes >= 2) {
        out.push(this.#emit(this.#held, false));
        this.#held = null;
      } else if (!this.#held && this.#pendingBytes >= this.frameBytes) {
        this.#held = this.#take(this.frameBytes);
      } else break;
    }
    return out;
  }

  /** End of input: the last frame(s); an odd byte left over is an error. */
  end(): Array<{ pcm: Buffer; isStart: boolean; isFinal: boolean }> {
    this.#samples.end('PCM16 input');
    const out: Array<{ pcm: Buffer; isStart: boolean; isFinal: boolean }> = [];
    const rest = this.#pendingBytes > 0 ? this.#take(this.#pendingBytes) : null;
    if (this.#held) out.push(this.#emit(this.#held, rest === null));
    if (rest) out.push(this.#emit(rest, true));
    this.#held = null;
    return out;
  }

  #emit(pcm: Buffer, isFinal: boolean) {
    const isStart = this.#first;
    this.#first = false;
    return { pcm, isStart, isFinal };
  }

  #take(n: number): Buffer {
    const all = this.#pending.length === 1 ? this.#pending[0]! : Buffer.concat(this.#pending);
    const frame = all.subarray(0, n);
    const rest = all.subarray(n);
    this.#pending = rest.length > 0 ? [rest] : [];
    this.#pendingBytes = rest.length;
    return frame;
  }
}

/**
 * A Transform from PCM16LE 16 kHz mono bytes to live input frames (object mode, one encoded
 * `Buffer` per frame). No frame is empty; an input with no audio yields no frames. The stream
 * id is on the returned stream (`.streamId`).
 */
export function toFrames(options: ToFramesOptions = {}): FramesTransform {
  const language = options.language ?? 'auto';
  if (!isLanguage(language))
    throw new InvalidArgumentError(`toFrames: unknown language ${JSON.stringify(language)}`);
  const frameMs = options.frameMs ?? DEFAULT_FRAME_MS[options.transport ?? 'http'];
  const frameBytes = Math.round((frameMs * LIVE_SAMPLE_RATE) / 1000) * 2;
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_LIMITS.realtimeAsrFrameBytes;
  if (!(frameBytes >= 2) || frameBytes + 18 > maxFrameBytes) {
    throw new InvalidArgumentError(
      `toFrames: frameMs ${frameMs} gives frames outside 1 sample .. ${maxFrameBytes} bytes`,
    );
  }
  const streamIdBytes = idToBytes(options.streamId ?? randomUuid());
  const streamId = idToString(streamIdBytes);
  const cutter = new FrameCutter(frameBytes);
  const encode = (frames: ReturnType<FrameCutter['end']>) =>
    frames.map((f) => encodeFrame({ streamId: streamIdBytes, language, ...f }));
  const stream = coreTransform<Buffer, Buffer>(
    { push: (chunk) => encode(cutter.push(chunk)), end: () => encode(cutter.end()) },
    { readableObjectMode: true },
  );
  Object.defineProperties(stream, {
    streamId: { value: streamId, enumerable: true },
    language: { value: language, enumerable: true },
    frameBytes: { value: frameBytes, enumerable: true },
  });
  return stream as FramesTransform;
}
