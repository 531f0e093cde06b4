// transcribeEach(): a Transform from walked files to archive events, several files at once. It
// stops the whole run at the first 401 or 403 (a wrong key is wrong for every file), and holds
// a circuit breaker on connection failures: after a few in a row it stops starting files,
// probes the service, and goes on when it answers, instead of burning every file's retries.
// Files it did not attempt are left unrecorded, for a resumed run.

import { Transform, type TransformCallback } from 'node:stream';
import type { SpeechClient } from '../client/index.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import type { Workload } from '../protocol/limits.ts';
import type { AudioFile } from '../sources/files.ts';
import { Breaker, type BreakerOptions } from './breaker.ts';
import { ALREADY_DONE, type ArchiveEvent, type Reason } from './events.ts';
import { failureReason, isAuthFailure, isConnectionFailure, refusedKeyReason } from './failures.ts';
import type { ArchiveStore } from './store.ts';
import { tcpProbe } from './tcp-probe.ts';
import { transcribeFile } from './transcribe-file.ts';

/** Options of {@link transcribeEach}. */
export interface TranscribeEachOptions {
  /** The client that transcribes. */
  client: SpeechClient;
  /**
   * The results directory: resume decisions, and batch job ids as soon as the service accepts them.
   */
  store: ArchiveStore;
  /**
   * Files at once. Default: what the account's plan allows for the mode's workload (the
   * client's admission limit): live the realtime ASR limit (with speakers, the lower of it and
   * diarization's), fast twice the fast limit (the client's admission keeps the service's
   * slots to the limit; the rest wait ready), batch four times the batch limit, since a job being
   * waited for holds no slot at the service (only its upload does, and the client's admission
   * bounds uploads to the limit).
   */
  concurrency?: number;
  /** Batch: stop waiting for a job after this long. Default 4 h. */
  jobTimeoutMs?: number;
  /** Attempts for an input that fails on the connection. Default 3. */
  connectionAttempts?: number;
  /** Stop starting inputs while the service is unreachable (see {@link BreakerOptions}). */
  breaker?: BreakerOptions;
  /** Stops the run: inputs not started are left for a resumed run. */
  signal?: AbortSignal;
}

/** Attempts of one input, however often the service went away. */
const MAX_ATTEMPTS = 20;

/** Files at once that keep the account's slots for the mode busy (see `concurrency`). */
export function planConcurrency(client: SpeechClient, settings: ArchiveStore['settings']): number {
  const limits = new Map(client.admissionStats().map((w) => [w.workload, w.limit]));
  const limit = (workload: Workload) => Math.max(1, limits.get(workload) ?? 2);
  if (settings.mode === 'batch') return 4 * limit('batch');
  // Twice the limit: the next requests wait in the client's admission queue, ready, so a slot
  // the service frees is taken at once rather than after the next file's preparation.
  if (settings.mode === 'fast') return 2 * limit('fast');
  const asr = limit('realtime_asr');
  return settings.speakers ? Math.min(asr, limit('diarization')) : asr;
}

/**
 * Transcribe each walked file (`AudioFile`s in, `ArchiveEvent`s out), `concurrency` at once,
 * in walk order of starting. Walk entries that were skipped or unreadable pass through as
 * `skipped` and `failed`; with the store's `resume`, inputs done before pass as `skipped`
 * (`ALREADY_DONE`). Batch job ids go to the store the moment the service accepts a job.
 *
 * The first 401 or 403 stops the run: files in flight are cancelled, no other file starts,
 * and a `stopped` event ends the output; the remaining inputs are consumed without being
 * attempted or recorded. Connection failures feed a circuit breaker (see `BreakerOptions`);
 * an input that failed on the connection runs again once the service answers.
 *
 * Destroying it (a pipeline whose sink failed) cancels the inputs in flight; it closes only once
 * they have ended (their ffmpeg children exited), so a pipeline of it settles after them.
 */
