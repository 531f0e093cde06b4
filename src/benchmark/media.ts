// What `speechpipe bench` sends: the user's media (a file or a directory, decoded once to
// 16 kHz mono PCM16, bounded in count and length) or a built-in spoken set made with espeak-ng.

import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { encodeWav } from '../protocol/riff.ts';
import { fromFile, walkAudioFiles } from '../sources/files.ts';
import { decode } from '../transforms/decode.ts';

export interface BenchClip {
  name: string;
  /** PCM16 mono 16 kHz. */
  pcm: Buffer;
  /** The same audio as a WAV file (fast and batch uploads). */
  wav: Buffer;
  /** Seconds of audio. */
  seconds: number;
  /** What was said, when known (the built-in set; TTS speaks it). */
  text?: string;
}

/** Clips taken from the user's media, at most. */
const MAX_CLIPS = 32;
/** Seconds kept of each clip, at most (a live stream longer than the run is cut anyway). */
const MAX_CLIP_SECONDS = 600;

export const BUILTIN_SENTENCES = [
  'The council met this morning to discuss the budget for next year.',
  'Several members asked for more time before the vote.',
  'Traffic on the bridge will be closed on Sunday for repairs.',
  'Rain is expected in the afternoon, with clear skies by the evening.',
  'The museum opens a new exhibition about the history of the harbour.',
  'Tickets for the concert sold out within an hour.',
  'The school will add two new classrooms over the summer.',
  'A small earthquake was felt along the coast last night.',
];

async function decodeClip(path: string, name: string, signal?: AbortSignal): Promise<BenchClip> {
  const chunks: Buffer[] = [];
  let bytes = 0;
  const limit = MAX_CLIP_SECONDS * 32_000;
  await pipeline(
    fromFile(path),
    decode(signal ? { signal } : {}),
    new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (bytes < limit) {
          chunks.push(chunk.subarray(0, limit - bytes));
          bytes += Math.min(chunk.length, limit - bytes);
        }
        callback();
      },
    }),
    signal ? { signal } : {},
  );
  const pcm = Buffer.concat(chunks);
  return { name, pcm, wav: encodeWav(pcm, 16_000, 1), seconds: pcm.length / 32_000 };
}

/** The user's media: a file, or the first media files of a directory. */
export async function loadMedia(path: string, signal?: AbortSignal): Promise<BenchClip[]> {
  const info = await stat(path).catch(() => undefined);
  if (!info) throw new InvalidArgumentError(`bench: --media ${path} does not exist`);
  const clips: BenchClip[] = [];
  for await (const file of walkAudioFiles([path], signal ? { signal } : {})) {
    if (file.skipped || file.unreadable) continue;
    const clip = await decodeClip(file.path, file.relative, signal).catch(() => undefined);
    if (clip && clip.seconds > 0.5) clips.push(clip);
    if (clips.length >= MAX_CLIPS) break;
  }
  if (clips.length === 0) throw new InvalidArgumentError(`bench: no decodable media under ${path}`);
  return clips;
}

/** `text` spoken by espeak-ng, as a WAV file (written to a temporary file: on stdout its header says a streaming size). */
async function espeak(text: string): Promise<Buffer> {
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-bench-'));
  try {
    const path = join(dir, 'speech.wav');
    await new Promise<void>((resolve, reject) => {
      const child = spawn('espeak-ng', ['-w', path, '-v', 'en-us', '-s', '165', text], { stdio: 'ignore' });
      child.on('error', (err) =>
        reject(
          new InvalidArgumentError(
            `bench: the built-in spoken set needs espeak-ng (${err.message}); or give --media`,
          ),
        ),
      );
      child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`espeak-ng exited ${code}`))));
    });
    return await readFile(path);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The built-in spoken set: each sentence spoken by espeak-ng, decoded to 16 kHz. */
export async function builtinMedia(signal?: AbortSignal): Promise<BenchClip[]> {
  const clips: BenchClip[] = [];
  for (const [i, text] of BUILTIN_SENTENCES.entries()) {
    const wav = await espeak(text);
    const chunks: Buffer[] = [];
    await pipeline(
      [wav],
      decode(signal ? { signal } : {}),
      new Writable({
        write(chunk: Buffer, _encoding, callback) {
          chunks.push(chunk);
          callback();
        },
      }),
    );
    // Half a second of silence after each sentence, as between utterances.
    const pcm = Buffer.concat([...chunks, Buffer.alloc(16_000)]);
    clips.push({
      name: `builtin-${i + 1}`,
      pcm,
      wav: encodeWav(pcm, 16_000, 1),
      seconds: pcm.length / 32_000,
      text,
    });
  }
  return clips;
}
