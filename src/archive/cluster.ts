// Cluster mode: an archive's inputs as BullMQ jobs on Redis, transcribed by any number of
// worker processes. The enqueuer decides result names (as a local run would), adds one job per
// input with a deterministic id, and follows the run, writing the manifest alone; workers write
// result files. Account limits hold across workers: the queue's global concurrency bounds the
// operations in flight, a 429 rate-limits the whole queue for its Retry-After, and a batch job
// id is stored in the queue job the moment the service accepts it, so a worker that takes over
// a dead worker's job waits for that job instead of submitting again.
//
// bullmq, ioredis and prom-client are imported when used: `import 'speechpipe'` loads none.

import { createHash } from 'node:crypto';
import { access } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join, resolve } from 'node:path';
import type { Job, Queue, QueueEvents, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import type { SpeechClient } from '../client/index.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import { DEFAULT_LIMITS, type Workload } from '../protocol/limits.ts';
import { Manifest, type ManifestSettings } from '../sinks/manifest.ts';
import { type AudioFile, walkAudioFiles } from '../sources/files.ts';
import { probeAll, probeDuration } from './durations.ts';
import { type ArchiveEvent, type ArchiveSummary, emptySummary, type Reason, tally } from './events.ts';
import { isAuthFailure, isConnectionFailure } from './failures.ts';
import {
  type ArchiveFormat,
  type ArchiveRunOptions,
  type ArchiveSettings,
  resolveArchiveRun,
  settingsOf,
} from './settings.ts';
import { ArchiveStore, writeResults } from './store.ts';
import { transcribeFile } from './transcribe-file.ts';

/** The queue's name unless told otherwise (enqueuer and workers must agree). */
export const DEFAULT_QUEUE_NAME = 'speechpipe-archive';
const STOP_KEY = 'speechpipe:stopped';

/** What a queue job carries: everything a worker needs, nothing it must ask the enqueuer. */
export interface ArchiveJobData {
  /**
   * The input's absolute path: a worker's working directory is not the enqueuer's, so a path
   * given relative would name another file there, or none.
   */
  input: string;
  /** The path relative to the root given (a file given directly: its base name). */
  relative: string;
  /** Bytes, when it was queued (part of the job id: a changed input is a new job). */
  size: number;
  /** Modification time (ms since the epoch), when it was queued. */
  mtimeMs: number;
  settings: ArchiveSettings;
  formats: ArchiveFormat[];
  /** Result files (absolute paths), named by the enqueuer (the names a local run gives). */
  outputs: string[];
  /** Batch: stop waiting for the service job after this long. Default 4 h. */
  jobTimeoutMs?: number;
  /** Batch: the service job holding this input's work, stored the moment it was accepted. */
  serviceJobId?: string;
}

/** What a worker returns for a job done (its results are written). */
export interface ArchiveJobResult {
  /** Words in the transcript. */
  words: number;
  /** Audio seconds transcribed, when the mode reports them (not fast). */
  audioSeconds?: number;
  /** Batch: the service job that did the work. */
  jobId?: string;
  /** Input the decoder skipped (the results stand without it). */
  warnings?: Reason[];
  /** How long the worker spent on it. */
  elapsedMs: number;
}

/** Where the archive queue is: a Redis server and a queue name. */
export interface ClusterConnectionOptions {
  /** `redis://HOST:PORT[/DB]`. */
  queue: string;
  /** Default `speechpipe-archive`. */
  queueName?: string;
  /** How long the first connection to Redis may take. Default 5 s. */
  connectTimeoutMs?: number;
}

// ---------------------------------------------------------------------------------------------
// Redis

type Bull = typeof import('bullmq');

interface Connection {
  bull: Bull;
  /** A new connection (each BullMQ object gets its own); all are closed by close(). */
  open(): Redis;
  /** The connection of plain commands (our own keys). */
  control: Redis;
  close(): Promise<void>;
}

function redisAddress(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 6379}`;
  } catch {
    throw new SpeechpipeError('ERR_QUEUE_URL', `not a Redis URL: ${JSON.stringify(url)}`);
  }
}

/** How long closing waits for Redis (a command under way, QUIT, BullMQ's own close). */
const CLOSE_WAIT_MS = 1000;
/** How long a closing worker waits for BullMQ once its jobs ended (their completion written). */
const WORKER_CLOSE_WAIT_MS = 3000;

/**
 * Resolves when `work` settles or after `ms`, whichever comes first. A Redis command waits for
 * a lost connection to come back (maxRetriesPerRequest null): a close must not wait for that.
 */
function settledWithin(work: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (work === undefined) return Promise.resolve();
  return new Promise((done) => {
    const timer = setTimeout(done, ms);
    const end = () => {
      clearTimeout(timer);
      done();
    };
    work.then(end, end);
  });
}

/**
 * Connect to Redis within `timeoutMs` or fail with `ERR_QUEUE_UNREACHABLE` (never hang); later
 * losses of the connection are retried (BullMQ waits for it to come back). close() ends every
 * connection within a bound, Redis there or not.
 */
async function connect(url: string, timeoutMs = 5000): Promise<Connection> {
  const address = redisAddress(url);
  const [{ Redis }, bull] = await Promise.all([import('ioredis'), import('bullmq')]);
  let connected = false;
  const clients: Redis[] = [];
  const make = () => {
    const client = new Redis(url, {
      maxRetriesPerRequest: null,
      lazyConnect: true,
      connectTimeout: timeoutMs,
      // Before the first connection: fail at once (reported below); after it: reconnect.
      retryStrategy: (times) => (connected ? Math.min(times * 250, 3000) : null),
    });
    return track(client);
  };
  // BullMQ duplicates a connection it is given for its blocking commands (a Worker's, a
  // QueueEvents'): the copies are ours to close too, or one reconnecting to a Redis that is gone
  // would never be stopped.
  const track = (client: Redis): Redis => {
    // Errors surface where they matter (a command, BullMQ's own 'error' events).
    client.on('error', () => {});
    clients.push(client);
    const duplicate = client.duplicate.bind(client);
    client.duplicate = (override) => track(duplicate(override));
    return client;
  };
  const first = make();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      first.connect(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (err) {
    first.disconnect();
    throw new SpeechpipeError(
      'ERR_QUEUE_UNREACHABLE',
      `cannot connect to Redis at ${address}: ${(err as Error).message || String(err)}`,
    );
  } finally {
    clearTimeout(timer);
  }
  connected = true;
  return {
    bull,
    control: first,
    open() {
      const client = make();
      client.connect().catch(() => {});
      return client;
    },
    async close() {
      await Promise.all(
        clients.map(async (c) => {
          if (c.status === 'end') return;
          if (c.status === 'ready') {
            // QUIT answered, or dropped when it is not (Redis went away under it).
            await settledWithin(c.quit(), CLOSE_WAIT_MS);
            c.disconnect();
            return;
          }
          const reconnecting = c.status === 'reconnecting';
          c.disconnect();
          // A connection that is down: disconnect() stops its reconnecting, but ioredis then
          // neither fails the commands waiting for it nor ends it ('end' never comes). Ended
          // here as ioredis's own close handler ends one, so that what awaits either ends
          // (BullMQ's fetch loop, its close, and the lock-renewal timer it keeps until then).
          if (reconnecting) {
            const internals = c as unknown as {
              flushQueue?: (error: Error) => void;
              setStatus?: (status: string) => void;
            };
            internals.flushQueue?.(new Error('Connection is closed.'));
            internals.setStatus?.('end');
          }
        }),
      );
    },
  };
}

const workloadOf = (settings: ArchiveSettings): Workload =>
  settings.mode === 'batch' ? 'batch' : settings.mode === 'fast' ? 'fast' : 'realtime_asr';

/** A queue job's id: the same input (path, size, mtime) with the same settings and results. */
export function archiveJobId(
  data: Omit<ArchiveJobData, 'relative' | 'jobTimeoutMs' | 'serviceJobId'>,
): string {
  const key = JSON.stringify([
    resolve(data.input),
    data.size,
    data.mtimeMs,
    data.settings.mode,
    data.settings.language,
    data.settings.speakers,
    data.formats,
    data.outputs.map((o) => resolve(o)),
  ]);
  return `a${createHash('sha256').update(key).digest('hex').slice(0, 40)}`;
}

/** `CODE: message` (a failed job's reason) back to a reason. */
export function parseFailedReason(text: string | undefined): Reason {
  const m = /^([A-Z][A-Z0-9_]+): ([\s\S]*)$/.exec(text ?? '');
  if (m) return { code: m[1]!, message: m[2]! };
  if (/stalled more than/.test(text ?? ''))
    return { code: 'ERR_STALLED', message: `its workers died too often: ${text}` };
  return { code: 'ERR_UNKNOWN', message: text || 'the job failed' };
}

const fileOf = (data: ArchiveJobData): AudioFile => ({
  path: data.input,
  relative: data.relative,
  size: data.size,
  mtimeMs: data.mtimeMs,
});

// ---------------------------------------------------------------------------------------------
// Enqueue and follow

/** Options of {@link enqueueArchive}: the run's settings, as a local run's, and the queue's. */
export interface EnqueueArchiveOptions extends ClusterConnectionOptions, ArchiveRunOptions {
  /**
   * Operations in flight across all workers (the account's concurrency for the mode's
   * workload), set on the queue as its global concurrency. Default: the interface's plan
   * example for the workload (8).
   */
  accountConcurrency?: number;
  /** Connection failures: attempts per input. Default 3. */
  attempts?: number;
  /**
   * Stops enqueuing (the walk, the jobs not added yet): enqueueArchive rejects with the
   * signal's reason. Jobs added before stay queued; enqueuing again adds the rest.
   */
  signal?: AbortSignal;
}

/** A run added to the queue: what was added, and how to follow it. */
export interface EnqueuedArchive {
  /** Inputs the walk found. */
  total: number;
  /** Jobs added now. */
  added: number;
  /** Jobs that were in the queue already (the same input and settings). */
  existing: number;
  /** Inputs not queued: skipped by the walk, unreadable, or done in an earlier run (resume). */
  notQueued: number;
  /** Of those, inputs recorded failed (the walk could not read them). */
  failed: number;
  /**
   * Follow the run to its end: every input's events (as a local run's) and, last, the summary.
   * The manifest is written here. Breaking out (or aborting `signal`) stops following; the
   * jobs go on in the workers. Once.
   */
  follow(options?: {
    signal?: AbortSignal;
    /**
     * Jobs waiting, none active and no worker connected to the queue for this long: a `paused`
     * event with code `NO_WORKER` (and `resumed` once a worker serves it). Looked at every 2 s.
     * Default 30 s.
     */
    noWorkerMs?: number;
  }): AsyncGenerator<ArchiveEvent | ArchiveSummary, void, undefined>;
  /** Close the Redis connections (follow() closes them at its end). */
  close(): Promise<void>;
}

interface Tracked {
  file: AudioFile;
  outputs: string[];
}

/**
 * Walk `roots`, name every input's results as a local run would, and add a job per input to the
 * queue (an input already queued with the same settings adds nothing). Resolves once the jobs
 * are in the queue; `follow()` then follows the run.
 */
export async function enqueueArchive(
  roots: readonly string[],
  options: EnqueueArchiveOptions,
): Promise<EnqueuedArchive> {
  const began = performance.now();
  const run = resolveArchiveRun(options);
  const settings = settingsOf(run);
  const { formats, resume } = run;
  const connection = await connect(options.queue, options.connectTimeoutMs);
  const { bull } = connection;
  const name = options.queueName ?? DEFAULT_QUEUE_NAME;
  let queue: Queue | undefined;
  let events: QueueEvents | undefined;
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    // BullMQ's closes wait for Redis (a QueueEvents' for its connection to end): bounded.
    await settledWithin(Promise.all([events?.close(), queue?.close()]), CLOSE_WAIT_MS);
    await connection.close();
  };
  try {
    queue = new bull.Queue(name, { connection: connection.open() });
    queue.on('error', () => {});
    // Listening before the jobs are added: no event of theirs is missed.
    events = new bull.QueueEvents(name, { connection: connection.open() });
    events.on('error', () => {});
    await Promise.all([queue.waitUntilReady(), events.waitUntilReady()]);
    await queue.setGlobalConcurrency(
      options.accountConcurrency ?? DEFAULT_LIMITS.accountConcurrency[workloadOf(settings)],
    );
    // This run's store: names as a local run gives them. Temporary files are not removed
    // (workers may be writing).
    const manifest = await Manifest.open(join(run.out, 'manifest.ndjson'));
    const store = new ArchiveStore(run, manifest);
    const early: ArchiveEvent[] = [];
    const tracked = new Map<string, Tracked>();
    const toAdd: Array<{ name: string; data: ArchiveJobData; opts: { jobId: string } }> = [];
    const files: AudioFile[] = [];
    let notQueued = 0;
    let failed = 0;
    const { signal } = options;
    for await (const file of walkAudioFiles(roots, {
      ...run.walk,
      ...(signal ? { signal } : {}),
    })) {
      files.push(file);
      early.push({ type: 'queued', file });
      const plan = await store.plan(file);
      if (file.skipped) {
        notQueued++;
        await store.skipped(file, file.skipped);
        early.push({ type: 'skipped', file, reason: file.skipped });
        continue;
      }
      if (file.unreadable) {
        notQueued++;
        failed++;
        await store.failed(file, file.unreadable);
        early.push({ type: 'failed', file, error: file.unreadable });
        continue;
      }
      if (plan.action === 'skip') {
        notQueued++;
        early.push({
          type: 'skipped',
          file,
          reason: { code: 'ALREADY_DONE', message: 'done in an earlier run, unchanged' },
        });
        continue;
      }
      const data: ArchiveJobData = {
        input: resolve(file.path),
        relative: file.relative,
        size: file.size,
        mtimeMs: file.mtimeMs,
        settings,
        formats,
        outputs: plan.outputs.map((o) => resolve(o)),
        ...(run.jobTimeoutMs === undefined ? {} : { jobTimeoutMs: run.jobTimeoutMs }),
        // A job a local run submitted: waited for, not submitted again.
        ...(plan.pendingJob === undefined ? {} : { serviceJobId: plan.pendingJob }),
      };
      const jobId = archiveJobId(data);
      tracked.set(jobId, { file, outputs: plan.outputs });
      toAdd.push({ name: 'transcribe', data, opts: { jobId } });
    }
    await store.flush();
    // Which are queued already (deterministic ids: adding them again would add nothing).
    let existing = 0;
    const fresh: typeof toAdd = [];
    for (let i = 0; i < toAdd.length; i += 100) {
      signal?.throwIfAborted();
      const batch = toAdd.slice(i, i + 100);
      const found = await Promise.all(
        batch.map(async ({ data, opts }) => {
          const job = await queue!.getJob(opts.jobId);
          if (!job) return false;
          // A job done whose result files are gone since (removed, or the directory emptied)
          // runs again: following it would record the input done with nothing written.
          const written = await allExist(data.outputs);
          if (written && !resume) return true;
          const state = await job.getState();
          if (state === 'completed' && !written) await job.retry('completed', RETRY_AFRESH);
          else if (resume && state === 'failed') await job.retry('failed', RETRY_AFRESH);
          return true;
        }),
      );
      for (const [k, queued] of found.entries()) {
        if (queued) existing++;
        else fresh.push(batch[k]!);
      }
    }
    const attempts = options.attempts ?? 3;
    for (let i = 0; i < fresh.length; i += 100) {
      signal?.throwIfAborted();
      await queue.addBulk(
        fresh.slice(i, i + 100).map((j) => ({
          ...j,
          opts: {
            ...j.opts,
            attempts,
            backoff: { type: 'exponential', delay: 5000 },
            removeOnComplete: false,
            removeOnFail: false,
          },
        })),
      );
    }
    if (resume) {
      // A refused key stopped the queue: the key was fixed, go on.
      await connection.control.del(queue.toKey(STOP_KEY));
      await queue.resume();
    }
    const q = queue;
    const ev = events;
    let following = false;
    return {
      total: files.length,
      added: fresh.length,
      existing,
      notQueued,
      failed,
      close,
      follow(followOptions = {}) {
        if (following) throw new Error('follow() was called already');
        following = true;
        return followRun({
          queue: q,
          events: ev,
          store,
          tracked,
          early,
          files,
          began,
          probe: run.probe,
          signal: followOptions.signal,
          noWorkerMs: followOptions.noWorkerMs ?? 30_000,
          control: connection.control,
          close,
        });
      },
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** A job run again counts its attempts afresh (a connection failure is tried again). */
const RETRY_AFRESH = { resetAttemptsMade: true, resetAttemptsStarted: true } as const;

/** Whether every one of `paths` exists. */
async function allExist(paths: readonly string[]): Promise<boolean> {
  const found = await Promise.all(
    paths.map((p) =>
      access(p).then(
        () => true,
        () => false,
      ),
    ),
  );
  return found.every(Boolean);
}

async function* followRun(run: {
  queue: Queue;
  events: QueueEvents;
  store: ArchiveStore;
  tracked: Map<string, Tracked>;
  early: ArchiveEvent[];
  files: AudioFile[];
  began: number;
  probe: boolean;
  signal: AbortSignal | undefined;
  noWorkerMs: number;
  control: Redis;
  close: () => Promise<void>;
}): AsyncGenerator<ArchiveEvent | ArchiveSummary, void, undefined> {
  const { queue, events, store, tracked } = run;
  const summary = emptySummary(store.manifest.path, run.files.length, 0);
  const out: Array<ArchiveEvent | ArchiveSummary> = [];
  let wake: (() => void) | undefined;
  // Since when no worker served the queue (a NO_WORKER pause said so), and when one last did.
  let servedAt = performance.now();
  let unservedSince: number | undefined;
  const push = (event: ArchiveEvent) => {
    if (
      unservedSince !== undefined &&
      (event.type === 'started' || event.type === 'done' || event.type === 'failed')
    ) {
      // A worker took a job before the next look at the queue.
      servedAt = performance.now();
      const pausedMs = Math.round(servedAt - unservedSince);
      unservedSince = undefined;
      push({ type: 'resumed', pausedMs });
    }
    tally(summary, event);
    out.push(event);
    const w = wake;
    wake = undefined;
    w?.();
  };
  for (const event of run.early) push(event);
  const pending = new Set(tracked.keys());
  const started = new Set<string>();
  let stopped: Reason | undefined;
  let failure: unknown;
  // One record at a time, in the order settled: the manifest is appended by this process only.
  let chain = Promise.resolve();
  const serial = (task: () => Promise<void>) => {
    chain = chain.then(task).catch((err: unknown) => {
      failure ??= err;
      const w = wake;
      wake = undefined;
      w?.();
    });
    return chain;
  };

  const settle = (jobId: string) =>
    serial(async () => {
      const t = tracked.get(jobId);
      if (!t || !pending.has(jobId)) return;
      // The state first, then the job: a job read before its state could be one read while
      // active (no return value yet) whose state says completed by the time it is asked.
      const state = await queue.getJobState(jobId);
      const job = await queue.getJob(jobId);
      if (!job) {
        // Gone from the queue (jobs are never removed: Redis lost them, restarted empty or
        // flushed): no worker will run it and no event will come, so it ends here, recorded.
        if (state !== 'unknown' || (await queue.getJob(jobId)) !== undefined) return;
        pending.delete(jobId);
        const error = {
          code: 'ERR_JOB_LOST',
          message: 'its queue job is gone (Redis lost it): run the command again to add it',
        };
        // A batch job a worker submitted for it stays recorded: a resumed run waits for it.
        const serviceJobId = store.manifest.pendingJob(t.file, store.settings as ManifestSettings);
        await store.failed(t.file, error, serviceJobId);
        push({ type: 'failed', file: t.file, error, ...(serviceJobId ? { jobId: serviceJobId } : {}) });
        return;
      }
      if (state === 'completed') {
        pending.delete(jobId);
        const result = job.returnvalue as ArchiveJobResult;
        await store.recordDone(t.file, t.outputs, result);
        push({
          type: 'done',
          file: t.file,
          outputs: t.outputs,
          words: result.words,
          ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
          elapsedMs: result.elapsedMs,
          ...(result.warnings ? { warnings: result.warnings } : {}),
        });
      } else if (state === 'failed') {
        pending.delete(jobId);
        const error = parseFailedReason(job.failedReason);
        const serviceJobId = (job.data as ArchiveJobData).serviceJobId;
        await store.failed(t.file, error, serviceJobId);
        push({ type: 'failed', file: t.file, error, ...(serviceJobId ? { jobId: serviceJobId } : {}) });
      } else if (state === 'active' && !started.has(jobId)) {
        started.add(jobId);
        push({ type: 'started', file: t.file, attempt: job.attemptsMade });
      }
    });

  const checkStopped = async () => {
    if (stopped !== undefined || !(await queue.isPaused())) return;
    const reason = await run.control.get(queue.toKey(STOP_KEY));
    if (reason === null) return;
    stopped = JSON.parse(reason) as Reason;
    const w = wake;
    wake = undefined;
    w?.();
  };

  const onActive = ({ jobId }: { jobId: string }) => {
    const t = tracked.get(jobId);
    if (!t || !pending.has(jobId)) return;
    started.add(jobId);
    push({ type: 'started', file: t.file, attempt: 0 });
  };
  const onProgress = ({ jobId, data }: { jobId: string; data: unknown }) => {
    const t = tracked.get(jobId);
    if (!t || !pending.has(jobId) || typeof data !== 'object' || data === null) return;
    const p = data as { serviceJobId?: string; audioSeconds?: number };
    if (p.serviceJobId !== undefined) {
      const id = p.serviceJobId;
      serial(() => store.submitted(t.file, id));
    }
    if (p.audioSeconds !== undefined) push({ type: 'progress', file: t.file, audioSeconds: p.audioSeconds });
  };
  const onEnd = ({ jobId }: { jobId: string }) => {
    settle(jobId);
  };
  const onPaused = () => {
    checkStopped().catch(() => {});
  };
  events.on('active', onActive);
  events.on('progress', onProgress);
  events.on('completed', onEnd);
  events.on('failed', onEnd);
  events.on('paused', onPaused);
  // Jobs that ended before we listened, and anything an event did not bring (a missed event,
  // a connection that came back): looked at now and every 2 s.
  // A queue nobody serves waits without end: after noWorkerMs with jobs waiting, none active and
  // no worker connected, say so (once), and say when a worker has taken a job.
  const checkServed = async () => {
    if (pending.size === 0 || stopped !== undefined) return;
    const [workers, active] = await Promise.all([queue.getWorkersCount(), queue.getActiveCount()]);
    const now = performance.now();
    if (workers > 0 || active > 0) {
      servedAt = now;
      if (unservedSince !== undefined) {
        push({ type: 'resumed', pausedMs: Math.round(now - unservedSince) });
        unservedSince = undefined;
      }
    } else if (unservedSince === undefined && now - servedAt >= run.noWorkerMs) {
      unservedSince = now;
      push({
        type: 'paused',
        reason: {
          code: 'NO_WORKER',
          message: `${pending.size} job(s) waiting and no worker has served the queue for ${Math.round((now - servedAt) / 1000)} s: start one with \`speechpipe worker --queue URL --queue-name ${queue.name}\``,
        },
      });
    }
  };
  const reconcile = async () => {
    await checkStopped();
    for (const jobId of [...pending]) await settle(jobId);
    await checkServed();
  };
  let reconciling = reconcile().catch((err: unknown) => {
    failure ??= err;
  });
  const timer = setInterval(() => {
    reconciling = reconciling.then(reconcile).catch(() => {});
  }, 2000);
  const onAbort = () => {
    const w = wake;
    wake = undefined;
    w?.();
  };
  run.signal?.addEventListener('abort', onAbort, { once: true });
  /**
   * `work` settled, or the follow was aborted a moment ago: a Redis that went away holds its
   * commands until it comes back, and an abort must end the follow all the same.
   */
  const drained = (work: Promise<unknown>) =>
    new Promise<void>((done) => {
      let timer: NodeJS.Timeout | undefined;
      const onLeave = () => {
        timer = setTimeout(end, CLOSE_WAIT_MS);
      };
      const end = () => {
        clearTimeout(timer);
        run.signal?.removeEventListener('abort', onLeave);
        done();
      };
      work.then(end, end);
      if (run.signal?.aborted) onLeave();
      else run.signal?.addEventListener('abort', onLeave, { once: true });
    });
  const probing = run.probe
    ? probeAll(run.files, () => run.signal?.aborted === true || pending.size === 0, push)
    : Promise.resolve();

  try {
    for (;;) {
      while (out.length > 0) yield out.shift()!;
      if (failure !== undefined) throw failure;
      if (pending.size === 0 || stopped !== undefined || run.signal?.aborted) break;
      await new Promise<void>((r) => {
        wake = r;
      });
    }
    clearInterval(timer);
    await drained(Promise.all([reconciling, chain]));
    await probing.catch(() => {});
    while (out.length > 0) yield out.shift()!;
    if (pending.size > 0) {
      const reason = stopped ?? {
        code: 'ERR_INTERRUPTED',
        message: 'stopped following; the jobs go on in the workers (follow again with --resume)',
      };
      const event: ArchiveEvent = { type: 'stopped', reason, notAttempted: pending.size };
      tally(summary, event);
      yield event;
    }
    await store.flush();
    summary.elapsedMs = Math.round(performance.now() - run.began);
    yield summary;
  } finally {
    clearInterval(timer);
    run.signal?.removeEventListener('abort', onAbort);
    events.off('active', onActive);
    events.off('progress', onProgress);
    events.off('completed', onEnd);
    events.off('failed', onEnd);
    events.off('paused', onPaused);
    // Left early (aborted, broken out of, failed): what is under way may wait for a Redis
    // that is gone; it gets a moment, then the connections are closed all the same.
    await settledWithin(Promise.all([reconciling, chain]), CLOSE_WAIT_MS);
    await probing.catch(() => {});
    await store.flush().catch(() => {});
    await run.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Workers

/** Options of {@link startArchiveWorker}. */
export interface ArchiveWorkerOptions extends ClusterConnectionOptions {
  /** The client that transcribes; its admission rejections rate-limit the whole queue. */
  client: SpeechClient;
  /** Jobs this worker runs at once. Default 2. */
  concurrency?: number;
  /** Serve Prometheus metrics at `http://HOST:PORT/metrics` (0: any free port). */
  metricsPort?: number;
  /** Default `127.0.0.1`. */
  metricsHost?: string;
  /**
   * A job whose worker stopped renewing its lock (killed) is taken over by another worker
   * after about this long (BullMQ's lockDuration and stalled-check interval). Default 30 s.
   */
  stallTimeoutMs?: number;
  /** Aborting it closes the worker (as close()). */
  signal?: AbortSignal;
  /** What the worker does, for a log. */
  onEvent?: (event: WorkerEvent) => void;
}

/**
 * What an archive worker does, for a log (`ArchiveWorkerOptions.onEvent`): a job started (or
 * taken over from a dead worker), a batch job submitted, a job done or failed, a job handed back,
 * the queue rate-limited after a 429, the worker stopped, or an error of its own.
 */
export type WorkerEvent =
  | { type: 'started'; input: string; takenOver: boolean; serviceJobId?: string }
  | { type: 'submitted'; input: string; serviceJobId: string }
  | { type: 'done'; input: string; words: number; audioSeconds?: number }
  | { type: 'failed'; input: string; error: Reason; retrying: boolean }
  | { type: 'handedBack'; input: string }
  | { type: 'rateLimited'; workload: Workload; pauseMs: number }
  | { type: 'stopped'; reason: Reason }
  | { type: 'error'; message: string };

/** A running archive worker. */
export interface ArchiveWorker {
  /** `http://HOST:PORT/metrics`, with `metricsPort`. */
  readonly metricsUrl: string | undefined;
  /**
   * Stop taking jobs and let the ones in flight finish; with `handBackAfterMs`, hand back what
   * is still running after that long (a batch job's service id stays with its queue job).
   */
  close(options?: { handBackAfterMs?: number }): Promise<void>;
  /** Hand back the jobs in flight now (moved back to waiting, for another worker). */
  handBack(): void;
}

class HandedBack extends Error {}

/**
 * Start a worker: it takes jobs from the queue, transcribes them with `client`, writes their
 * result files and returns a summary to the queue.
 */
export async function startArchiveWorker(options: ArchiveWorkerOptions): Promise<ArchiveWorker> {
  const concurrency = options.concurrency ?? 2;
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
  const connection = await connect(options.queue, options.connectTimeoutMs);
  const { bull } = connection;
  const name = options.queueName ?? DEFAULT_QUEUE_NAME;
  const emit = (event: WorkerEvent) => options.onEvent?.(event);
  const stallMs = options.stallTimeoutMs ?? 30_000;
  const inFlight = new Map<string, AbortController>();
  /** The processors running: close() waits for them, not for Redis. */
  const processing = new Set<Promise<unknown>>();
  let metrics: Metrics | undefined;
  let queue: Queue | undefined;
  let worker: Worker | undefined;
  let removeListener: (() => void) | undefined;
  const closeAll = async () => {
    removeListener?.();
    // BullMQ's closes wait for Redis, which may be gone: bounded.
    await settledWithin(Promise.all([worker?.close(), queue?.close()]), CLOSE_WAIT_MS);
    await metrics?.close();
    await connection.close();
  };
  try {
    queue = new bull.Queue(name, { connection: connection.open() });
    queue.on('error', () => {});
    await queue.waitUntilReady();
    const q = queue;
    if (options.metricsPort !== undefined)
      metrics = await startMetrics(options.metricsPort, options.metricsHost ?? '127.0.0.1');
    const m = metrics;
    // A 429 here pauses every worker: the queue is rate-limited for the service's Retry-After.
    // The operation that got it waits the same time in this worker's client and goes on (it
    // consumed nothing), rather than being moved back and restarted elsewhere.
    let limitedUntil = 0;
    removeListener = options.client.onAdmissionRejected(({ workload, pauseMs }) => {
      m?.rateLimited.inc();
      emit({ type: 'rateLimited', workload, pauseMs });
      const until = Date.now() + pauseMs;
      if (until <= limitedUntil) return;
      limitedUntil = until;
      q.rateLimit(Math.ceil(pauseMs)).catch((err: unknown) =>
        emit({ type: 'error', message: `cannot rate-limit the queue: ${(err as Error).message}` }),
      );
    });
    const processor = async (job: Job, token?: string): Promise<ArchiveJobResult> => {
      const data = job.data as ArchiveJobData;
      const file = fileOf(data);
      const controller = new AbortController();
      inFlight.set(job.id!, controller);
      m?.inFlight.inc();
      const began = performance.now();
      const ref: { id?: string } = {};
      const handBack = async () => {
        // With Redis gone the move waits for it to come back: bounded, and the job (its lock
        // no longer renewed) is taken over as a dead worker's would be.
        let moved = false;
        await settledWithin(
          job.moveToWait(token).then(() => {
            moved = true;
          }),
          CLOSE_WAIT_MS,
        );
        if (moved) emit({ type: 'handedBack', input: data.input });
        else emit({ type: 'error', message: `cannot hand back ${data.input}: Redis does not answer` });
        throw new bull.WaitingError();
      };
      emit({
        type: 'started',
        input: data.input,
        takenOver: job.attemptsStarted > 1 || job.stalledCounter > 0,
        ...(data.serviceJobId ? { serviceJobId: data.serviceJobId } : {}),
      });
      try {
        const result = await transcribeFile(file, {
          client: options.client,
          ...data.settings,
          signal: controller.signal,
          ...(data.jobTimeoutMs === undefined ? {} : { jobTimeoutMs: data.jobTimeoutMs }),
          ...(data.serviceJobId === undefined ? {} : { pendingJob: data.serviceJobId }),
          job: ref,
          onSubmitted: async (serviceJobId) => {
            // Stored before it is waited for: whoever holds this job next waits for it.
            await job.updateData({ ...data, serviceJobId });
            await job.updateProgress({ serviceJobId }).catch(() => {});
            emit({ type: 'submitted', input: data.input, serviceJobId });
          },
          onProgress: (audioSeconds) => {
            job.updateProgress({ audioSeconds }).catch(() => {});
          },
          restartWithinMs: 20_000,
        });
        await writeResults(file, data.outputs, result, data.formats, data.settings);
        m?.filesDone.inc();
        // Fast transcription reports no duration: the header's, for the metric only.
        if (m) m.audioSecondsDone.inc(result.audioSeconds ?? (await probeDuration(file.path)) ?? 0);
        emit({
          type: 'done',
          input: data.input,
          words: result.words.length,
          ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
        });
        return {
          words: result.words.length,
          ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
          ...(result.jobId === undefined ? {} : { jobId: result.jobId }),
          ...(result.warnings ? { warnings: result.warnings } : {}),
          elapsedMs: Math.round(performance.now() - began),
        };
      } catch (err) {
        if (controller.signal.aborted) return await handBack();
        if (isAuthFailure(err)) {
          // A refused key is refused for every input: stop the whole queue, say why, and give
          // this job back (not attempted).
          const e = err as SpeechpipeError & { status: number };
          const reason = {
            code: e.code,
            message: `the service refused the key (${e.status}): ${e.message}`,
          };
          await connection.control.set(q.toKey(STOP_KEY), JSON.stringify(reason));
          await q.pause();
          emit({ type: 'stopped', reason });
          return await handBack();
        }
        const error = {
          code: (err as { code?: string }).code ?? 'ERR_UNKNOWN',
          message: err instanceof Error ? err.message : String(err),
        };
        const retrying = isConnectionFailure(err) && job.attemptsMade + 1 < (job.opts.attempts ?? 1);
        m?.filesFailed.inc({ code: error.code });
        emit({ type: 'failed', input: data.input, error, retrying });
        const text = `${error.code}: ${error.message}`;
        // Connection failures are tried again (the job's attempts); anything else is final.
        throw isConnectionFailure(err) ? new Error(text) : new bull.UnrecoverableError(text);
      } finally {
        inFlight.delete(job.id!);
        m?.inFlight.dec();
      }
    };
    const tracked = (job: Job, token?: string): Promise<ArchiveJobResult> => {
      const run = processor(job, token);
      processing.add(run);
      run.then(
        () => processing.delete(run),
        () => processing.delete(run),
      );
      return run;
    };
    worker = new bull.Worker(name, tracked, {
      connection: connection.open(),
      concurrency,
      lockDuration: stallMs,
      stalledInterval: stallMs,
      maxStalledCount: 2,
      // A limiter must be set for a queue-wide rate limit (queue.rateLimit) to hold; this one
      // never limits by itself.
      limiter: { max: 1_000_000_000, duration: 1000 },
      autorun: false,
    });
    worker.on('error', (err) => emit({ type: 'error', message: err.message }));
    await worker.waitUntilReady();
    worker.run().catch((err: unknown) => emit({ type: 'error', message: String(err) }));
  } catch (err) {
    await closeAll();
    throw err;
  }
  const w = worker;
  // A job handed back ends at once unless it waits on Redis (storing a batch job's id, moving
  // itself back): with Redis gone that is for good, so close() waits for it only a moment.
  let gaveUp: (() => void) | undefined;
  const givenUp = new Promise<void>((resolve) => {
    gaveUp = resolve;
  });
  let giveUpTimer: NodeJS.Timeout | undefined;
  const handBack = () => {
    for (const controller of inFlight.values()) controller.abort(new HandedBack('handed back'));
    giveUpTimer ??= setTimeout(() => gaveUp?.(), WORKER_CLOSE_WAIT_MS);
  };
  let closing: Promise<void> | undefined;
  const onAbort = () => {
    handle.close().catch(() => {});
  };
  options.signal?.addEventListener('abort', onAbort, { once: true });
  const handle: ArchiveWorker = {
    metricsUrl: metrics?.url,
    handBack,
    close(closeOptions = {}) {
      closing ??= (async () => {
        options.signal?.removeEventListener('abort', onAbort);
        const timer =
          closeOptions.handBackAfterMs === undefined
            ? undefined
            : setTimeout(handBack, closeOptions.handBackAfterMs);
        try {
          // No job is taken from now on; the ones in flight finish (or are handed back).
          const stopping = w.close();
          stopping.catch(() => {});
          let abandoned = false;
          givenUp.then(() => {
            abandoned = true;
          });
          while (processing.size > 0 && !abandoned)
            await Promise.race([Promise.allSettled([...processing]), givenUp]);
          // What is left is BullMQ's own (a job's completion written to Redis): bounded, since
          // Redis may be gone and then it would wait for good.
          await settledWithin(stopping, WORKER_CLOSE_WAIT_MS);
        } finally {
          clearTimeout(timer);
          clearTimeout(giveUpTimer);
          await closeAll();
        }
      })();
      return closing;
    },
  };
  return handle;
}

// ---------------------------------------------------------------------------------------------
// Metrics

interface Metrics {
  url: string;
  filesDone: import('prom-client').Counter;
  audioSecondsDone: import('prom-client').Counter;
  filesFailed: import('prom-client').Counter<'code'>;
  inFlight: import('prom-client').Gauge;
  rateLimited: import('prom-client').Counter;
  close(): Promise<void>;
}

async function startMetrics(port: number, host: string): Promise<Metrics> {
  const prom = await import('prom-client');
  const registry = new prom.Registry();
  const metrics = {
    filesDone: new prom.Counter({
      name: 'speechpipe_files_done_total',
      help: 'Inputs transcribed and written',
      registers: [registry],
    }),
    audioSecondsDone: new prom.Counter({
      name: 'speechpipe_audio_seconds_done_total',
      help: 'Audio seconds of the inputs done',
      registers: [registry],
    }),
    filesFailed: new prom.Counter({
      name: 'speechpipe_files_failed_total',
      help: 'Input failures by error code (a failure retried later counts too)',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
    inFlight: new prom.Gauge({
      name: 'speechpipe_operations_in_flight',
      help: 'Inputs this worker is transcribing now',
      registers: [registry],
    }),
    rateLimited: new prom.Counter({
      name: 'speechpipe_rate_limited_total',
      help: '429 answers (the queue paused for their Retry-After)',
      registers: [registry],
    }),
  };
  const server: Server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(500).end(String(err)),
    );
  });
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolveListen());
  });
  const address = server.address() as { port: number };
  return {
    ...metrics,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}