export function transcribeEach(options: TranscribeEachOptions): Transform {
  const concurrency = options.concurrency ?? planConcurrency(options.client, options.store.settings);
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    throw new RangeError(`transcribeEach: concurrency must be a positive integer, got ${concurrency}`);
  const attempts = options.connectionAttempts ?? 3;
  const controller = new AbortController();
  const onOuterAbort = () => controller.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onOuterAbort, { once: true });
  const running = new Set<Promise<void>>();
  let stopped: Reason | undefined;
  let notAttempted = 0;
  /** The write callback held back while `concurrency` files run. */
  let waiting: (() => void) | undefined;

  const stream = new Transform({
    objectMode: true,
    highWaterMark: concurrency,
    transform(file: AudioFile, _encoding, callback: TransformCallback) {
      if (stopped !== undefined || controller.signal.aborted) {
        // Left unrecorded, as every input after the stop (a skipped one too): a resumed run
        // records it.
        notAttempted++;
        callback();
        return;
      }
      const task = one(file).finally(() => {
        running.delete(task);
        const next = waiting;
        waiting = undefined;
        next?.();
      });
      running.add(task);
      if (running.size < concurrency) callback();
      else waiting = () => callback();
    },
    flush(callback) {
      Promise.all(running).then(() => {
        options.signal?.removeEventListener('abort', onOuterAbort);
        if (stopped === undefined && controller.signal.aborted)
          stopped = { code: 'ERR_INTERRUPTED', message: 'the run was aborted' };
        if (stopped !== undefined) stream.push({ type: 'stopped', reason: stopped, notAttempted });
        callback();
      }, callback);
    },
    destroy(err, callback) {
      options.signal?.removeEventListener('abort', onOuterAbort);
      controller.abort(err ?? new SpeechpipeError('ERR_DESTROYED', 'transcribeEach was destroyed'));
      // Closed once the inputs in flight have let go of what they hold (ffmpeg, sessions, the
      // store): a pipeline of it settles only then, so nothing of the run outlives it.
      Promise.allSettled(running).then(() => callback(err));
    },
  });

  const emit = (event: ArchiveEvent) => {
    if (!stream.destroyed) stream.push(event);
  };
  const stop = (reason: Reason) => {
    if (stopped !== undefined) return;
    stopped = reason;
    controller.abort(new SpeechpipeError(reason.code, reason.message));
  };
  const breaker = new Breaker(
    options.breaker ?? {},
    options.client.config.apiUrl,
    controller.signal,
    emit,
    stop,
  );
  // Is anyone there? An unreachable service pauses the run before the first file.
  let first: Promise<void> | undefined;
  const probeFirst = () => {
    first ??= (options.breaker?.probe ?? tcpProbe(options.client.config.apiUrl))(controller.signal).then(
      (ok) => {
        if (!ok && !controller.signal.aborted)
          breaker.trip(new Error(`cannot connect to ${new URL(options.client.config.apiUrl).host}`));
      },
    );
    return first;
  };

  async function one(file: AudioFile): Promise<void> {
    const { store } = options;
    const plan = await store.plan(file);
    if (file.skipped) return emit({ type: 'skipped', file, reason: file.skipped });
    if (file.unreadable) return emit({ type: 'failed', file, error: file.unreadable });
    if (plan.action === 'skip')
      return emit({
        type: 'skipped',
        file,
        reason: ALREADY_DONE,
      });
    const job: { id?: string } = {};
    let pendingJob = plan.pendingJob;
    for (let attempt = 0; ; attempt++) {
      try {
        await probeFirst();
        await breaker.ready();
      } catch {
        // Stopped while waiting for the service: left for a resumed run.
        notAttempted++;
        return;
      }
      if (controller.signal.aborted) {
        notAttempted++;
        return;
      }
      const started = performance.now();
      emit({ type: 'started', file, attempt });
      try {
        const result = await transcribeFile(file, {
          client: options.client,
          ...store.settings,
          signal: controller.signal,
          ...(options.jobTimeoutMs === undefined ? {} : { jobTimeoutMs: options.jobTimeoutMs }),
          ...(pendingJob === undefined ? {} : { pendingJob }),
          job,
          onSubmitted: (jobId) => store.submitted(file, jobId),
          onProgress: (audioSeconds) => emit({ type: 'progress', file, audioSeconds }),
          // The run retries an input the connection failed, after the service answers again.
          restartWithinMs: 20_000,
        });
        breaker.success();
        emit({
          type: 'transcribed',
          file,
          outputs: plan.outputs,
          result,
          elapsedMs: Math.round(performance.now() - started),
        });
        return;
      } catch (err) {
        if (controller.signal.aborted) {
          // Cancelled (stopped, aborted, destroyed): not this input's failure.
          notAttempted++;
          return;
        }
        if (isAuthFailure(err)) {
          notAttempted++;
          stop(refusedKeyReason(err));
          return;
        }
        if (isConnectionFailure(err)) {
          breaker.failure(err);
          // An attempt made while the service was down is not the input's: it runs again once
          // the service answers (within a hard bound, should probes and requests disagree).
          if (attempt + 1 < attempts || (breaker.isOpen && attempt + 1 < MAX_ATTEMPTS)) {
            // A job submitted before the connection failed is waited for, not submitted again.
            if (job.id !== undefined) pendingJob = job.id;
            continue;
          }
        }
        const error = failureReason(err);
        emit({ type: 'failed', file, error, ...(job.id === undefined ? {} : { jobId: job.id }) });
        return;
      }
    }
  }

  return stream;
}
