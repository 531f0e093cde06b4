// ffmpegPcm(): any audio bytes in, PCM16LE out, through an ffmpeg child process, with
// backpressure both ways and the child always reaped: the stream closes only after the child has
// exited, and its exit code and stderr tail are the stream's error.

import { createWriteStream, type WriteStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Duplex } from 'node:stream';
import { type FfmpegRun, pcm16OutputArgs, type RunFfmpegOptions, runFfmpeg } from '../audio/ffmpeg.ts';

export interface FfmpegPcmOptions extends Omit<RunFfmpegOptions, 'signal'> {
  sampleRate: number;
  channels: number;
  /** Arguments before `-i` (to declare a raw input format). */
  inputArgs?: readonly string[];
  /**
   * Write the input to a temporary file and let ffmpeg read that (for formats it must seek in,
   * such as an MP4 whose index follows its media data). The file is removed on close.
   */
  spoolToFile?: boolean;
  /** Output bytes kept; ffmpeg's output past this is read and discarded. */
  maxOutputBytes?: number;
  /** Called with the child's pid once it runs. */
  onSpawn?: (pid: number | undefined) => void;
}

/** A Duplex over one ffmpeg run. */
export function ffmpegPcm(options: FfmpegPcmOptions): Duplex {
  const cap = options.maxOutputBytes ?? Number.POSITIVE_INFINITY;
  let run: FfmpegRun | undefined;
  let spool: { dir: string; path: string; file: WriteStream } | undefined;
  let spooling: Promise<void> | undefined;
  let outBytes = 0;

  const start = (input: string) => {
    const args = [
      ...(options.inputArgs ?? []),
      '-i',
      input,
      ...pcm16OutputArgs(options.sampleRate, options.channels),
    ];
    const r = runFfmpeg(args, options);
    run = r;
    options.onSpawn?.(r.child.pid);
    r.stdout.on('data', (chunk: Buffer) => {
      if (outBytes >= cap) return; // past the real end (an MP3's padding): read, not kept
      const keep = outBytes + chunk.length > cap ? chunk.subarray(0, cap - outBytes) : chunk;
      outBytes += keep.length;
      if (!duplex.push(keep)) r.stdout.pause();
    });
    const ended = new Promise<void>((resolve) => r.stdout.once('end', resolve));
    Promise.all([ended, r.done]).then(
      () => duplex.push(null),
      (err: Error) => duplex.destroy(err),
    );
  };

  const duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      if (options.spoolToFile) {
        spoolWrite(chunk).then(() => callback(), callback);
        return;
      }
      const stdin = run!.stdin;
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
    },
    final(callback) {
      if (!options.spoolToFile) {
        run!.stdin.end();
        callback();
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
        .then(() => {
          if (duplex.destroyed) return callback();
          start(spool!.path);
          run!.stdin.end();
          callback();
        }, callback);
    },
    read() {
      run?.stdout.resume();
    },
    destroy(err, callback) {
      run?.stop();
      const reaped = run ? run.done.then(noop, noop) : Promise.resolve();
      Promise.all([reaped, spooling?.then(noop, noop)])
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

  if (!options.spoolToFile) start('pipe:0');
  return duplex;
}

function noop(): void {}
