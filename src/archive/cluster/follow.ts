// Following a cluster's run from the enqueuer: the queue's events (and a look at the queue every
// 2 s, for what an event did not bring) become the run's events, and the manifest is written
// here alone, one record at a time.

import type { Queue, QueueEvents } from 'bullmq';
import type { Redis } from 'ioredis';
import type { ManifestSettings } from '../../sinks/manifest.ts';
import type { AudioFile } from '../../sources/files.ts';
import { probeAll } from '../durations.ts';
import { EventQueue } from '../event-queue.ts';
import { type ArchiveEvent, type ArchiveSummary, emptySummary, type Reason, tally } from '../events.ts';
import type { ArchiveStore } from '../store.ts';
import { CLOSE_WAIT_MS, STOP_KEY, settledWithin } from './connection.ts';
import { type ArchiveJobData, type ArchiveJobResult, parseFailedReason } from './queue-jobs.ts';

export interface Tracked {
  file: AudioFile;
  outputs: string[];
}

export async function* followRun(run: {
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
  // Unbounded: the events come from Redis's callbacks and from work the follow waits for after
  // its last event, neither of which can wait for the consumer.
  const out = new EventQueue<ArchiveEvent>();
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
      out.wake();
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
    out.wake();
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
    out.wake();
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
      yield* out.drain();
      if (failure !== undefined) throw failure;
      if (pending.size === 0 || stopped !== undefined || run.signal?.aborted) break;
      await out.wait();
    }
    clearInterval(timer);
    await drained(Promise.all([reconciling, chain]));
    await probing.catch(() => {});
    yield* out.drain();
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
