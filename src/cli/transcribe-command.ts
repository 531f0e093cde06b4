// `speechpipe transcribe`: transcribe files or whole directories to captions and JSON, with a
// resumable manifest: every input ends with its results written or a recorded reason.

import { join } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import type { SpeechClient } from '../client/index.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import type { WordSegment } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import { Manifest } from '../sinks/manifest.ts';
import { writeFileAtomic } from '../sinks/text-file.ts';
import { type AudioFile, fromFile, walkAudioFiles } from '../sources/files.ts';
import { alignSpeakers, type SpeakerWord } from '../transforms/align-speakers.ts';
import {
  assembleTranscript,
  type FinalEvent,
  type TranscriptEvent,
} from '../transforms/assemble-transcript.ts';
import { decode } from '../transforms/decode.ts';
import { diarizationStream, sttStream } from '../transforms/live-stream.ts';
import {
  type DiarizationEvent,
  mergeDiarization,
  type SpeakerSegment,
} from '../transforms/merge-diarization.ts';
import { tee } from '../transforms/tee.ts';
import { renderCaptions } from '../transforms/to-captions.ts';
import { toFrames } from '../transforms/to-frames.ts';
import { openService } from './service.ts';

const FORMATS = ['vtt', 'srt', 'txt', 'json'] as const;
type Format = (typeof FORMATS)[number];
type Mode = 'live' | 'batch' | 'fast';

export const USAGE = `usage: speechpipe transcribe <file|dir>... --out DIR [options]

  --out DIR             where results go (DIR/<relative path>.<format>) and DIR/manifest.ndjson
  --mode live|batch|fast
                        live: stream through realtime ASR (default); batch: a batch job per
                        file; fast: fast transcription (bounded files)
  --format LIST         comma-separated: vtt,srt,txt,json (default vtt,json)
  --language L          auto, en, ar, codeswitch (default auto)
  --speakers            label speakers (live: realtime diarization; batch: diarization)
  --concurrency N       files at once (default 2)
  --resume              skip inputs the manifest says are done and unchanged

Talks to API_URL with API_KEY, or to the built-in emulator when API_URL is not set.
Exit code: 0 when every input is done, 1 when any failed (see the manifest), 2 on bad usage.`;

interface Options {
  out: string;
  mode: Mode;
  formats: Format[];
  language: Language;
  speakers: boolean;
  concurrency: number;
  resume: boolean;
}

interface Result {
  words: SpeakerWord[];
  transcript: string;
  audioSeconds?: number;
  /** Input the decoder skipped (ffmpeg's words): recorded, since the output stands without it. */
  warnings?: Array<{ code: string; message: string }>;
}

function parse(args: string[]): { inputs: string[]; options: Options } {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: 'string' },
      mode: { type: 'string', default: 'live' },
      format: { type: 'string', default: 'vtt,json' },
      language: { type: 'string', default: 'auto' },
      speakers: { type: 'boolean', default: false },
      concurrency: { type: 'string', default: '2' },
      resume: { type: 'boolean', default: false },
    },
  });
  if (positionals.length === 0) throw new UsageError('no inputs');
  if (!values.out) throw new UsageError('--out is required');
  const mode = values.mode as Mode;
  if (!['live', 'batch', 'fast'].includes(mode)) throw new UsageError(`unknown --mode ${values.mode}`);
  const formats = values.format!.split(',').map((f) => f.trim()) as Format[];
  for (const f of formats) if (!FORMATS.includes(f)) throw new UsageError(`unknown format ${f}`);
  if (!isLanguage(values.language)) throw new UsageError(`unknown --language ${values.language}`);
  const concurrency = Number(values.concurrency);
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    throw new UsageError('--concurrency must be a positive integer');
  return {
    inputs: positionals,
    options: {
      out: values.out,
      mode,
      formats,
      language: values.language,
      speakers: values.speakers!,
      concurrency,
      resume: values.resume!,
    },
  };
}

class UsageError extends Error {}

function collect<T>(into: T[]): Writable {
  return new Writable({
    objectMode: true,
    write(chunk: T, _encoding, callback) {
      into.push(chunk);
      callback();
    },
  });
}

/** decode → toFrames → sttStream → assembleTranscript, and diarization alongside when asked. */
async function transcribeLive(
  client: SpeechClient,
  file: AudioFile,
  options: Options,
  signal: AbortSignal,
): Promise<Result> {
  const events: TranscriptEvent[] = [];
  const diarization: DiarizationEvent[] = [];
  const warnings: Array<{ code: string; message: string }> = [];
  const decoder = decode({ signal });
  decoder.on('warning', (w: SpeechpipeError) => warnings.push({ code: w.code, message: w.message }));
  let audioBytes = 0;
  const counted = new PassThrough();
  counted.on('data', (chunk: Buffer) => (audioBytes += chunk.length));
  // The decoded audio feeds both streams; the slower one sets the pace.
  const split = tee(options.speakers ? 2 : 1);
  const [forAsr, forSpeakers] = split.branches;
  await Promise.all([
    pipeline(fromFile(file.path), decoder, counted, split.input, { signal }),
    pipeline(
      forAsr!,
      toFrames({ transport: 'http', language: options.language }),
      sttStream({ client }),
      assembleTranscript(),
      collect(events),
      { signal },
    ),
    forSpeakers
      ? pipeline(
          forSpeakers,
          toFrames({ transport: 'http', language: options.language }),
          diarizationStream({ client }),
          mergeDiarization(),
          collect(diarization),
          { signal },
        )
      : undefined,
  ]);
  const final = events.findLast((e): e is FinalEvent => e.type === 'final');
  if (!final)
    throw new SpeechpipeError('ERR_INCOMPLETE_STREAM', 'the transcript ended without its final event');
  const timeline = diarization.findLast((e) => e.type === 'timeline') as
    | { segments: SpeakerSegment[] }
    | undefined;
  return {
    words: alignSpeakers(final.words, timeline?.segments ?? [], {}),
    transcript: final.text,
    audioSeconds: audioBytes / LIVE_BYTES_PER_SECOND,
    ...(warnings.length > 0 ? { warnings } : {}),
  };
}

