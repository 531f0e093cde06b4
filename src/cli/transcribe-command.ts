// `speechpipe transcribe`: transcribe files or whole directories to captions and JSON, with a
// resumable manifest: every input ends with its results written or a recorded reason.

import { existsSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import {
  ARCHIVE_FORMATS,
  type ArchiveEvent,
  type ArchiveFormat,
  type ArchiveMode,
  type ArchiveRunOptions,
  type ArchiveSummary,
  transcribeArchive,
} from '../archive/index.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import { ArchiveProgress, countsText, type ProgressMode } from './archive-progress.ts';
import { openService } from './service.ts';
import { badUsage, parseCommandArgs, UsageError } from './usage.ts';

const FORMATS = ARCHIVE_FORMATS;
type Format = ArchiveFormat;
type Mode = ArchiveMode;
const PROGRESS = ['auto', 'tty', 'plain', 'json'] as const;

export const USAGE = `usage: speechpipe transcribe <file|dir>... --out DIR [options]

  --out DIR             where results go (DIR/<relative path>.<format>) and DIR/manifest.ndjson
  --mode live|batch|fast
                        live: stream through realtime ASR (default); batch: a batch job per
                        file; fast: fast transcription (bounded files)
  --format LIST         comma-separated: vtt,srt,txt,json,svg (default vtt,json); svg: the
                        speaker timeline (with --speakers), one lane a speaker, words on hover
  --language L          auto, en, ar, codeswitch (default auto)
  --speakers            label speakers (live: realtime diarization; batch: diarization)
  --concurrency N       files at once (default: what the plan allows for the mode: live and
                        fast their account limit, batch 4x its limit, as waiting jobs hold
                        no slot); the largest files start first
  --include GLOB        only files matching GLOB (relative to the directory given; repeatable)
  --exclude GLOB        leave out files and directories matching GLOB (repeatable)
  --job-timeout SEC     batch: stop waiting for a job after this long (default 14400); the
                        job id is recorded, and --resume waits for that job again
  --resume              skip inputs the manifest says are done, unchanged, with the same
                        mode, language, speakers and service (not compared with --queue),
                        and whose outputs asked for exist;
                        wait for batch jobs an earlier run submitted instead of submitting again;
                        remove the temporary files a killed run left in DIR
  --follow-symlinks     follow symlinks wherever they lead (default: a file symlink only when
                        it stays inside the inputs given, no directory symlink)
  --progress MODE       auto (default): a live display on a terminal, else a line per file;
                        tty, plain, or json: the run's events as NDJSON on stderr

Cluster mode (BullMQ on Redis; start workers with speechpipe worker --queue URL):
  --queue URL           redis://HOST:PORT: add each input as a job and follow the run to its
                        end (same display and manifest); inputs and DIR must be on storage
                        every worker sees. The same inputs with the same settings add no job
                        again: running the command again follows the jobs already there (a
                        job done whose result files are gone runs again)
  --no-wait             add the jobs and exit (1 when an input could not be read: it is
                        recorded failed); run again (with --resume) to follow and write
                        the manifest
  --queue-name NAME     default speechpipe-archive
  --account-concurrency N
                        operations in flight across all workers (the account's concurrency
                        for the mode's workload; default 8), set on the queue
  With --queue, --resume also retries this run's failed jobs and resumes a queue a refused key
  stopped; --concurrency is the workers' (speechpipe worker --concurrency).

Audio and video containers are taken (wav mp3 flac ogg opus m4a aac webm mp4 mkv mov ts mxf
amr 3gp and more), and files without an extension whose content is media. Hidden entries,
FIFOs, sockets, devices and symlinks not followed are recorded in the manifest as skipped,
with the reason.

Two inputs whose results would have the same name (a/talk.mp3 and b/talk.mp3 given
directly) keep them apart: the later one's name gets ~ and 8 hex digits of its path's hash.

A key the service refuses (401, 403) stops the run at the first file. When the service cannot
be reached, no file starts until it answers again (after 10 minutes the run stops). Inputs not
attempted are not recorded: --resume runs them.

Talks to API_URL with API_KEY, or to the built-in emulator when API_URL is not set.
Exit code: 0 when every input is done, 1 when any failed (see the manifest) or the service
stayed unreachable, 2 on bad usage or environment (a refused key), 130 when interrupted
(SIGINT, SIGTERM; --resume continues).`;

interface Options {
  out: string;
  mode: Mode;
  formats: Format[];
  language: Language;
  speakers: boolean;
  concurrency: number | undefined;
  resume: boolean;
  followSymlinks: boolean;
  jobTimeoutMs: number;
  include: string[];
  exclude: string[];
  progress: ProgressMode | 'auto';
  queue: string | undefined;
  queueName: string | undefined;
  wait: boolean;
  accountConcurrency: number | undefined;
}

function parse(args: string[]): { inputs: string[]; options: Options } {
  const { values, positionals } = parseCommandArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: 'string' },
      mode: { type: 'string', default: 'live' },
      format: { type: 'string', default: 'vtt,json' },
      language: { type: 'string', default: 'auto' },
      speakers: { type: 'boolean', default: false },
      concurrency: { type: 'string' },
      'job-timeout': { type: 'string', default: '14400' },
      resume: { type: 'boolean', default: false },
      'follow-symlinks': { type: 'boolean', default: false },
      include: { type: 'string', multiple: true },
      exclude: { type: 'string', multiple: true },
      progress: { type: 'string', default: 'auto' },
      queue: { type: 'string' },
      'queue-name': { type: 'string' },
      'no-wait': { type: 'boolean', default: false },
      'account-concurrency': { type: 'string' },
    },
  });
  if (positionals.length === 0) throw new UsageError('no inputs');
  if (!values.out) throw new UsageError('--out is required');
  const mode = values.mode as Mode;
  if (!['live', 'batch', 'fast'].includes(mode)) throw new UsageError(`unknown --mode ${values.mode}`);
  const formats = values.format!.split(',').map((f) => f.trim()) as Format[];
  for (const f of formats) if (!FORMATS.includes(f)) throw new UsageError(`unknown format ${f}`);
  if (!isLanguage(values.language)) throw new UsageError(`unknown --language ${values.language}`);
  const concurrency = values.concurrency === undefined ? undefined : Number(values.concurrency);
  if (concurrency !== undefined && (!Number.isSafeInteger(concurrency) || concurrency < 1))
    throw new UsageError('--concurrency must be a positive integer');
  const jobTimeoutSec = Number(values['job-timeout']);
  if (!Number.isFinite(jobTimeoutSec) || jobTimeoutSec <= 0)
    throw new UsageError('--job-timeout must be a positive number of seconds');
  if (formats.includes('svg') && !values.speakers)
    throw new UsageError('--format svg draws the speaker timeline: it needs --speakers');
  if (values.speakers && mode === 'fast')
    throw new UsageError('--speakers needs --mode live or batch (fast transcription has no speakers)');
  const progress = values.progress as Options['progress'];
  if (!PROGRESS.includes(progress)) throw new UsageError(`unknown --progress ${values.progress}`);
  for (const glob of [...(values.include ?? []), ...(values.exclude ?? [])])
    if (glob.trim() === '') throw new UsageError('--include and --exclude need a nonempty glob');
  if (values['no-wait'] && !values.queue) throw new UsageError('--no-wait needs --queue');
  if (values['account-concurrency'] !== undefined && !values.queue)
    throw new UsageError('--account-concurrency needs --queue');
  const accountConcurrency =
    values['account-concurrency'] === undefined ? undefined : Number(values['account-concurrency']);
  if (
    accountConcurrency !== undefined &&
    !(Number.isSafeInteger(accountConcurrency) && accountConcurrency >= 1)
  )
    throw new UsageError('--account-concurrency must be a positive integer');
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
      include: values.include ?? [],
      exclude: values.exclude ?? [],
      progress,
      queue: values.queue,
      queueName: values['queue-name'],
      wait: !values['no-wait'],
      accountConcurrency,
    },
  };
}

