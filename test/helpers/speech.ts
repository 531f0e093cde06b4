// Speech fixtures made on the fly: espeak-ng speaks the text, ffmpeg turns its 22.05 kHz WAV
// into 16 kHz mono PCM16. Cached per text for the test process, and on disk for the machine:
// dozens of test processes speak the same sentences, and each spoke them again. The disk entry
// is named by what makes it (the text, the voice, and the espeak-ng and ffmpeg binaries found),
// so another text or another binary makes it afresh.

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { statSync } from 'node:fs';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { encodeWav } from '../../src/index.ts';
import { ffmpegPcm16 } from './ffmpeg.ts';

const run = promisify(execFile);
const cache = new Map<string, Promise<Buffer>>();

const DISK_CACHE = join(tmpdir(), 'speechpipe-speech-fixtures');

/** Which `name` on PATH would run, as its path, size and time of change. */
function binary(name: string): string {
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    try {
      const s = statSync(join(dir, name));
      if (s.isFile()) return `${join(dir, name)}:${s.size}:${s.mtimeMs}`;
    } catch {}
  }
  return `${name}:not found`;
}

let tools: string | undefined;

/** The speech itself, from the disk cache or made (and kept there). */
async function speak(text: string, voice: string): Promise<Buffer> {
  tools ??= `${binary('espeak-ng')}|${binary('ffmpeg')}`;
  const name = createHash('sha256')
    .update(JSON.stringify([text, voice, tools]))
    .digest('hex');
  const path = join(DISK_CACHE, `${name}.pcm`);
  const kept = await readFile(path).catch(() => undefined);
  if (kept) return kept;
  const { stdout } = await run('espeak-ng', ['-v', voice, '--stdout', text], {
    encoding: 'buffer',
    maxBuffer: 1 << 28,
  });
  const pcm = await ffmpegPcm16(stdout, [], ['-ar', '16000', '-ac', '1']);
  // Whole or not at all: written aside, then renamed into place (processes may race to it).
  const partial = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  await mkdir(DISK_CACHE, { recursive: true })
    .then(() => writeFile(partial, pcm))
    .then(() => rename(partial, path))
    .catch(() => rm(partial, { force: true }));
  return pcm;
}

/** PCM16LE 16 kHz mono of `text` spoken by espeak-ng, followed by `pauseMs` of silence. */
export function speechPcm(text: string, options: { voice?: string; pauseMs?: number } = {}): Promise<Buffer> {
  const key = `${options.voice ?? 'en'}|${options.pauseMs ?? 0}|${text}`;
  let pending = cache.get(key);
  if (!pending) {
    pending = (async () => {
      const pcm = await speak(text, options.voice ?? 'en');
      const pause = Buffer.alloc(Math.round(((options.pauseMs ?? 0) / 1000) * 16000) * 2);
      return Buffer.concat([pcm, pause]);
    })();
    cache.set(key, pending);
  }
  return pending;
}

/** Sentences of a news bulletin, for speech that sounds like a broadcast. */
export const NEWS_SENTENCES = [
  'The council met this morning to discuss the budget.',
  'Several members asked for more time.',
  'The vote was moved to next week.',
  'Traffic on the bridge will be closed on Sunday.',
  'Rain is expected in the afternoon.',
];

/** Several utterances separated by pauses, as one 16 kHz mono PCM16 buffer. */
export async function speechWithPauses(sentences: string[], pauseMs = 800): Promise<Buffer> {
  const parts = await Promise.all(sentences.map((s) => speechPcm(s, { pauseMs })));
  return Buffer.concat(parts);
}

/** A 16 kHz mono WAV file of `text`. */
export async function speechWav(
  text: string,
  options: { voice?: string; pauseMs?: number } = {},
): Promise<Buffer> {
  return encodeWav(await speechPcm(text, options), 16000);
}