async function transcribeBatch(
  client: SpeechClient,
  file: AudioFile,
  options: Options,
  signal: AbortSignal,
): Promise<Result> {
  const job = await client.batch.transcribe(file.path, {
    language: options.language,
    diarization: options.speakers,
    signal,
  });
  if (job.status !== 'done')
    throw new SpeechpipeError('ERR_JOB_NOT_DONE', `batch job ${job.jobId} ended ${job.status}`);
  return {
    words: alignSpeakers(job.final_word_segments, job.diarization_segments, { mode: 'v1' }),
    transcript: job.final_result,
    audioSeconds: job.audio_duration,
  };
}

async function transcribeFast(
  client: SpeechClient,
  file: AudioFile,
  options: Options,
  signal: AbortSignal,
): Promise<Result> {
  const final = await client.fast.transcribeFinal(file.path, { language: options.language, signal });
  return {
    words: final.words.map((w: WordSegment) => ({ ...w, speaker: null })),
    transcript: final.transcription,
  };
}

function render(format: Format, file: AudioFile, result: Result, options: Options): string {
  if (format === 'vtt' || format === 'srt') return renderCaptions(result.words, { format });
  if (format === 'txt') return `${result.transcript}\n`;
  return `${JSON.stringify({ input: file.path, mode: options.mode, language: options.language, audioSeconds: result.audioSeconds, transcript: result.transcript, words: result.words }, null, 2)}\n`;
}

export async function run(args: string[]): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (err) {
    process.stderr.write(`speechpipe transcribe: ${(err as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  const { inputs, options } = parsed;
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const controller = new AbortController();
  // First signal: stop gracefully (in-flight inputs are cancelled, the manifest is flushed).
  // A second one, or 10 s without finishing, exits at once.
  const onSignal = () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
    setTimeout(() => {
      log('interrupted: did not stop within 10 s, exiting');
      process.exit(130);
    }, 10_000).unref();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const manifest = await Manifest.open(join(options.out, 'manifest.ndjson'));
  const service = await openService(process.env, log);
  const counts = { done: 0, failed: 0, skipped: 0 };
  const work = { live: transcribeLive, batch: transcribeBatch, fast: transcribeFast }[options.mode];
  const one = async (file: AudioFile) => {
    if (options.resume && manifest.isDone(file)) {
      counts.skipped++;
      return;
    }
    const started = performance.now();
    try {
      const result = await work(service.client, file, options, controller.signal);
      const outputs: string[] = [];
      for (const format of options.formats) {
        const path = join(options.out, `${file.relative}.${format}`);
        await writeFileAtomic(path, render(format, file, result, options));
        outputs.push(path);
      }
      await manifest.record({
        input: file.path,
        size: file.size,
        mtimeMs: file.mtimeMs,
        status: 'done',
        outputs,
        ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
        ...(result.warnings ? { warnings: result.warnings } : {}),
      });
      counts.done++;
      for (const w of result.warnings ?? []) log(`warning ${file.relative}: ${w.code}: ${w.message}`);
      log(
        `done    ${file.relative} (${result.words.length} words, ${((performance.now() - started) / 1000).toFixed(1)} s)`,
      );
    } catch (err) {
      if (controller.signal.aborted) return;
      const code = (err as { code?: string }).code ?? 'ERR_UNKNOWN';
      const message = err instanceof Error ? err.message : String(err);
      await manifest.record({
        input: file.path,
        size: file.size,
        mtimeMs: file.mtimeMs,
        status: 'failed',
        error: { code, message },
      });
      counts.failed++;
      log(`failed  ${file.relative}: ${code}: ${message}`);
    }
  };
  try {
    const running = new Set<Promise<void>>();
    for await (const file of walkAudioFiles(inputs, { signal: controller.signal })) {
      const task = one(file).finally(() => running.delete(task));
      running.add(task);
      if (running.size >= options.concurrency) await Promise.race(running);
    }
    await Promise.all(running);
  } finally {
    await manifest.flush();
    await service.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  if (controller.signal.aborted) {
    log('interrupted: run again with --resume to continue');
    return 130;
  }
  process.stdout.write(
    `${counts.done} done, ${counts.failed} failed, ${counts.skipped} skipped; manifest: ${manifest.path}\n`,
  );
  return counts.failed > 0 ? 1 : 0;
}
