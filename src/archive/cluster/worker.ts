// startArchiveWorker(): a worker process's side of cluster mode. It takes jobs from the queue,
// transcribes them, writes their result files and returns a summary; a 429 rate-limits the
// whole queue, a refused key pauses it, and a job handed back (or whose worker died) is taken
// over by another worker, which waits for a batch job already submitted instead of submitting.

import type { Job, Queue, Worker } from 'bullmq';
import type { SpeechClient } from '../../client/index.ts';
import type { Workload } from '../../protocol/limits.ts';
import { probeDuration } from '../durations.ts';
import type { Reason } from '../events.ts';
import { failureReason, isAuthFailure, isConnectionFailure, refusedKeyReason } from '../failures.ts';
import { writeResults } from '../store.ts';
import { transcribeFile } from '../transcribe-file.ts';
import {
  CLOSE_WAIT_MS,
  type ClusterConnectionOptions,
  connect,
  DEFAULT_QUEUE_NAME,
  STOP_KEY,
  settledWithin,
} from './connection.ts';
import { type Metrics, startMetrics } from './metrics.ts';
import { type ArchiveJobData, type ArchiveJobResult, fileOf } from './queue-jobs.ts';

/** How long a closing worker waits for BullMQ once its jobs ended (their completion written). */
const WORKER_CLOSE_WAIT_MS = 3000;

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
          const reason = refusedKeyReason(err);
          await connection.control.set(q.toKey(STOP_KEY), JSON.stringify(reason));
          await q.pause();
          emit({ type: 'stopped', reason });
          return await handBack();
        }
        const error = failureReason(err);
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
