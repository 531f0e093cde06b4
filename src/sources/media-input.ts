// mediaInput(): a programme as MPEG-TS, for an HLS presentation and for the captions alike. One
// ffmpeg reads the input once (a stream URL, a file, a device, or standard input) and writes its
// video copied as it is and its audio copied or encoded to AAC: the presentation's media, and,
// decoded, the audio the captions are made from, on one clock.

import type { Readable as ReadableType } from 'node:stream';
import { Readable } from 'node:stream';
import { type FfmpegRun, runFfmpeg } from '../audio/ffmpeg.ts';
import { MediaError } from '../audio/media-error.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { NETWORK_URL, readFailure } from './live-input.ts';

/** How the audio goes into the presentation: copied as it is, or encoded to AAC. */
export type HlsAudio = 'copy' | 'aac';

/** Options of {@link mediaInput}. */
export interface MediaInputOptions {
  /** Read the input at its own rate (a file played as if it were a broadcast). Default false. */
  realtime?: boolean;
  /** ffmpeg options before `-i` (a device's format; raw PCM's on standard input). */
  inputArgs?: readonly string[];
  /** Where standard input comes from for `'-'` (default `process.stdin`). */
  stdin?: ReadableType;
  /** Copy the audio (AAC or MP3 already, as broadcast sources carry) or encode it to AAC. Default copy. */
  audio?: HlsAudio;
  /** A network URL: ms a read may wait for bytes before the stream fails (`-rw_timeout`). Default 30000; 0 for ever. */
  ioTimeoutMs?: number;
  /** An ffmpeg binary; otherwise `FFMPEG_PATH`, ffmpeg-static, then the PATH. */
  ffmpegPath?: string;
  /** Stops ffmpeg at once and destroys the stream. */
  signal?: AbortSignal;
}

/** The programme's MPEG-TS; `finish()` ends it early, cleanly (ffmpeg closes its output). */
export interface MediaInput extends ReadableType {
  /** Stop reading the input and end the stream after what ffmpeg has (a graceful stop). */
  finish(): void;
}

/**
 * The input as MPEG-TS: its first video stream copied (no re-encoding), its first audio stream
 * copied or encoded to AAC (`audio`). ffmpeg is stopped (SIGTERM, then SIGKILL) when the stream
 * is destroyed or `signal` aborts; a read that failed (a network source gone) fails the stream.
 */
