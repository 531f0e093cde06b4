// ffmpegPcm(): any audio bytes in, PCM16LE out, through an ffmpeg child process, with
// backpressure both ways and the child always reaped: the stream closes only after the child has
// exited, and its exit code and stderr tail are the stream's error. Resampling uses soxr when
// the build has it, else swr tuned to the same passband and stopband as `resample()`.

import { execFile } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duplex, type Readable } from 'node:stream';
import {
  type FfmpegRun,
  pcm16OutputArgs,
  type RunFfmpegOptions,
  resolveFfmpeg,
  runFfmpeg,
} from '../audio/ffmpeg.ts';
import { MediaError } from '../audio/media-error.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { destroyOnAbort } from './abort.ts';

export interface FfmpegPcmOptions extends Omit<RunFfmpegOptions, 'signal'> {
  sampleRate: number;
  channels: number;
  /** Arguments before `-i` (to declare a raw input format, or a device's). */
  inputArgs?: readonly string[];
  /**
   * What ffmpeg opens itself (a URL, a device, a file) instead of the bytes written to the
   * stream: the writable side then takes nothing and is ended to start ffmpeg.
   */
  input?: string;
  /** Read `input` at its own rate (`-re`): a file played as if it were live. Default false. */
  realtime?: boolean;
  /**
   * Write the input to a temporary file and let ffmpeg read that (for formats it must seek in,
   * such as an MP4 whose index follows its media data). The file is removed on close.
   */
  spoolToFile?: boolean;
  /** Pass each decoded packet on at once (live input) instead of in 32 KiB blocks. Default false. */
  lowLatency?: boolean;
  /**
   * Where the real audio ends when ffmpeg cannot know it (an MP3's end padding, from a pipe):
   * output past `bytes` is dropped if the output ends within `paddingBytes` after it. A longer
   * output (MP3s concatenated, a tag that lies) is passed whole: only padding is ever cut.
   */
  gaplessEnd?: { bytes: number; paddingBytes: number };
  /** Called with the child's pid once it runs. */
  onSpawn?: (pid: number) => void;
  /**
   * ffmpeg exited 0 but reported decoding errors (it skipped data it could not decode). Without
   * this callback the stream fails with that `MediaError`; with it, the output stands.
   */
  onDecodeErrors?: (err: MediaError) => void;
}

/**
 * ffmpeg's default resampler (swr, cutoff 0.97) lets a tone just above the new Nyquist frequency
 * alias back at -11 dB and droops 1 dB at 0.9 of it. soxr (as ffmpeg builds it) keeps the
 * passband flat and the stopband beyond 100 dB at the same speed; swr with these settings meets
 * our 0.1 dB / 70 dB promise at twice the cost, for builds without soxr.
 */
export const SOXR_FILTER = 'aresample=resampler=soxr';
export const SWR_FILTER = 'aresample=cutoff=0.92:filter_size=256:kaiser_beta=12';

const soxrByBinary = new Map<string, Promise<boolean>>();

/** Whether the ffmpeg at `path` was built with libsoxr (asked once per binary). */
export function ffmpegHasSoxr(path: string): Promise<boolean> {
  let known = soxrByBinary.get(path);
  if (!known) {
    known = new Promise((resolve) => {
      execFile(
        path,
        ['-hide_banner', '-buildconf'],
        { timeout: 5000, killSignal: 'SIGKILL' },
        (err, stdout) => resolve(!err && stdout.includes('--enable-libsoxr')),
      );
    });
    soxrByBinary.set(path, known);
  }
  return known;
}

