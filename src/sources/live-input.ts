// Live audio for captioning: what ffmpeg can open (a stream URL, a capture device, a file played
// at its own pace), or bytes on standard input, as PCM16LE at 16 kHz mono by default.

import { pipeline, type Readable } from 'node:stream';
import { FfmpegError } from '../audio/ffmpeg.ts';
import type { MediaError } from '../audio/media-error.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { TypedStream } from '../protocol/typed-stream.ts';
import { type DecodeEvents, decode, type RawInputFormat } from '../transforms/decode.ts';
import { ffmpegInput } from '../transforms/ffmpeg-pcm.ts';

/** Default of `LiveInputOptions.ioTimeoutMs`. */
const DEFAULT_IO_TIMEOUT_MS = 30_000;

/** A URL ffmpeg opens with a protocol of its own (not a file, device or lavfi graph). */
export const NETWORK_URL = /^(?!file:)[a-z][a-z0-9+.-]*:\/\//i;

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
  /**
   * A network URL (`http://`, `https://`, `tcp://`, `rtmp://` ...): milliseconds a connection,
   * a request or a read may wait for bytes before the stream fails with `FfmpegError` (ffmpeg's
   * `-rw_timeout`; a source that stops sending is gone for good). `0`: wait for ever. Default
   * 30000. RTSP and UDP take ffmpeg's own `-timeout` in `inputArgs` instead.
   */
  ioTimeoutMs?: number;
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
  if (!(Number.isSafeInteger(sampleRate) && sampleRate > 0))
    throw new InvalidArgumentError(
      `liveInput: sampleRate must be a positive integer (Hz), got ${sampleRate}`,
    );
  const ioTimeoutMs = options.ioTimeoutMs ?? DEFAULT_IO_TIMEOUT_MS;
  if (!(typeof ioTimeoutMs === 'number' && ioTimeoutMs >= 0 && Number.isFinite(ioTimeoutMs))) {
    throw new InvalidArgumentError(
      `liveInput: ioTimeoutMs must be a finite number of ms >= 0, got ${ioTimeoutMs}`,
    );
  }
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
  // Without a bound ffmpeg waits for ever on a server that accepts and never answers, or stops
  // sending: no audio, no end, no error. Given first, so that `inputArgs` can override it.
  const timeout =
    ioTimeoutMs > 0 && NETWORK_URL.test(input) ? ['-rw_timeout', String(Math.round(ioTimeoutMs * 1000))] : [];
  const stream: Readable = ffmpegInput({
    input,
    inputArgs: [...timeout, ...(options.inputArgs ?? [])],
    realtime: options.realtime,
    sampleRate,
    channels: 1,
    ffmpegPath: options.ffmpegPath,
    signal: options.signal,
    onDecodeErrors: (err) => {
      const failure = readFailure(input, err);
      if (failure) stream.destroy(failure);
      else stream.emit('warning', err);
    },
  });
  return stream as LiveInputStream;
}

/**
 * ffmpeg ends a read of its input that failed (a network read past `-rw_timeout`, a reset
 * connection, a device error) as if the input had ended, exit status 0, having said
 * `<input>: <error>` (ffmpeg 5) or `Error during demuxing: <error>` (6 and later). That is the
 * input failing, not input it skipped: the stream must fail, not end (a source that stalled
 * mid-stream ended `speechpipe caption` with exit 0, "the input ended").
 */
export function readFailure(input: string, err: MediaError): FfmpegError | undefined {
  const lines = err.message.split('\n');
  const failed = lines.find(
    (line) =>
      line.includes(`${input}: `) ||
      /Error during demuxing: |Error retrieving a packet from demuxer/.test(line),
  );
  if (failed === undefined) return undefined;
  const said = err.message.replace(/^ffmpeg skipped input it could not decode: /, '');
  return new FfmpegError(`ffmpeg could not read its input: ${said}`, {
    exitCode: 0,
    signal: null,
    stderr: said,
  });
}
