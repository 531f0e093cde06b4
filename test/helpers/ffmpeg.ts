// Test fixtures made by ffmpeg itself (lavfi sources), so the core suite needs no media.

import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Run ffmpeg with `args` and return stdout bytes. */
export async function ffmpeg(args: string[]): Promise<Buffer> {
  const { stdout } = await run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', ...args], {
    encoding: 'buffer',
    maxBuffer: 1 << 30,
  });
  return stdout;
}

/**
 * `seconds` of MPEG-TS from lavfi: a test picture at `fps` (none when `video` is false) and a
 * 440 Hz tone, encoded with `args` (`-vn` is added without video).
 */
export function transportStreamOf(options: {
  seconds: number;
  video?: boolean;
  fps?: number;
  args: string[];
}): Promise<Buffer> {
  const video = options.video ?? true;
  return ffmpeg([
    ...(video ? ['-f', 'lavfi', '-i', `testsrc2=size=160x120:rate=${options.fps ?? 25}`] : []),
    '-f',
    'lavfi',
    '-i',
    'sine=frequency=440:sample_rate=44100',
    '-t',
    String(options.seconds),
    ...(video ? [] : ['-vn']),
    ...options.args,
    '-f',
    'mpegts',
    'pipe:1',
  ]);
}

/** A WAV (or other container) of a sine from lavfi, encoded with `codec`. */
export function sineFile(options: {
  seconds: number;
  rate: number;
  channels?: number;
  codec: string;
  format?: string;
  frequency?: number;
}): Promise<Buffer> {
  const layout = (options.channels ?? 1) === 1 ? 'mono' : 'stereo';
  return ffmpeg([
    '-f',
    'lavfi',
    '-i',
    `sine=frequency=${options.frequency ?? 440}:sample_rate=${options.rate}:duration=${options.seconds}`,
    '-af',
    `aformat=channel_layouts=${layout}`,
    '-c:a',
    options.codec,
    '-f',
    options.format ?? 'wav',
    'pipe:1',
  ]);
}

/**
 * ffmpeg's own decode of `input` to PCM16LE (native rate and channels unless `outputArgs` say
 * otherwise, e.g. `['-ar', '16000', '-ac', '1']`). `inputArgs` go before `-i` (to declare a raw
 * input format).
 */
export function ffmpegPcm16(
  input: Buffer,
  inputArgs: string[] = [],
  outputArgs: string[] = [],
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      'ffmpeg',
      [
        '-hide_banner',
        '-loglevel',
        'error',
        ...inputArgs,
        '-i',
        'pipe:0',
        ...outputArgs,
        '-f',
        's16le',
        '-c:a',
        'pcm_s16le',
        'pipe:1',
      ],
      { encoding: 'buffer', maxBuffer: 1 << 30 },
      (err, stdout) => (err ? reject(err) : resolve(stdout)),
    );
    child.stdin!.end(input);
  });
}

/** Pids of the `ffmpeg` processes whose parent is `parent` (Linux /proc). */
export function ffmpegChildren(parent: number): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const [, comm, rest] = /^\d+ \((.*)\) (.*)$/s.exec(stat)!;
      if (comm === 'ffmpeg' && Number(rest!.split(' ')[1]) === parent) found.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return found;
}

/** Whether a process `pid` exists. */
export const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