/** A Duplex over one ffmpeg run. */
export function ffmpegPcm(options: FfmpegPcmOptions): Duplex {
  const trim = options.gaplessEnd;
  // Resolved now, so a missing ffmpeg fails the caller at once (FfmpegNotFoundError).
  const ffmpegPath = resolveFfmpeg(options).path;
  const filter = ffmpegHasSoxr(ffmpegPath).then((soxr) => (soxr ? SOXR_FILTER : SWR_FILTER));
  let run: FfmpegRun | undefined;
  let starting: Promise<FfmpegRun> | undefined;
  let spool: { dir: string; path: string; file: WriteStream } | undefined;
  let spooling: Promise<void> | undefined;
  // Output past `trim.bytes`, held until it is known to be padding (the output ends) or not.
  let held: Buffer[] | undefined = trim ? [] : undefined;
  let heldBytes = 0;
  let outBytes = 0;

  const start = (input: string): Promise<FfmpegRun> => {
    starting ??= filter.then((af) => {
      if (duplex.destroyed) throw new Error('ffmpegPcm destroyed before ffmpeg started');
      // ffmpeg flushes its output after every packet to a pipe: thousands of small writes for a
      // file. Without that it writes 32 KiB blocks (about 1 s of 16 kHz mono): lowLatency keeps it.
      const flush = options.lowLatency ? [] : ['-flush_packets', '0'];
      const args = [
        ...(options.realtime ? ['-re'] : []),
        ...(options.inputArgs ?? []),
        '-i',
        input,
        '-af',
        af,
        ...flush,
        ...pcm16OutputArgs(options.sampleRate, options.channels),
      ];
      const r = runFfmpeg(args, { ...options, ffmpegPath });
      run = r;
      // No pid: the spawn failed (the error comes from the child); nothing was started.
      if (r.child.pid !== undefined) options.onSpawn?.(r.child.pid);
      const pass = (chunk: Buffer) => {
        outBytes += chunk.length;
        if (!duplex.push(chunk)) r.stdout.pause();
      };
      r.stdout.on('data', (chunk: Buffer) => {
        if (!held || !trim) {
          pass(chunk);
          return;
        }
        const room = Math.max(0, trim.bytes - outBytes);
        if (room > 0) pass(room < chunk.length ? chunk.subarray(0, room) : chunk);
        if (room >= chunk.length) return;
        held.push(chunk.subarray(room));
        heldBytes += chunk.length - room;
        if (heldBytes > trim.paddingBytes) {
          // More than padding follows: not the end of the audio; pass everything on.
          const all = Buffer.concat(held);
          held = undefined;
          pass(all);
        }
      });
      endWithRun(duplex, r, options.onDecodeErrors);
      return r;
    });
    return starting;
  };

  const writeTo = (r: FfmpegRun, chunk: Buffer, callback: (err?: Error | null) => void) => {
    const stdin = r.stdin;
    // ffmpeg may stop reading before the input ends (it read all it wanted, or it failed): its
    // stdin is then gone and would never drain. The rest is dropped; the exit status says why.
    if (stdin.destroyed || stdin.writableEnded) {
      callback();
      return;
    }
    if (stdin.write(chunk)) callback();
    else {
      // 'close' too: a child that exits early never drains; its exit status says why.
      const done = () => {
        stdin.off('drain', done);
        stdin.off('close', done);
        callback();
      };
      stdin.on('drain', done);
      stdin.on('close', done);
    }
  };

  const duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      if (options.input !== undefined) {
        callback(new InvalidArgumentError(`ffmpeg reads ${options.input} itself: write nothing, end()`));
        return;
      }
      if (options.spoolToFile) {
        spoolWrite(chunk).then(() => callback(), callback);
        return;
      }
      if (run) writeTo(run, chunk, callback);
      else start('pipe:0').then((r) => writeTo(r, chunk, callback), callback);
    },
    final(callback) {
      if (!options.spoolToFile) {
        start(options.input ?? 'pipe:0').then((r) => {
          r.stdin.end();
          callback();
        }, callback);
        return;
      }
      openSpool()
        .then(
          (s) =>
            new Promise<void>((resolve, reject) => {
              s.file.once('error', reject);
              s.file.end(() => resolve());
            }),
        )
        .then(() => start(spool!.path))
        .then((r) => {
          r.stdin.end();
          callback();
        }, callback);
    },
    read() {
      run?.stdout.resume();
    },
    destroy(err, callback) {
      const started = starting ? starting.then(noop, noop) : Promise.resolve();
      started
        .then(() => {
          run?.stop();
          return run ? run.done.then(noop, noop) : undefined;
        })
        .then(() => spooling?.then(noop, noop))
        .then(async () => {
          if (!spool) return;
          spool.file.destroy();
          await rm(spool.dir, { recursive: true, force: true });
        })
        .then(
          () => callback(err),
          () => callback(err),
        );
    },
  });

  function openSpool(): Promise<{ dir: string; path: string; file: WriteStream }> {
    spooling ??= mkdtemp(join(tmpdir(), 'speechpipe-')).then((dir) => {
      const path = join(dir, 'input');
      spool = { dir, path, file: createWriteStream(path) };
      spool.file.on('error', (err) => duplex.destroy(err));
    });
    return spooling.then(() => spool!);
  }

  async function spoolWrite(chunk: Buffer): Promise<void> {
    const s = await openSpool();
    if (!s.file.write(chunk)) await new Promise<void>((resolve) => s.file.once('drain', () => resolve()));
  }

  // Started on the first write (or at the end, for empty or spooled input).
  return duplex;
}

function noop(): void {}

/**
 * End `stream` when `run`'s output has ended and ffmpeg has exited 0, or fail it with the exit
 * status. At `-loglevel error`, whatever ffmpeg said on a successful run is input it skipped:
 * `onDecodeErrors` hears it, or it is the stream's error.
 */
function endWithRun(stream: Duplex, run: FfmpegRun, onDecodeErrors?: (err: MediaError) => void): void {
  const ended = new Promise<void>((resolve) => run.stdout.once('end', resolve));
  Promise.all([ended, run.done]).then(
    () => {
      const said = run.stderrTail();
      if (said) {
        const err = new MediaError('ERR_MEDIA_FORMAT', `ffmpeg skipped input it could not decode: ${said}`);
        if (!onDecodeErrors) return stream.destroy(err);
        onDecodeErrors(err);
      }
      stream.push(null);
    },
    (err: Error) => stream.destroy(err),
  );
}

export interface FfmpegInputOptions
  extends Omit<FfmpegPcmOptions, 'input' | 'spoolToFile' | 'gaplessEnd' | 'lowLatency'> {
  /** What ffmpeg opens: a file, a URL, a device (with `inputArgs` naming its format). */
  input: string;
  signal?: AbortSignal;
}

/**
 * A Readable of PCM16LE from an input ffmpeg opens itself (a URL, a device, a file read at its
 * own pace with `realtime`). Each packet is passed on as ffmpeg decodes it (live latency).
 * Backpressure pauses ffmpeg's output; destroy or abort stops ffmpeg, and the stream closes once
 * it has exited.
 */
export function ffmpegInput(options: FfmpegInputOptions): Readable {
  const stream = ffmpegPcm({ ...options, lowLatency: true });
  stream.end(); // nothing to write: this starts ffmpeg
  destroyOnAbort(stream, options.signal);
  return stream;
}
