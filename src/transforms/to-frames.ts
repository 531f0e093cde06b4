// toFrames(): PCM16LE 16 kHz mono bytes in, frames of live audio out (one `AudioFrame` object
// each), the last marked final. Nothing here is encoded: the live session encodes each frame
// once, on the wire, with its own stream id and flags, and sttStream joins frames to the size
// its transport wants.

import type { Transform } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { FRAME_HEADER_BYTES } from '../protocol/frame.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import { DEFAULT_LIMITS } from '../protocol/limits.ts';
import { LIVE_SAMPLE_RATE } from '../protocol/socket-events.ts';
import { coreTransform } from './core-transform.ts';

/**
 * Default audio per frame: fine enough for the lowest latency a transport gives (a Socket.IO
 * frame is an event); sttStream joins frames for HTTP, where each is a POST.
 */
export const DEFAULT_FRAME_MS = 100;

/** A frame of live audio on its way to the service (what `toFrames()` makes, `sttStream()` takes). */
export interface AudioFrame {
  /** PCM16LE, 16 kHz, mono: nonempty, whole samples. */
  pcm: Buffer;
  /** The language of the audio (the frame's language byte on the wire). */
  language: Language;
  /** The last audio of the stream: the frame that carries it is sent with is_final. */
  isFinal: boolean;
}

/** Options of {@link toFrames}. */
export interface ToFramesOptions {
  /** The language of every frame. Default `'auto'`. */
  language?: Language;
  /** Milliseconds of audio per frame (the last may be shorter). Default 100. */
  frameMs?: number;
  /** Most PCM a frame may carry with its header, bytes. Default: the realtime ASR frame limit (16 MiB). */
  maxFrameBytes?: number;
}

/** The Transform `toFrames()` returns: it says which language and frame size it uses. */
export interface FramesTransform extends Transform {
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

/** Options toFrames() once took: now decided where the frames go on the wire. */
const REMOVED_OPTIONS = {
  transport: 'sttStream joins frames to the size its transport wants',
  streamId: 'each live session has its own stream id, fresh after a restart (sttStream().sessionId)',
} as const;

/** The language and frame size `options` give, checked. */
function frameSpec(options: ToFramesOptions, caller: string): { language: Language; frameBytes: number } {
  for (const [name, why] of Object.entries(REMOVED_OPTIONS)) {
    if ((options as Record<string, unknown>)[name] !== undefined)
      throw new InvalidArgumentError(`${caller}: ${name} is not an option: ${why}`);
  }
  const language = options.language ?? 'auto';
  if (!isLanguage(language))
    throw new InvalidArgumentError(`${caller}: unknown language ${JSON.stringify(language)}`);
  const frameMs = options.frameMs ?? DEFAULT_FRAME_MS;
  const frameBytes = Math.round((frameMs * LIVE_SAMPLE_RATE) / 1000) * 2;
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_LIMITS.realtimeAsrFrameBytes;
  if (!(frameBytes >= 2) || frameBytes + FRAME_HEADER_BYTES > maxFrameBytes) {
    throw new InvalidArgumentError(
      `${caller}: frameMs ${frameMs} gives frames outside 1 sample .. ${maxFrameBytes} bytes`,
    );
  }
  return { language, frameBytes };
}

/**
 * A Transform from PCM16LE 16 kHz mono bytes to frames of live audio (object mode, one
 * {@link AudioFrame} per frame), for `sttStream()` and `diarizationStream()`. No frame is empty;
 * an input with no audio yields no frames.
 */
export function toFrames(options: ToFramesOptions = {}): FramesTransform {
  const { language, frameBytes } = frameSpec(options, 'toFrames');
  const cutter = new FrameCutter(frameBytes);
  const stream = coreTransform<Buffer, AudioFrame>(
    {
      push: (chunk) => audioFrames(cutter.push(chunk), language),
      end: () => audioFrames(cutter.end(), language),
    },
    { readableObjectMode: true },
  );
  Object.defineProperties(stream, {
    language: { value: language, enumerable: true },
    frameBytes: { value: frameBytes, enumerable: true },
  });
  return stream as FramesTransform;
}

/**
 * The frames `toFrames(options)` makes of all of `pcm` at once (the last marked final), for
 * audio already in memory (its frames may share `pcm`'s memory).
 */
export function cutFrames(pcm: Uint8Array, options: ToFramesOptions = {}): AudioFrame[] {
  const { language, frameBytes } = frameSpec(options, 'cutFrames');
  const cutter = new FrameCutter(frameBytes);
  return audioFrames([...cutter.push(pcm), ...cutter.end()], language);
}

/** What a FrameCutter cut, as the frames sttStream takes. */
function audioFrames(cut: ReturnType<FrameCutter['end']>, language: Language): AudioFrame[] {
  return cut.map((f) => ({ pcm: f.pcm, language, isFinal: f.isFinal }));
}

/** Whether `value` is an {@link AudioFrame} (what sttStream takes). */
export function isAudioFrame(value: unknown): value is AudioFrame {
  const f = value as Partial<AudioFrame> | null;
  return (
    typeof f === 'object' &&
    f !== null &&
    Buffer.isBuffer(f.pcm) &&
    f.pcm.length > 0 &&
    f.pcm.length % 2 === 0 &&
    isLanguage(f.language as string) &&
    typeof f.isFinal === 'boolean'
  );
}
