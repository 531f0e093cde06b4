// Audio benchmark helpers: synthetic inputs made once with ffmpeg in .bench-tmp/ (git-ignored),
// the plain ffmpeg command used as a baseline, and the reads and sink every stream bench uses.

import { execFile, spawn } from 'node:child_process';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';

const run = promisify(execFile);

export function benchTmp(): string {
  return new URL('../.bench-tmp', import.meta.url).pathname;
}

/** `ffmpeg <args> -y <path>`. */
export async function ffmpegTo(path: string, args: string[]): Promise<void> {
  await run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', ...args, '-y', path]);
}

/**
 * Run `ffmpeg <args>` as a baseline: `input` to its stdin (or none), its stdout collected when
 * `collect`, else sent to /dev/null.
 */
export function plainFfmpeg(
  args: string[],
  options: { input?: Buffer; collect?: boolean } = {},
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn('ffmpeg', ['-hide_banner', '-nostdin', '-loglevel', 'error', ...args], {
      stdio: [options.input ? 'pipe' : 'ignore', options.collect ? 'pipe' : 'ignore', 'inherit'],
    });
    const parts: Buffer[] = [];
    child.stdout?.on('data', (c: Buffer) => parts.push(c));
    child.stdin?.end(options.input);
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0 ? resolve(Buffer.concat(parts)) : reject(new Error(`ffmpeg exited with ${code}`)),
    );
  });
}

/** `buf` as the reads of a source: chunks of `size` bytes (the last may be shorter). */
export function chunks(buf: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < buf.length; i += size) out.push(buf.subarray(i, i + size));
  return out;
}

/** A Writable that takes everything and keeps nothing: the end of a measured pipeline. */
export function discard(objectMode = false): Writable {
  return new Writable({
    objectMode,
    write(_chunk, _encoding, callback) {
      callback();
    },
  });
}