export async function run(args: string[]): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('transcribe', err);
  }
  const { inputs, options } = parsed;
  // A path given that cannot be read is a mistake in the command line: nothing runs.
  for (const input of inputs) {
    const problem = await stat(input).then(
      (info) => (info.isFile() || info.isDirectory() ? undefined : 'neither a file nor a directory'),
      (err: NodeJS.ErrnoException) => err.code ?? err.message,
    );
    if (problem !== undefined) {
      return badUsage('transcribe', `cannot read ${input}: ${problem}`);
    }
  }
  const progress = new ArchiveProgress(
    options.progress === 'auto' ? (process.stderr.isTTY ? 'tty' : 'plain') : options.progress,
    process.stderr,
  );
  const controller = new AbortController();
  // First signal: stop gracefully (in-flight inputs are cancelled, the manifest is flushed).
  // A second one, or 10 s without finishing, exits at once.
  const onSignal = () => {
    if (controller.signal.aborted) process.exit(130);
    controller.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
    setTimeout(() => {
      progress.log('interrupted: did not stop within 10 s, exiting');
      process.exit(130);
    }, 10_000).unref();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let summary: ArchiveSummary | undefined;
  const cleanup = () => {
    progress.close();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
  if (options.queue !== undefined) {
    const queued = await runQueued(inputs, options, options.queue, progress, controller.signal).finally(
      cleanup,
    );
    if (typeof queued === 'number') return queued;
    summary = queued;
  } else {
    const service = await openService(process.env, (line) => progress.log(line));
    try {
      for await (const event of transcribeArchive(inputs, {
        ...runOptionsOf(options),
        client: service.client,
        service: service.name,
        ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
        signal: controller.signal,
      })) {
        if (event.type === 'summary') summary = event;
        progress.event(event as ArchiveEvent | ArchiveSummary);
      }
    } finally {
      cleanup();
      await service.close();
    }
  }
  if (controller.signal.aborted || summary === undefined) {
    const counts = countsText(summary ?? progress.counts(), { left: true });
    process.stderr.write(`interrupted: ${counts}; run again with --resume to continue\n`);
    return 130;
  }
  const notAttempted = summary.notAttempted > 0 ? `, ${summary.notAttempted} not attempted` : '';
  // A run that recorded nothing (a key refused at the first input) wrote no manifest.
  const manifest = existsSync(summary.manifest) ? summary.manifest : 'none written (nothing recorded)';
  process.stdout.write(`${countsText(summary)}${notAttempted}; manifest: ${manifest}\n`);
  if (summary.stopped !== undefined) {
    const refused = summary.stopped.code !== 'ERR_SERVICE_UNREACHABLE';
    process.stderr.write(
      `speechpipe transcribe: stopped: ${summary.stopped.message}\n${summary.notAttempted} input(s) not attempted: fix this and run again with --resume\n`,
    );
    return refused ? 2 : 1;
  }
  return summary.failed > 0 ? 1 : 0;
}

/** The run's options, the same for a local run and a cluster's. */
function runOptionsOf(options: Options): ArchiveRunOptions {
  const { out, mode, language, speakers, formats, resume, jobTimeoutMs, include, exclude, followSymlinks } =
    options;
  return { out, mode, language, speakers, formats, resume, jobTimeoutMs, include, exclude, followSymlinks };
}

/**
 * Cluster mode: add the jobs, then follow the run (the summary), or with --no-wait report what
 * was added (an exit code).
 */
async function runQueued(
  inputs: string[],
  options: Options,
  queue: string,
  progress: ArchiveProgress,
  signal: AbortSignal,
): Promise<ArchiveSummary | number> {
  const { enqueueArchive } = await import('../archive/cluster/index.ts');
  let enqueued: Awaited<ReturnType<typeof enqueueArchive>>;
  try {
    enqueued = await enqueueArchive(inputs, {
      ...runOptionsOf(options),
      queue,
      ...(options.queueName ? { queueName: options.queueName } : {}),
      ...(options.accountConcurrency === undefined ? {} : { accountConcurrency: options.accountConcurrency }),
      signal,
    });
  } catch (err) {
    if (signal.aborted) {
      process.stderr.write(
        'interrupted: the jobs added so far stay queued; run the command again to add the rest\n',
      );
      return 130;
    }
    const code = (err as { code?: string }).code;
    if (code !== 'ERR_QUEUE_UNREACHABLE' && code !== 'ERR_QUEUE_URL') throw err;
    process.stderr.write(`speechpipe transcribe: ${(err as Error).message}\n`);
    return 2;
  }
  progress.log(
    `queue: ${enqueued.added} job(s) added, ${enqueued.existing} queued already, ${enqueued.notQueued} not queued`,
  );
  if (!options.wait) {
    await enqueued.close();
    const failed = enqueued.failed > 0 ? ` (${enqueued.failed} failed: see the manifest)` : '';
    process.stdout.write(
      `${enqueued.added} added, ${enqueued.existing} queued already, ${enqueued.notQueued} not queued${failed}; run again with --resume to follow and write the manifest\n`,
    );
    // Inputs the walk could not read are recorded failed now, as a local run's are.
    return enqueued.failed > 0 ? 1 : 0;
  }
  let summary: ArchiveSummary | undefined;
  for await (const event of enqueued.follow({ signal })) {
    if (event.type === 'summary') summary = event;
    progress.event(event);
  }
  if (signal.aborted || summary === undefined) {
    const counts = countsText(summary ?? progress.counts(), { left: true });
    process.stderr.write(
      `interrupted: ${counts} (the jobs go on in the workers); run again with --resume to follow\n`,
    );
    return 130;
  }
  return summary;
}
