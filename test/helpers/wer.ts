// Word error rate, the oracle of the emulator's recognizer: reference texts of the shared
// English recordings, PocketSphinx run directly on a 16 kHz mono WAV that ffmpeg made, and the
// WER of a hypothesis against a reference.

import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import type { SpeechClient } from '../../src/client/index.ts';
import { findPocketSphinx, SPEED_ARGS } from '../../src/emulator/engine/pocketsphinx.ts';
import { type AsrRecord, type DecodeOptions, decode, fromFile, toFrames } from '../../src/index.ts';
import { sttStream } from '../../src/transforms/live-stream.ts';

const run = promisify(execFile);

/** Where the shared recordings are: $SPEECHPIPE_MEDIA, else ../shared/media. */
export const MEDIA_DIR =
  process.env.SPEECHPIPE_MEDIA ?? new URL('../../../shared/media', import.meta.url).pathname;

/** Lower case words without punctuation (apostrophes inside words kept: `what's`). */
export function normalizeWords(text: string): string[] {
  return text
    .toLowerCase()
    .replace(/[-‐–—]/g, ' ')
    .replace(/[^\p{L}\p{N}' ]+/gu, ' ')
    .split(/\s+/)
    .map((w) => w.replace(/^'+|'+$/g, ''))
    .filter((w) => w !== '');
}

/** Substitutions, deletions and insertions that turn `reference` into `hypothesis` (Levenshtein over words). */
export function wordEdits(reference: readonly string[], hypothesis: readonly string[]): number {
  let previous = Array.from({ length: hypothesis.length + 1 }, (_, j) => j);
  for (let i = 1; i <= reference.length; i++) {
    const row = [i];
    for (let j = 1; j <= hypothesis.length; j++) {
      const same = reference[i - 1] === hypothesis[j - 1];
      row.push(Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (same ? 0 : 1)));
    }
    previous = row;
  }
  return previous[hypothesis.length]!;
}

/** Word error rate of `hypothesis` against `reference` (texts; normalized here). */
export function wordErrorRate(reference: string, hypothesis: string): number {
  const ref = normalizeWords(reference);
  if (ref.length === 0) throw new RangeError('an empty reference has no word error rate');
  return wordEdits(ref, normalizeWords(hypothesis)) / ref.length;
}

export interface ReferenceRecording {
  /** Path under the media directory, as SOURCES.tsv names it. */
  file: string;
  text: string;
}

/**
 * The English recordings of the shared media with a reference text in SOURCES.tsv: in its
 * `reference_text` column, or in the file that column points to (`see X`: a Rev.ai word-level
 * JSON, or an STM of turns). Arabic (`ar/`) recordings are left out.
 */
export function englishReferences(media = MEDIA_DIR): ReferenceRecording[] {
  const sources = join(media, 'SOURCES.tsv');
  if (!existsSync(sources)) return [];
  const rows = readFileSync(sources, 'utf8').trim().split('\n').slice(1);
  const out: ReferenceRecording[] = [];
  for (const row of rows) {
    const cells = row.split('\t');
    const file = cells[0]!;
    const reference = cells[6]?.trim() ?? '';
    if (
      file.startsWith('ar/') ||
      reference === '' ||
      !/\.(wav|mp3|flac|m4a|ogg|opus|alaw|mulaw|webm)$/.test(file)
    )
      continue;
    const pointer = /^see (\S+)/.exec(reference);
    const text = pointer ? referenceFromFile(join(media, file, '..', pointer[1]!)) : reference;
    if (text !== undefined && existsSync(join(media, file))) out.push({ file, text });
  }
  return out;
}

function referenceFromFile(path: string): string | undefined {
  if (!existsSync(path)) return undefined;
  const content = readFileSync(path, 'utf8');
  if (path.endsWith('.json')) {
    const json = JSON.parse(content) as { monologues: { elements: { type: string; value: string }[] }[] };
    return json.monologues
      .flatMap((m) => m.elements.filter((e) => e.type === 'text').map((e) => e.value))
      .join(' ');
  }
  if (path.endsWith('.stm')) {
    // `file channel speaker start end text...`
    return content
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => line.trim().split(/\s+/).slice(5).join(' '))
      .join(' ');
  }
  return undefined;
}

/** A 16 kHz mono PCM16 WAV of `input` made by ffmpeg, at `output`. */
export async function ffmpegWav16k(input: string, output: string): Promise<void> {
  await run('ffmpeg', [
    '-hide_banner',
    '-loglevel',
    'error',
    '-nostdin',
    '-y',
    '-i',
    input,
    '-ar',
    '16000',
    '-ac',
    '1',
    '-c:a',
    'pcm_s16le',
    output,
  ]);
}

/**
 * PocketSphinx alone: `pocketsphinx_continuous` on a 16 kHz mono WAV, with the engine's speed
 * settings (but its own voice activity detection, which cuts its utterances). Its text.
 */
export async function pocketSphinxDirect(wav16k: string): Promise<string> {
  const install = findPocketSphinx();
  if (!install) throw new Error('PocketSphinx is not installed');
  const { stdout } = await run(
    install.continuous,
    ['-infile', wav16k, '-logfn', '/dev/null', ...SPEED_ARGS],
    {
      maxBuffer: 1 << 24,
    },
  );
  return stdout.split('\n').join(' ');
}

export type PipelineMode = 'live' | 'batch' | 'fast';

/**
 * The words the service gives for a file through the whole pipeline: `live` is file → decode
 * → resample → frames → a live session (the words of its speech-final records, in order);
 * `batch` a batch job's `final_result`; `fast` fast transcription's words. `decodeOptions`
 * declares a headerless input (the negative controls).
 */
export async function pipelineTranscript(
  client: SpeechClient,
  file: string,
  mode: PipelineMode,
  decodeOptions: DecodeOptions = {},
): Promise<string> {
  if (mode === 'batch') {
    const job = await client.batch.transcribe(file, { language: 'en' });
    if (job.status !== 'done') throw new Error(`the batch job ended ${job.status}`);
    return job.final_result;
  }
  if (mode === 'fast') return (await client.fast.transcribeFinal(file, { language: 'en' })).transcription;
  const records: AsrRecord[] = [];
  await pipeline(
    fromFile(file),
    decode(decodeOptions),
    toFrames({ language: 'en' }),
    sttStream({ client }),
    new Writable({
      objectMode: true,
      write(record: AsrRecord, _encoding, callback) {
        records.push(record);
        callback();
      },
    }),
  );
  return records
    .filter((r) => r.is_speech_final)
    .map((r) => r.transcription)
    .join(' ');
}