export function mediaInput(input: string, options: MediaInputOptions = {}): MediaInput {
  const ioTimeoutMs = options.ioTimeoutMs ?? 30_000;
  if (!(typeof ioTimeoutMs === 'number' && ioTimeoutMs >= 0 && Number.isFinite(ioTimeoutMs)))
    throw new InvalidArgumentError(
      `mediaInput: ioTimeoutMs must be a finite number of ms >= 0, got ${ioTimeoutMs}`,
    );
  const audio = options.audio ?? 'copy';
  if (audio !== 'copy' && audio !== 'aac')
    throw new InvalidArgumentError(`mediaInput: audio must be 'copy' or 'aac', got ${JSON.stringify(audio)}`);
  if (input === '-' && options.realtime)
    throw new InvalidArgumentError("mediaInput: realtime is for what ffmpeg opens, not standard input ('-')");
  const timeout =
    ioTimeoutMs > 0 && NETWORK_URL.test(input) ? ['-rw_timeout', String(Math.round(ioTimeoutMs * 1000))] : [];
  const args = [
    ...(options.realtime ? ['-re'] : []),
    ...timeout,
    ...(options.inputArgs ?? []),
    '-i',
    input === '-' ? 'pipe:0' : input,
    '-map',
    '0:v:0?',
    '-map',
    '0:a:0',
    '-c:v',
    'copy',
    ...(audio === 'copy' ? ['-c:a', 'copy'] : ['-c:a', 'aac', '-b:a', '128k']),
    // Each packet out as it is muxed: the presentation and the captions are live.
    '-flush_packets',
    '1',
    '-f',
    'mpegts',
    'pipe:1',
  ];
  let run: FfmpegRun | undefined;
  let finishing = false;
  const stdin = input === '-' ? (options.stdin ?? process.stdin) : undefined;
  const stream = new Readable({
    read() {
      run?.stdout.resume();
    },
    destroy(err, callback) {
      if (stdin && run) stdin.unpipe(run.stdin);
      if (!run) return callback(err);
      run.stop();
      run.done.then(
        () => callback(err),
        () => callback(err),
      );
    },
  }) as MediaInput;
  try {
    run = runFfmpeg(args, { ffmpegPath: options.ffmpegPath, signal: options.signal });
  } catch (err) {
    process.nextTick(() => stream.destroy(err as Error));
    return Object.assign(stream, { finish() {} });
  }
  const r = run;
  if (stdin) stdin.pipe(r.stdin);
  r.stdout.on('data', (chunk: Buffer) => {
    if (!stream.push(chunk)) r.stdout.pause();
  });
  const ended = new Promise<void>((resolve) => r.stdout.once('end', resolve));
  Promise.all([ended, r.done]).then(
    () => {
      const said = r.stderrTail();
      const failure = said ? readFailure(input, new MediaError('ERR_MEDIA_FORMAT', said)) : undefined;
      if (failure) stream.destroy(failure);
      else {
        if (said) stream.emit('warning', new MediaError('ERR_MEDIA_FORMAT', `ffmpeg: ${said}`));
        stream.push(null);
      }
    },
    (err: Error) => {
      // Stopped by finish(): ffmpeg ends its output and exits on the interrupt (status 255).
      if (finishing && (err as { exitCode?: number }).exitCode === 255) stream.push(null);
      else stream.destroy(err);
    },
  );
  if (options.signal) {
    const onAbort = () => stream.destroy(options.signal!.reason as Error);
    if (options.signal.aborted) onAbort();
    else options.signal.addEventListener('abort', onAbort, { once: true });
    stream.once('close', () => options.signal!.removeEventListener('abort', onAbort));
  }
  stream.finish = () => {
    if (finishing || r.child.exitCode !== null) return;
    finishing = true;
    if (stdin) stdin.unpipe(r.stdin);
    // SIGINT: ffmpeg stops reading, writes what it has and the end of its output, then exits.
    r.child.kill('SIGINT');
  };
  return stream;
}

/** What {@link probeMedia} finds: the codec of the first video and audio streams. */
export interface MediaStreams {
  video: string | undefined;
  audio: string | undefined;
}

/** The codecs of a file's first video and audio streams, as ffmpeg names them (`h264`, `aac`). */
export async function probeMedia(
  path: string,
  options: { ffmpegPath?: string; signal?: AbortSignal } = {},
): Promise<MediaStreams> {
  const run = runFfmpeg(['-loglevel', 'info', '-i', path], {
    ffmpegPath: options.ffmpegPath,
    signal: options.signal ?? AbortSignal.timeout(15_000),
    stderrTailBytes: 64 * 1024,
  });
  // Without an output ffmpeg exits 1, having said what the input holds.
  await run.done.catch(() => {});
  const said = run.stderrTail();
  const codec = (kind: string) => new RegExp(`Stream #0:\\d+\\S*: ${kind}: (\\w+)`).exec(said)?.[1];
  return { video: codec('Video'), audio: codec('Audio') };
}

/** Audio HLS players (hls.js, Safari) play from MPEG-TS as it is. */
const PLAYABLE_AUDIO = new Set(['aac', 'mp3']);

/**
 * How to bring `input`'s audio into an HLS presentation. Copied when it is playable as it is: a
 * stream URL (broadcast sources carry AAC), or a file whose audio is AAC or MP3. Encoded to AAC
 * otherwise: standard input and devices (raw PCM), and files of WAV, FLAC, Opus and the like,
 * which no HLS player plays.
 */
export async function hlsAudioFor(
  input: string,
  options: { inputArgs?: readonly string[]; ffmpegPath?: string; signal?: AbortSignal } = {},
): Promise<HlsAudio> {
  if (input === '-' || (options.inputArgs?.length ?? 0) > 0) return 'aac';
  if (NETWORK_URL.test(input)) return 'copy';
  const { audio } = await probeMedia(input, options);
  return audio !== undefined && PLAYABLE_AUDIO.has(audio) ? 'copy' : 'aac';
}
