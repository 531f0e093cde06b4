// `speechpipe transcribe`: transcribe files or whole directories to captions and JSON, with a
// resumable manifest: every input ends with its results written or a recorded reason.

import { createHash } from 'node:crypto';
import { access, readdir, rm, stat } from 'node:fs/promises';
import { extname, join, relative, resolve } from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';
import { BatchResultLostError } from '../client/batch.ts';
import type { SpeechClient } from '../client/index.ts';
import { SpeechpipeError, SpeechServiceError } from '../protocol/errors.ts';
import type { JobV2 } from '../protocol/jobs.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import type { WordSegment } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import { Manifest, type ManifestEntry, type ManifestSettings } from '../sinks/manifest.ts';
import { isAtomicTemporary, writeFileAtomic } from '../sinks/text-file.ts';
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
  --job-timeout SEC     batch: stop waiting for a job after this long (default 14400); the
                        job id is recorded, and --resume waits for that job again
  --resume              skip inputs the manifest says are done, unchanged, with the same
                        mode, language and speakers, and whose outputs asked for exist;
                        wait for batch jobs an earlier run submitted instead of submitting again;
                        remove the temporary files a killed run left in DIR
  --follow-symlinks     follow symlinks wherever they lead (default: a file symlink only when
                        it stays inside the inputs given, no directory symlink)

Hidden entries, FIFOs, sockets, devices and symlinks not followed are recorded in the
manifest as skipped, with the reason.

Two inputs whose results would have the same name (a/talk.mp3 and b/talk.mp3 given
directly) keep them apart: the later one's name gets ~ and 8 hex digits of its path's hash.

