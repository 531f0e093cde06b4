// Locating and running ffmpeg: `FFMPEG_PATH`, then ffmpeg-static's binary if it is really
// there, then `ffmpeg` on the PATH. A run ends with its exit code and stderr tail as a typed
// error, and is always reaped: SIGTERM first, SIGKILL only after a grace period.

import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { SpeechpipeError } from '../protocol/errors.ts';

export class FfmpegNotFoundError extends SpeechpipeError {
  override name = 'FfmpegNotFoundError';
  constructor(message: string) {
    super('ERR_FFMPEG_NOT_FOUND', message);
  }
}

export class FfmpegError extends SpeechpipeError {
  override name = 'FfmpegError';
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The last lines ffmpeg wrote to stderr. */
  readonly stderr: string;

  constructor(
    message: string,
    options: { exitCode: number | null; signal: NodeJS.Signals | null; stderr: string },
  ) {
    super('ERR_FFMPEG_FAILED', message);
    this.exitCode = options.exitCode;
    this.signal = options.signal;
    this.stderr = options.stderr;
  }
}

export interface FfmpegLocation {
  path: string;
  source: 'option' | 'FFMPEG_PATH' | 'ffmpeg-static' | 'PATH';
}

export interface ResolveFfmpegOptions {
  /** An explicit binary; wins over everything. */
  ffmpegPath?: string | undefined;
  env?: Record<string, string | undefined>;
  /**
   * How to ask ffmpeg-static for its binary (default: `require('ffmpeg-static')`, which is
   * optional and may be missing or hold a path whose download failed). For bundlers and tests.
   */
  loadFfmpegStatic?: () => unknown;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

const requireFfmpegStatic = () => createRequire(import.meta.url)('ffmpeg-static') as unknown;

function ffmpegStaticPath(load: () => unknown): string | undefined {
  try {
    const found = load();
    return typeof found === 'string' && isExecutable(found) ? found : undefined;
  } catch {
    return undefined; // not installed, or its binary download failed
  }
}

const pathCache = new Map<string, string | undefined>();

function onPath(envPath: string): string | undefined {
  if (pathCache.has(envPath)) return pathCache.get(envPath);
  let found: string | undefined;
  for (const dir of envPath.split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, process.platform === 'win32' ? 'ffmpeg.exe' : 'ffmpeg');
    if (isExecutable(candidate)) {
      found = candidate;
      break;
    }
  }
  pathCache.set(envPath, found);
  return found;
}

/** Find ffmpeg, or throw `FfmpegNotFoundError` saying where we looked. */
export function resolveFfmpeg(options: ResolveFfmpegOptions = {}): FfmpegLocation {
  if (options.ffmpegPath) {
    if (!isExecutable(options.ffmpegPath)) {
      throw new FfmpegNotFoundError(`ffmpegPath ${options.ffmpegPath} is not an executable file`);
    }
    return { path: options.ffmpegPath, source: 'option' };
  }
  const env = options.env ?? process.env;
  const fromEnv = env.FFMPEG_PATH;
  if (fromEnv) {
    if (!isExecutable(fromEnv))
      throw new FfmpegNotFoundError(`FFMPEG_PATH=${fromEnv} is not an executable file`);
    return { path: fromEnv, source: 'FFMPEG_PATH' };
  }
  const bundled = ffmpegStaticPath(options.loadFfmpegStatic ?? requireFfmpegStatic);
  if (bundled) return { path: bundled, source: 'ffmpeg-static' };
  const found = onPath(env.PATH ?? '');
  if (found) return { path: found, source: 'PATH' };
  throw new FfmpegNotFoundError(
    'ffmpeg not found: set FFMPEG_PATH, install ffmpeg-static, or put ffmpeg on the PATH (Debian: apt-get install ffmpeg)',
  );
}

export interface RunFfmpegOptions extends ResolveFfmpegOptions {
  signal?: AbortSignal | undefined;
  /** Time between SIGTERM and SIGKILL when the run is stopped. Default 2000 ms. */
  killGraceMs?: number;
  /** Bytes of stderr kept for the error. Default 4096. */
  stderrTailBytes?: number;
}

export interface FfmpegRun {
  readonly child: ChildProcessByStdio<Writable, Readable, Readable>;
  readonly stdin: Writable;
  readonly stdout: Readable;
  /** Resolves when ffmpeg exits 0; rejects with `FfmpegError`, or the abort reason. */
  readonly done: Promise<void>;
  /** Stop the run: SIGTERM, then SIGKILL after the grace period; stdin and stdout are closed. Idempotent. */
  stop(): void;
  /** The stderr tail so far. */
  stderrTail(): string;
}

/**
 * Spawn ffmpeg with `-hide_banner -nostdin -loglevel error` and `args`. Errors writing to its
 * stdin after it exits are absorbed (the exit status tells why); `done` carries the outcome.
 */
