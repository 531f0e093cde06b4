// Speech fixtures made on the fly: espeak-ng speaks the text, ffmpeg turns its 22.05 kHz WAV
// into 16 kHz mono PCM16. Cached per text for the test process.

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { encodeWav } from '../../src/index.ts';
import { ffmpegPcm16 } from './ffmpeg.ts';

const run = promisify(execFile);
const cache = new Map<string, Promise<Buffer>>();

/** PCM16LE 16 kHz mono of `text` spoken by espeak-ng, followed by `pauseMs` of silence. */
export function speechPcm(text: string, options: { voice?: string; pauseMs?: number } = {}): Promise<Buffer> {
  const key = `${options.voice ?? 'en'}|${options.pauseMs ?? 0}|${text}`;
  let pending = cache.get(key);
  if (!pending) {
    pending = (async () => {
      const { stdout } = await run('espeak-ng', ['-v', options.voice ?? 'en', '--stdout', text], {
        encoding: 'buffer',
        maxBuffer: 1 << 28,
      });
      const pcm = await ffmpegPcm16(stdout, [], ['-ar', '16000', '-ac', '1']);
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