Talks to API_URL with API_KEY, or to the built-in emulator when API_URL is not set.
Exit code: 0 when every input is done, 1 when any failed (see the manifest), 2 on bad usage or
environment, 130 when interrupted (SIGINT, SIGTERM; --resume continues).`;

interface Options {
  out: string;
  mode: Mode;
  formats: Format[];
  language: Language;
  speakers: boolean;
  concurrency: number;
  resume: boolean;
  followSymlinks: boolean;
  jobTimeoutMs: number;
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
      'job-timeout': { type: 'string', default: '14400' },
      resume: { type: 'boolean', default: false },
      'follow-symlinks': { type: 'boolean', default: false },
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
  const jobTimeoutSec = Number(values['job-timeout']);
  if (!Number.isFinite(jobTimeoutSec) || jobTimeoutSec <= 0)
    throw new UsageError('--job-timeout must be a positive number of seconds');
  if (values.speakers && mode === 'fast')
    throw new UsageError('--speakers needs --mode live or batch (fast transcription has no speakers)');
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
      followSymlinks: values['follow-symlinks']!,
      jobTimeoutMs: jobTimeoutSec * 1000,
    },
  };
}

class UsageError extends Error {}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it escapes
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

/** Control characters (terminal escapes among them) shown as \xNN. */
function printable(text: string): string {
  return text.replace(CONTROL, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/** Remove the temporary files of writeFileAtomic (ours only, by their name) under `dir`. */
async function removeTemporaryFiles(dir: string): Promise<number> {
  let removed = 0;
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    if (!entry.isFile() || !isAtomicTemporary(entry.name)) continue;
    await rm(join(entry.parentPath, entry.name), { force: true });
    removed++;
  }
  return removed;
}

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

/**
 * How a batch input's job is found: an earlier run's (`pending`), or submitted now and recorded
 * at once (`submitted`). `jobId` is the job holding the work while it is waited for, so a
 * failure can be recorded with it and a later `--resume` waits for that job again.
 */
interface JobRef {
  pending?: string;
  jobId?: string;
  submitted(jobId: string): Promise<void>;
}

async function transcribeBatch(
  client: SpeechClient,
  file: AudioFile,
  options: Options,
  signal: AbortSignal,
  ref: JobRef,
): Promise<Result> {
  const wait = (jobId: string) => {
    ref.jobId = jobId;
    return client.batch.wait(jobId, { signal, timeoutMs: options.jobTimeoutMs });
  };
  let job: JobV2 | undefined;
  if (ref.pending !== undefined) {
    try {
      job = await wait(ref.pending);
    } catch (err) {
      // The earlier job is gone, or its result was lost: submit again.
      const gone =
        (err instanceof SpeechServiceError && err.code === 'TRANSCRIPTION_JOB_NOT_FOUND') ||
        err instanceof BatchResultLostError;
      if (!gone) throw err;
    }
    if (job?.status === 'cleared') job = undefined;
  }
  if (job === undefined) {
    ref.jobId = undefined;
    const ack = await client.batch.submit(file.path, {
      language: options.language,
      diarization: options.speakers,
      signal,
    });
    await ref.submitted(ack.jobId);
    job = await wait(ack.jobId);
  }
  if (job.status !== 'done')
    throw new SpeechpipeError('ERR_JOB_NOT_DONE', `batch job ${ref.jobId} ended ${job.status}`);
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

/**
 * Result names: the input's path relative to the directory given (a file given directly: its
 * base name). When two inputs would share one, the later gets `~` and 8 hex digits of its
 * absolute path's hash. Names the manifest recorded stay with their inputs, so a name does not
 * move to another input because one became unreadable, was deleted or was added.
 */
class OutputNames {
  readonly #owner = new Map<string, string>();
  readonly #recorded = new Map<string, string>();

  constructor(out: string, entries: readonly ManifestEntry[], formats: readonly string[]) {
    for (const entry of entries) {
      const first = entry.outputs?.[0];
      if (first === undefined) continue;
      const ext = formats.find((f) => first.endsWith(`.${f}`)) ?? extname(first).slice(1);
      const name = relative(out, first.slice(0, first.length - ext.length - 1));
      const path = resolve(entry.input);
      // Two entries with one name (a manifest written before names were kept apart): the
      // first keeps it, the other gets a name of its own when it runs again.
      const owner = this.#owner.get(name);
      if (owner !== undefined && owner !== path) continue;
      this.#owner.set(name, path);
      this.#recorded.set(path, name);
    }
  }

  for(file: AudioFile): string {
    const path = resolve(file.path);
    const recorded = this.#recorded.get(path);
    if (recorded !== undefined) return recorded;
    const wanted = fitName(file.relative, path);
    const owner = this.#owner.get(wanted);
    if (owner === undefined || owner === path) {
      this.#owner.set(wanted, path);
      this.#recorded.set(path, wanted);
      return wanted;
    }
    const name = `${fitName(file.relative, path, 9)}~${pathHash(path)}`;
    this.#owner.set(name, path);
    this.#recorded.set(path, name);
    return name;
  }
}

const pathHash = (path: string) => createHash('sha256').update(path).digest('hex').slice(0, 8);

/** Bytes a result name may use: 255 less the longest `.format` (and writeFileAtomic's temp
 * files fall back to a short name of their own). */
const NAME_BYTES = 255 - '.json'.length;

/**
 * The result name for `relative`, its last segment cut (at a character boundary) so that with
 * `reserve` more bytes and the format it stays within the 255-byte limit: a cut name ends in
 * `~` and 8 hex digits of the input's path, stable across runs.
 */
function fitName(relative: string, path: string, reserve = 0): string {
  const slash = Math.max(relative.lastIndexOf('/'), relative.lastIndexOf('\\'));
  const dir = relative.slice(0, slash + 1);
  const base = relative.slice(slash + 1);
  const limit = NAME_BYTES - reserve;
  if (Buffer.byteLength(base) <= limit) return relative;
  let cut = '';
  for (const ch of base) {
    if (Buffer.byteLength(cut + ch) > limit - 9) break;
    cut += ch;
  }
  return `${dir}${cut}~${pathHash(path)}`;
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
  // Names come from the file system: a control character or a terminal escape in one is shown
  // escaped, never sent to the terminal.
  const log = (line: string) => process.stderr.write(`${printable(line)}\n`);
  // A path given that cannot be read is a mistake in the command line: nothing runs.
  for (const input of inputs) {
    const problem = await stat(input).then(
      (info) => (info.isFile() || info.isDirectory() ? undefined : 'neither a file nor a directory'),
      (err: NodeJS.ErrnoException) => err.code ?? err.message,
    );
    if (problem !== undefined) {
      process.stderr.write(`speechpipe transcribe: cannot read ${input}: ${problem}\n\n${USAGE}\n`);
      return 2;
    }
  }
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
  if (options.resume) {
    const removed = await removeTemporaryFiles(options.out);
    if (removed > 0) log(`removed ${removed} temporary file(s) a stopped run left in ${options.out}`);
  }
  const service = await openService(process.env, log);
  const counts = { done: 0, failed: 0, skipped: 0 };
  const settings: ManifestSettings = {
    mode: options.mode,
    language: options.language,
    speakers: options.speakers,
  };
  const names = new OutputNames(options.out, manifest.entries(), FORMATS);
  const one = async (file: AudioFile) => {
    const identity = { input: file.path, size: file.size, mtimeMs: file.mtimeMs, settings };
    // Claimed even when unreadable: names must not depend on which inputs could be read.
    const name = names.for(file);
    if (file.skipped) {
      await manifest.record({ ...identity, status: 'skipped', error: file.skipped });
      counts.skipped++;
      log(`skipped ${file.relative}: ${file.skipped.code}: ${file.skipped.message}`);
      return;
    }
    if (file.unreadable) {
      // A batch job that holds this input's work stays recorded for a later --resume.
      const previous = manifest.get(file.path);
      const job =
        previous?.jobId !== undefined && previous.status !== 'done'
          ? {
              size: previous.size,
              mtimeMs: previous.mtimeMs,
              settings: previous.settings,
              jobId: previous.jobId,
            }
          : {};
      await manifest.record({ ...identity, ...job, status: 'failed', error: file.unreadable });
      counts.failed++;
      log(`failed  ${file.relative}: ${file.unreadable.code}: ${file.unreadable.message}`);
      return;
    }
    const outputs = options.formats.map((format) => join(options.out, `${name}.${format}`));
    if (
      options.resume &&
      manifest.isDone(file, { settings, outputs }) &&
      (
        await Promise.all(
          outputs.map((o) =>
            access(o).then(
              () => true,
              () => false,
            ),
          ),
        )
      ).every(Boolean)
    ) {
      counts.skipped++;
      return;
    }
    const started = performance.now();
    const job: JobRef = {
      ...(options.resume ? { pending: manifest.pendingJob(file, settings) } : {}),
      submitted: (jobId) => manifest.record({ ...identity, status: 'submitted', jobId }),
    };
    try {
      const signal = controller.signal;
      const result =
        options.mode === 'batch'
          ? await transcribeBatch(service.client, file, options, signal, job)
          : options.mode === 'fast'
            ? await transcribeFast(service.client, file, options, signal)
            : await transcribeLive(service.client, file, options, signal);
      for (const [i, format] of options.formats.entries())
        await writeFileAtomic(outputs[i]!, render(format, file, result, options));
      await manifest.record({
        ...identity,
        status: 'done',
        ...(job.jobId === undefined ? {} : { jobId: job.jobId }),
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
        ...identity,
        status: 'failed',
        ...(job.jobId === undefined ? {} : { jobId: job.jobId }),
        error: { code, message },
      });
      counts.failed++;
      log(`failed  ${file.relative}: ${code}: ${message}`);
    }
  };
  try {
    const running = new Set<Promise<void>>();
    try {
      for await (const file of walkAudioFiles(inputs, {
        signal: controller.signal,
        followSymlinks: options.followSymlinks,
      })) {
        const task = one(file).finally(() => running.delete(task));
        running.add(task);
        if (running.size >= options.concurrency) await Promise.race(running);
      }
    } catch (err) {
      // Interrupted mid-walk: the inputs in flight end below, the rest wait for --resume.
      if (!controller.signal.aborted) throw err;
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
