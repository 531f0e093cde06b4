// Live audio for captioning: what ffmpeg can open (a stream URL, a capture device, a file played
// at its own pace), or bytes on standard input, as PCM16LE at 16 kHz mono by default.

import { pipeline, type Readable } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { TypedStream } from '../protocol/typed-stream.ts';
import { type DecodeEvents, decode, type RawInputFormat } from '../transforms/decode.ts';
import { ffmpegInput } from '../transforms/ffmpeg-pcm.ts';

/** Options of {@link liveInput}. */
export interface LiveInputOptions {
  /** Read the input at its own rate (a file played as if it were a broadcast). Default false. */
  realtime?: boolean;
  /** ffmpeg options before `-i`, e.g. `['-f', 'pulse']` for a capture device. */
  inputArgs?: readonly string[];
  /** Output rate. Default 16000. */
  sampleRate?: number;
  /** Where standard input comes from for `'-'` (default `process.stdin`). */
  stdin?: Readable;
  /** Standard input (`'-'`) is headerless PCM of this format, not sniffed. */
  stdinFormat?: RawInputFormat;
  /** An ffmpeg binary; otherwise `FFMPEG_PATH`, ffmpeg-static, then the PATH. */
  ffmpegPath?: string;
  /** Stops ffmpeg and destroys the stream. */
  signal?: AbortSignal;
}

/** The events of a `liveInput()` stream besides Node's, with their arguments. */
export interface LiveInputEvents {
  /** ffmpeg skipped input it could not decode. */
  warning: DecodeEvents['warning'];
}

/** What `liveInput()` returns: a Readable of PCM16LE mono typed by `LiveInputEvents`. */
export type LiveInputStream = TypedStream<Readable, LiveInputEvents>;

/**
 * PCM16LE mono from `input`: `'-'` decodes standard input (any format `decode()` reads, packets
 * passed on as they come); anything else is opened by ffmpeg. The stream emits `'warning'` when
 * ffmpeg skipped input it could not decode, and stops ffmpeg when destroyed or aborted.
 */
export function liveInput(input: string, options: LiveInputOptions = {}): LiveInputStream {
  const sampleRate = options.sampleRate ?? 16_000;
  if (input === '-') {
    // decode() sniffs what comes (a streaming WAV header, Ogg, MP3, ...); it takes no device
    // format, and a pipe is live already.
    if (options.inputArgs?.length || options.realtime) {
      throw new InvalidArgumentError(
        "liveInput: inputArgs and realtime are for what ffmpeg opens, not for standard input ('-')",
      );
    }
    const decoder = decode({
      sampleRate,
      ...(options.stdinFormat ? { input: options.stdinFormat } : {}),
      lowLatency: true,
      ffmpegPath: options.ffmpegPath,
      signal: options.signal,
    });
    pipeline(options.stdin ?? process.stdin, decoder, () => {});
    return decoder as unknown as LiveInputStream;
  }
  const stream: Readable = ffmpegInput({
    input,
    inputArgs: options.inputArgs,
    realtime: options.realtime,
    sampleRate,
    channels: 1,
    ffmpegPath: options.ffmpegPath,
    signal: options.signal,
    onDecodeErrors: (err) => stream.emit('warning', err),
  });
  return stream as LiveInputStream;
}
