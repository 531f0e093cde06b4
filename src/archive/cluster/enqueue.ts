// enqueueArchive(): walk an archive, name every input's results as a local run would, and add a
// job per input to the queue (an input queued already with the same settings adds nothing).

import { access } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { Queue, QueueEvents } from 'bullmq';
import { DEFAULT_LIMITS } from '../../protocol/limits.ts';
import { Manifest } from '../../sinks/manifest.ts';
import { type AudioFile, walkAudioFiles } from '../../sources/files.ts';
import { ALREADY_DONE, type ArchiveEvent, type ArchiveSummary } from '../events.ts';
import { type ArchiveRunOptions, resolveArchiveRun, settingsOf } from '../settings.ts';
import { ArchiveStore } from '../store.ts';
import {
  CLOSE_WAIT_MS,
  type ClusterConnectionOptions,
  connect,
  DEFAULT_QUEUE_NAME,
  STOP_KEY,
  settledWithin,
} from './connection.ts';
import { followRun, type Tracked } from './follow.ts';
import { type ArchiveJobData, archiveJobId, workloadOf } from './queue-jobs.ts';

/** Options of {@link enqueueArchive}: the run's settings, as a local run's, and the queue's. */
export interface EnqueueArchiveOptions
  extends ClusterConnectionOptions,
    // Each worker talks to a service of its own: which one answered is not recorded.
    Omit<ArchiveRunOptions, 'service'> {
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
          reason: ALREADY_DONE,
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
