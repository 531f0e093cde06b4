// Opus packets (from the Ogg or WebM demuxer) to PCM16 at 48 kHz with @discordjs/opus, trimmed
// as the container says: pre-skip (or codec delay) at the start, the final granule position or
// DiscardPadding at the end, with the header's output gain. Mono and stereo of channel mapping
// family 0; anything else (surround, multistream) goes to ffmpeg.

import { createRequire } from 'node:module';
import { MediaError } from './media-error.ts';
import type { OpusDemuxItem, OpusHead } from './ogg-opus.ts';

export const OPUS_SAMPLE_RATE = 48_000;

interface NativeOpusDecoder {
  decode(packet: Buffer): Buffer;
}
type NativeOpusCtor = new (rate: number, channels: number) => NativeOpusDecoder;

/** Loads @discordjs/opus (an optional dependency with a native build). */
export type NativeOpusLoader = () => { OpusEncoder?: NativeOpusCtor };

const requireNativeOpus: NativeOpusLoader = () =>
  createRequire(import.meta.url)('@discordjs/opus') as { OpusEncoder?: NativeOpusCtor };

/** The code of the process warning emitted the first time Opus goes to ffmpeg instead. */
export const OPUS_FALLBACK_WARNING = 'SPEECHPIPE_OPUS_FFMPEG';

let loader: NativeOpusLoader = requireNativeOpus;
let native: NativeOpusCtor | null | undefined;
let loadError: unknown;
let warned = false;

/**
 * Tests: load the native decoder with `next` (the real `require` when omitted), forgetting what
 * was loaded and whether the fallback warning was given.
 */
export function setNativeOpusLoader(next?: NativeOpusLoader): void {
  loader = next ?? requireNativeOpus;
  native = undefined;
  loadError = undefined;
  warned = false;
}

/** The @discordjs/opus decoder class, or null when the native module cannot load here. */
export function loadNativeOpus(): NativeOpusCtor | null {
  if (native === undefined) {
    try {
      native = loader().OpusEncoder ?? null;
      if (!native) loadError = new Error('@discordjs/opus has no OpusEncoder');
    } catch (err) {
      // Not installed (an optional dependency), no prebuilt binary, or built for another Node ABI.
      native = null;
      loadError = err;
    }
  }
  return native;
}

/**
 * Whether this process can decode an Opus stream with this head natively. When it could but
 * the native module cannot load, the stream goes to ffmpeg, and the first time that happens
 * the process gets a warning (once: a job decoding thousands of files should not repeat it).
 */
export function canDecodeOpusNatively(head: OpusHead): boolean {
  if (head.channels > 2 || head.mappingFamily !== 0) return false;
  if (loadNativeOpus() !== null) return true;
  if (!warned) {
    warned = true;
    const reason = loadError instanceof Error ? loadError.message.split('\n')[0] : String(loadError);
    process.emitWarning(`Opus is decoded by ffmpeg: @discordjs/opus cannot load here (${reason})`, {
      type: 'SpeechpipeWarning',
      code: OPUS_FALLBACK_WARNING,
      detail:
        'Install the optional dependency @discordjs/opus (it builds natively) to decode Ogg and WebM Opus in-process.',
    });
  }
  return false;
}

export class OpusPacketDecoder {
  #decoder: NativeOpusDecoder | undefined;
  #channels = 0;
  /** Frames still to drop from the start of the current stream. */
  #skip = 0;
  /** Frames produced (after pre-skip) in the current stream, and its pre-skip. */
  #produced = 0;
  #preSkip = 0;
  /** Linear output gain (1 unless the head says otherwise). */
  #gain = 1;
  /** Output of the last packet, held one item back: a `discard` item may trim its end. */
  #held: Int16Array | null = null;

  /** Channels of the stream being decoded (0 before the first head). */
  get channels(): number {
    return this.#channels;
  }

  /** Decode demuxer items; returns PCM16 interleaved at 48 kHz. */
  push(items: readonly OpusDemuxItem[]): Int16Array[] {
    const out: Int16Array[] = [];
    for (const item of items) {
      if (item.kind === 'head') {
        this.#release(out);
        this.#start(item.head);
      } else if (item.kind === 'discard') {
        if (this.#held) {
          const keep = Math.max(0, this.#held.length / this.#channels - item.samples);
          this.#produced -= this.#held.length / this.#channels - keep;
          this.#held = this.#held.subarray(0, keep * this.#channels);
        }
      } else {
        this.#release(out);
        this.#held = this.#decode(item.data, item.endGranule);
      }
    }
    return out;
  }

  /** End of input: the held-back output. */
  end(): Int16Array[] {
    const out: Int16Array[] = [];
    this.#release(out);
    return out;
  }

  #release(out: Int16Array[]): void {
    if (this.#held && this.#held.length > 0) out.push(this.#held);
    this.#held = null;
  }

  #start(head: OpusHead): void {
    const Ctor = loadNativeOpus();
    if (!Ctor)
      throw new MediaError('ERR_MEDIA_FORMAT', 'the Opus decoder (@discordjs/opus) cannot load here');
    if (!canDecodeOpusNatively(head)) {
      throw new MediaError(
        'ERR_MEDIA_FORMAT',
        `Opus with ${head.channels} channels (family ${head.mappingFamily})`,
      );
    }
    if (this.#channels !== 0 && head.channels !== this.#channels) {
      throw new MediaError('ERR_MEDIA_FORMAT', 'a chained Opus stream changes the channel count');
    }
    this.#decoder = new Ctor(OPUS_SAMPLE_RATE, head.channels);
    this.#channels = head.channels;
    this.#skip = head.preSkip;
    this.#preSkip = head.preSkip;
    this.#produced = 0;
    this.#gain = 10 ** (head.outputGain / 256 / 20);
  }

  #decode(packet: Buffer, endGranule: number | undefined): Int16Array {
    if (!this.#decoder) throw new MediaError('ERR_MEDIA_FORMAT', 'Opus packet before the OpusHead');
    let pcm: Buffer;
    try {
      pcm = this.#decoder.decode(packet);
    } catch (err) {
      throw new MediaError('ERR_MEDIA_FORMAT', `corrupt Opus packet (${(err as Error).message})`, {
        cause: err,
      });
    }
    const ch = this.#channels;
    let samples = new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length >> 1);
    if (pcm.byteOffset % 2 !== 0) samples = new Int16Array(Buffer.from(pcm).buffer, 0, pcm.length >> 1);
    let frames = samples.length / ch;
    if (this.#skip > 0) {
      const drop = Math.min(this.#skip, frames);
      this.#skip -= drop;
      samples = samples.subarray(drop * ch);
      frames -= drop;
    }
    if (endGranule !== undefined) {
      // The page's granule position is where this packet's audio ends: trim what lies past it
      // (only the last page of a stream ends short of its packets).
      const allowed = endGranule - this.#preSkip - this.#produced;
      if (allowed >= 0 && allowed < frames) {
        samples = samples.subarray(0, allowed * ch);
        frames = allowed;
      }
    }
    this.#produced += frames;
    // A copy: the native decoder's buffer is not ours to keep.
    const out = samples.slice();
    if (this.#gain !== 1) {
      for (let i = 0; i < out.length; i++) {
        const v = Math.round(out[i]! * this.#gain);
        out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
      }
    }
    return out;
  }
}
