// Long speech recordings for benchmarks: espeak-ng speaks a passage with pauses, repeated to
// the wanted length, encoded as a 16 kHz mono MP3 (a typical archive). Cached in the temp dir.

import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rename } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const DIR = join(tmpdir(), 'speechpipe-bench');
const PASSAGE = [
  'Good evening, and welcome to the late news.',
  'The council met today to discuss the new library on the river bank.',
  'Work on the bridge will start in the spring, and should take two years.',
  'In sport, the home team won three to one after a difficult first half.',
  'Tomorrow will be dry and bright, with a light wind from the west.',
];

async function passagePcm(): Promise<Buffer> {
  const parts: Buffer[] = [];
  for (const sentence of PASSAGE) {
    const { stdout } = await run('espeak-ng', ['-v', 'en', '--stdout', sentence], {
      encoding: 'buffer',
      maxBuffer: 1 << 26,
    });
    const { stdout: pcm } = await new Promise<{ stdout: Buffer }>((resolve, reject) => {
      const child = execFile(
        'ffmpeg',
        [
          '-hide_banner',
          '-loglevel',
          'error',
          '-i',
          'pipe:0',
          '-ar',
          '16000',
          '-ac',
          '1',
          '-f',
          's16le',
          'pipe:1',
        ],
        { encoding: 'buffer', maxBuffer: 1 << 26 },
        (err, out) => (err ? reject(err) : resolve({ stdout: out })),
      );
      child.stdin!.end(stdout);
    });
    parts.push(pcm, Buffer.alloc(16000 * 2 * 0.8)); // 800 ms pause after each sentence
  }
  return Buffer.concat(parts);
}

/** Path of an MP3 of about `seconds` of speech (created once). */
export async function speechArchive(seconds: number): Promise<string> {
  const path = join(DIR, `speech-${seconds}s.mp3`);
  if (existsSync(path)) return path;
  await mkdir(DIR, { recursive: true });
  const passage = await passagePcm();
  const repeats = Math.ceil((seconds * 32000) / passage.length);
  const partial = `${path}.part`;
  const ffmpeg = spawn(
    'ffmpeg',
    [
      '-hide_banner',
      '-loglevel',
      'error',
      '-y',
      '-f',
      's16le',
      '-ar',
      '16000',
      '-ac',
      '1',
      '-i',
      'pipe:0',
      '-c:a',
      'libmp3lame',
      '-b:a',
      '32k',
      '-f',
      'mp3',
      partial,
    ],
    {
      stdio: ['pipe', 'inherit', 'inherit'],
    },
  );
  for (let i = 0; i < repeats; i++) {
    if (!ffmpeg.stdin.write(passage)) await new Promise((resolve) => ffmpeg.stdin.once('drain', resolve));
  }
  ffmpeg.stdin.end();
  const code = await new Promise<number | null>((resolve) => ffmpeg.once('close', resolve));
  if (code !== 0) throw new Error(`ffmpeg failed to encode ${path}`);
  await rename(partial, path);
  return path;
}