export function runFfmpeg(args: readonly string[], options: RunFfmpegOptions = {}): FfmpegRun {
  const { path } = resolveFfmpeg(options);
  const graceMs = options.killGraceMs ?? 2000;
  const tailBytes = options.stderrTailBytes ?? 4096;
  const signal = options.signal;
  signal?.throwIfAborted();

  const child = spawn(path, ['-hide_banner', '-nostdin', '-loglevel', 'error', ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    windowsHide: true,
  });
  let tail = Buffer.alloc(0);
  child.stderr.on('data', (chunk: Buffer) => {
    tail = Buffer.concat([tail, chunk]);
    if (tail.length > tailBytes) tail = tail.subarray(tail.length - tailBytes);
  });
  // ffmpeg may exit before reading all input; the exit status explains it.
  child.stdin.on('error', () => {});

  let killTimer: NodeJS.Timeout | undefined;
  let stopped = false;
  let exited = false;
  const stop = () => {
    if (stopped || exited) return;
    stopped = true;
    child.stdin.destroy();
    // A paused stdout with data in it would hold the child's 'close' (and `done`) forever.
    child.stdout.destroy();
    child.kill('SIGTERM');
    killTimer = setTimeout(() => {
      if (!exited) child.kill('SIGKILL');
    }, graceMs);
  };
  const onAbort = () => stop();
  signal?.addEventListener('abort', onAbort, { once: true });

  const stderrTail = () => tail.toString('utf8').trim();
  const done = new Promise<void>((resolve, reject) => {
    child.once('error', (err: NodeJS.ErrnoException) => {
      exited = true;
      cleanup();
      reject(err.code === 'ENOENT' ? new FfmpegNotFoundError(`cannot run ffmpeg at ${path}`) : err);
    });
    child.once('close', (exitCode, exitSignal) => {
      exited = true;
      cleanup();
      if (signal?.aborted) reject(signal.reason);
      else if (exitCode === 0) resolve();
      else {
        const why = stopped
          ? 'was stopped'
          : exitCode === null
            ? `was killed by ${exitSignal}`
            : `exited with code ${exitCode}`;
        const stderr = stderrTail();
        reject(
          new FfmpegError(`ffmpeg ${why}${stderr ? `: ${lastLines(stderr, 3)}` : ''}`, {
            exitCode,
            signal: exitSignal,
            stderr,
          }),
        );
      }
    });
  });
  function cleanup() {
    if (killTimer) clearTimeout(killTimer);
    signal?.removeEventListener('abort', onAbort);
  }
  // An unobserved rejection must not crash the process; callers await `done`.
  done.catch(() => {});
  return { child, stdin: child.stdin, stdout: child.stdout, done, stop, stderrTail };
}

function lastLines(text: string, n: number): string {
  return text.split('\n').slice(-n).join(' | ');
}

/** Output arguments for raw PCM16LE at `sampleRate` with `channels`, to stdout. */
export function pcm16OutputArgs(sampleRate: number, channels: number): string[] {
  return [
    '-vn',
    '-sn',
    '-dn',
    '-f',
    's16le',
    '-acodec',
    'pcm_s16le',
    '-ar',
    String(sampleRate),
    '-ac',
    String(channels),
    'pipe:1',
  ];
}

export interface DecodedPcm {
  /** PCM16LE, interleaved. */
  pcm: Buffer;
  /** Decoding stopped at `maxOutputBytes`: the input holds at least this much audio. */
  truncated: boolean;
}

/**
 * Decode a complete file or buffer to PCM16LE with ffmpeg. For whole, bounded inputs (the
 * emulator's uploads, tests); streaming decode is `decode()` in the transforms. With
 * `maxOutputBytes`, decoding stops there and the result says it was truncated.
 */
export async function decodeWithFfmpeg(
  input: Uint8Array | { path: string },
  options: RunFfmpegOptions & { sampleRate: number; channels: number; maxOutputBytes?: number },
): Promise<DecodedPcm> {
  const inputArg = 'path' in input ? input.path : 'pipe:0';
  const run = runFfmpeg(['-i', inputArg, ...pcm16OutputArgs(options.sampleRate, options.channels)], options);
  const chunks: Buffer[] = [];
  let bytes = 0;
  let overflow = false;
  const max = options.maxOutputBytes ?? Number.POSITIVE_INFINITY;
  run.stdout.on('data', (chunk: Buffer) => {
    if (overflow) return;
    if (bytes + chunk.length > max) {
      chunks.push(chunk.subarray(0, max - bytes));
      bytes = max;
      overflow = true;
      run.stop();
      return;
    }
    bytes += chunk.length;
    chunks.push(chunk);
  });
  if ('path' in input) run.stdin.end();
  else run.stdin.end(input);
  try {
    await run.done;
  } catch (err) {
    if (!overflow) throw err;
  }
  return { pcm: Buffer.concat(chunks), truncated: overflow };
}
