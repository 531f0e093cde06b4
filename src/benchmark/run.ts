// runBench(): one workload driven at a fixed number of concurrent operations (closed loop) or
// at an arrival rate (open loop, the wrk2 model: operation k is due at start + k / rate and its
// latencies count from when it was due, so a slow service cannot hide its latency by slowing
// the load). A warm-up is run and not counted; at the duration no operation starts, those in
// flight get a short grace and are then cut; an abort stops at once with what was measured.

import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setImmediate } from 'node:timers/promises';
import type { SpeechClient } from '../client/index.ts';
import { sleep as abortableSleep, isAuthFailure } from '../client/retry.ts';
import { InvalidArgumentError, type SpeechServiceError } from '../protocol/errors.ts';
import type { Language } from '../protocol/languages.ts';
import type { Workload } from '../protocol/limits.ts';
import type { AsrRecord, DiarizationRecord } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import { diarizationStream, sttStream } from '../transforms/live-stream.ts';
import { type AudioFrame, cutFrames } from '../transforms/to-frames.ts';
import { LatencyRecorder, type LatencySummary, type LatencyRecorder as Recorder } from './latency.ts';
import { type BenchClip, BUILTIN_SENTENCES } from './media.ts';

export const BENCH_WORKLOADS = ['live', 'diarization', 'fast', 'batch', 'tts'] as const;

/** The longest run: about 24.8 days, the longest a timer waits. */
export const MAX_DURATION_SEC = Math.floor((2 ** 31 - 1) / 1000);
export type BenchWorkload = (typeof BENCH_WORKLOADS)[number];

/** The latency metrics of each workload; the first is the headline (latency over time). */
export const BENCH_METRICS: Record<BenchWorkload, readonly string[]> = {
  live: ['final_after_last_audio', 'first_partial', 'first_final_word'],
  diarization: ['final_after_last_audio', 'first_segment'],
  fast: ['final', 'first_record'],
  batch: ['submit_to_done'],
  tts: ['first_audio', 'complete'],
};

const SERVICE_WORKLOAD: Record<BenchWorkload, Workload> = {
  live: 'realtime_asr',
  diarization: 'diarization',
  fast: 'fast',
  batch: 'batch',
  tts: 'tts',
};

export interface BenchOptions {
  client: SpeechClient;
  workload: BenchWorkload;
  transport: 'http' | 'socketio';
  /** Closed loop: this many operations at once. */
  concurrency?: number;
  /** Open loop: operations (new streams, requests) started per second. */
  rate?: number;
  durationSec: number;
  /** Seconds at the start whose operations are run and not counted. Default 0. */
  warmupSec?: number;
  /** Live and diarization: audio sent at this multiple of real time. Default 1. */
  pace?: number;
  clips: readonly BenchClip[];
  language?: Language;
  /** Seconds operations in flight at the end may take to finish before they are cut. Default 10. */
  graceSec?: number;
  /** Where the load went (for the report): the URL's origin, or `built-in emulator`. */
  target?: string;
  /** Open loop: operations in flight at most; one due beyond this fails `ERR_BENCH_OVERLOAD`. Default 10,000. */
  maxInFlight?: number;
  signal?: AbortSignal;
  /** Called about once a second with the operations done so far. */
  onTick?: (progress: { elapsedSec: number; completed: number; failed: number; inFlight: number }) => void;
}

export interface BenchReport {
  tool: 'speechpipe bench';
  workload: BenchWorkload;
  transport: 'http' | 'socketio';
  load: { model: 'concurrency'; concurrency: number } | { model: 'rate'; rate_per_second: number };
  duration_sec: number;
  warmup_sec: number;
  pace: number | null;
  target: string;
  started_at: string;
  /** The run ended early (Ctrl-C, abort): the figures cover what was measured. */
  interrupted: boolean;
  media: { clips: number; audio_seconds: number };
  operations: { started: number; completed: number; failed: number; cut: number };
  throughput: { audio_seconds_per_second: number; requests_per_second: number };
  /** Milliseconds. */
  latency_ms: Record<string, LatencySummary>;
  /** Processing time / audio time per completed operation (below 1: faster than real time); null with none. */
  real_time_factor: { p50: number | null; p90: number | null; max: number | null };
  errors: Record<string, number>;
  rate_limited: { responses_429: number; retry_after_wait_ms: number };
  client_cpu_seconds_per_audio_second: number;
  /** [seconds into the measured run, ms] of the headline metric (a sample), for pictures. */
  series?: Array<[number, number]>;
  /** [percentile, ms] of the headline metric. */
  distribution?: Array<[number, number]>;
}

/** What an operation has measured so far (filled in as it goes, so a cut one has it too). */
interface OpProgress {
  /** Metric → ms, measured from the operation's start (or its own reference). */
  latencies: Record<string, number>;
  /** Live: when the last audio was due, ms after the operation's start. */
  lastAudioDueMs?: number;
}

/**
 * The metrics every operation of the workload reaches by its end. One still running when the
 * grace after the duration is over is recorded in those it had not reached at its age then, a
 * lower bound (it is at least the grace old): a service that stops answering shows in the
 * percentiles instead of leaving only the operations it did answer in them.
 */
const ENDING_METRICS: Record<BenchWorkload, readonly string[]> = {
  live: ['final_after_last_audio'],
  diarization: ['final_after_last_audio'],
  fast: ['first_record', 'final'],
  batch: ['submit_to_done'],
  tts: ['first_audio', 'complete'],
};

class Cut extends Error {}

function positive(name: string, value: number | undefined): void {
  if (value !== undefined && !(Number.isFinite(value) && value > 0))
    throw new InvalidArgumentError(`bench: ${name} must be a positive number, got ${value}`);
}

/**
 * Run one benchmark to its end (or its abort) and report. Rejects with the service's error when
 * it refuses the key (401) or the workload to it (403): every other operation would be refused
 * too, so the run stops at the first.
 */
export async function runBench(options: BenchOptions): Promise<BenchReport> {
  const { client, workload, transport, clips } = options;
  if (!BENCH_WORKLOADS.includes(workload))
    throw new InvalidArgumentError(`bench: unknown workload ${workload}`);
  if ((options.concurrency === undefined) === (options.rate === undefined))
    throw new InvalidArgumentError('bench: give either concurrency or rate');
  positive('concurrency', options.concurrency);
  positive('rate', options.rate);
  positive('durationSec', options.durationSec);
  // A timer holds at most 2^31 - 1 ms; a longer one fires at once (the run would end at once).
  if (options.durationSec > MAX_DURATION_SEC || (options.graceSec ?? 0) > MAX_DURATION_SEC)
    throw new InvalidArgumentError(`bench: durationSec and graceSec must be at most ${MAX_DURATION_SEC} s`);
  positive('pace', options.pace);
  if (options.concurrency !== undefined && !Number.isSafeInteger(options.concurrency))
    throw new InvalidArgumentError('bench: concurrency must be an integer');
  if (workload === 'batch' && transport !== 'http')
    throw new InvalidArgumentError('bench: batch transcription is HTTP only (no Socket.IO operation)');
  if (clips.length === 0) throw new InvalidArgumentError('bench: no media');
  const warmupSec = options.warmupSec ?? 0;
  if (!(warmupSec >= 0) || warmupSec >= options.durationSec)
    throw new InvalidArgumentError('bench: the warm-up must be shorter than the duration');

  const metrics = BENCH_METRICS[workload];
  const recorders = new Map<string, Recorder>(metrics.map((m) => [m, new LatencyRecorder()]));
  const rtf = new LatencyRecorder();
  const errors: Record<string, number> = {};
  const counts = { started: 0, completed: 0, failed: 0, cut: 0 };
  let audioSeconds = 0;
  const serviceWorkload = SERVICE_WORKLOAD[workload];
  const admission = () => client.admissionStats().find((w) => w.workload === serviceWorkload)!;
  const admissionAtStart = { ...admission() };
  let admissionAtWarmup = admissionAtStart;
  let cpuAtWarmup = process.cpuUsage();

  const stop = new AbortController(); // cuts operations in flight
  const onAbort = () => stop.abort(options.signal?.reason);
  // A signal aborted before the call stops the run at once (its event has already fired).
  if (options.signal?.aborted) onAbort();
  else options.signal?.addEventListener('abort', onAbort, { once: true });
  const t0 = performance.now();
  const durationMs = options.durationSec * 1000;
  const warmupMs = warmupSec * 1000;
  const elapsed = () => performance.now() - t0;
  let warmupReached = warmupMs === 0;
  const warmupTimer =
    warmupMs > 0
      ? setTimeout(() => {
          warmupReached = true;
          admissionAtWarmup = { ...admission() };
          cpuAtWarmup = process.cpuUsage();
        }, warmupMs)
      : undefined;
  /** Until `ms` have passed or the run is stopped (the timer goes with the stop). */
  const sleep = (ms: number) => abortableSleep(ms, stop.signal).catch(() => {});
  const inFlight = new Set<Promise<void>>();
  const ticker = setInterval(
    () =>
      options.onTick?.({
        elapsedSec: elapsed() / 1000,
        completed: counts.completed,
        failed: counts.failed,
        inFlight: inFlight.size,
      }),
    1000,
  );

  let k = 0;
  let cutAtMs = 0;
  /** Live 429 SESSION_BYTE_RATE_EXCEEDED after the warm-up, and their Retry-After. */
  const byteRate = { responses: 0, waitMs: 0 };
  const onByteRate = (retryAfterMs: number) => {
    if (!warmupReached) return;
    byteRate.responses++;
    byteRate.waitMs += retryAfterMs;
  };
  let refused: SpeechServiceError | undefined;
  /** The last counted operation's end (ms into the run), and the process's CPU then if in the grace. */
  let lastDoneMs = 0;
  let cpuAtLastDone: NodeJS.CpuUsage | undefined;
  /** Run operation number `k` due at `dueAt` (ms into the run). */
  const one = async (dueAt: number): Promise<void> => {
    const clip = clips[k++ % clips.length]!;
    const counted = dueAt >= warmupMs;
    if (counted) counts.started++;
    const startedAt = elapsed();
    // Open loop: latency counts from when the operation was due, not when it could start
    // (a stream that started late had its last audio due that much sooner).
    const lateMs = Math.max(0, startedAt - dueAt);
    const progress: OpProgress = { latencies: {} };
    const record = (at: number) => {
      for (const [metric, ms] of Object.entries(progress.latencies))
        recorders.get(metric)?.record(ms + lateMs, at);
    };
    try {
      const opAudioSeconds = await operation(options, clip, stop.signal, progress, onByteRate);
      if (!counted) return;
      const at = (elapsed() - warmupMs) / 1000;
      record(at);
      const wallMs = elapsed() - startedAt;
      if (opAudioSeconds > 0) rtf.record((wallMs / (opAudioSeconds * 1000)) * 1000, at);
      audioSeconds += opAudioSeconds;
      counts.completed++;
      lastDoneMs = elapsed();
      if (lastDoneMs > durationMs) cpuAtLastDone = process.cpuUsage();
    } catch (err) {
      if (isAuthFailure(err) && !stop.signal.aborted) {
        // A key refused is refused for every operation: the run stops, and says so.
        refused = err;
        stop.abort(err);
        return;
      }
      if (!counted) return;
      if (stop.signal.aborted || err instanceof Cut) {
        counts.cut++;
        if (stop.signal.reason instanceof Cut) {
          // Still running when the grace ended (not stopped by the user): at least this late.
          const ageMs = cutAtMs - startedAt;
          for (const metric of ENDING_METRICS[workload]) {
            const from = metric === 'final_after_last_audio' ? (progress.lastAudioDueMs ?? 0) : 0;
            if (progress.latencies[metric] === undefined && ageMs > from)
              progress.latencies[metric] = ageMs - from;
          }
          record((cutAtMs - warmupMs) / 1000);
        }
        return;
      }
      counts.failed++;
      const code = (err as { code?: string }).code ?? 'ERR_UNKNOWN';
      errors[code] = (errors[code] ?? 0) + 1;
    }
  };
  const track = (p: Promise<void>) => {
    inFlight.add(p);
    p.finally(() => inFlight.delete(p));
  };

  const ended = sleep(durationMs);
  let running = true;
  ended.then(() => (running = false));

  if (options.concurrency !== undefined) {
    for (let w = 0; w < options.concurrency; w++)
      track(
        (async () => {
          while (running && !stop.signal.aborted) {
            await one(elapsed());
            // An operation that fails before any I/O (a check in the client) settles in a
            // microtask: without a turn of the event loop the duration's timer never fires.
            await setImmediate();
          }
        })(),
      );
  } else {
    const intervalMs = 1000 / options.rate!;
    const maxInFlight = options.maxInFlight ?? 10_000;
    track(
      (async () => {
        let burst = 0;
        for (let n = 0; ; n++) {
          const dueAt = n * intervalMs;
          if (dueAt >= durationMs || stop.signal.aborted) break;
          const wait = dueAt - elapsed();
          if (wait > 0) {
            await sleep(wait);
            burst = 0;
          } else if (++burst >= 64) {
            // Behind schedule: what is due is started (or counted overload) in bursts, and
            // the event loop gets a turn between them (replies, timers, Ctrl-C).
            await setImmediate();
            burst = 0;
          }
          if (!running || stop.signal.aborted) break;
          if (inFlight.size > maxInFlight) {
            if (dueAt >= warmupMs) {
              counts.started++;
              counts.failed++;
              errors.ERR_BENCH_OVERLOAD = (errors.ERR_BENCH_OVERLOAD ?? 0) + 1;
            }
            continue;
          }
          track(one(dueAt));
        }
      })(),
    );
  }

  await ended;
  const endedAtMs = Math.min(elapsed(), durationMs);
  const cpuAtEnded = process.cpuUsage();
  // In flight at the end: a grace to finish, then cut.
  const graceMs = (options.graceSec ?? 10) * 1000;
  if (inFlight.size > 0 && !stop.signal.aborted) {
    let graceTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(inFlight),
      new Promise((r) => {
        graceTimer = setTimeout(r, graceMs);
      }),
    ]);
    clearTimeout(graceTimer);
  }
  if (!stop.signal.aborted) {
    cutAtMs = elapsed();
    stop.abort(new Cut('the run reached its duration'));
  }
  await Promise.allSettled([...inFlight]);
  // The figures cover the time the counted operations took: to the end of the last one when it
  // ended in the grace (a live stream longer than the run counted its audio over the run alone).
  const measuredMs = Math.max(1, Math.max(endedAtMs, lastDoneMs) - warmupMs);
  const cpuAtEnd = lastDoneMs > endedAtMs && cpuAtLastDone ? cpuAtLastDone : cpuAtEnded;
  const cpuSeconds = (cpuAtEnd.user - cpuAtWarmup.user + cpuAtEnd.system - cpuAtWarmup.system) / 1e6;
  if (warmupTimer) clearTimeout(warmupTimer);
  clearInterval(ticker);
  options.signal?.removeEventListener('abort', onAbort);
  if (refused) {
    for (const r of recorders.values()) r.destroy();
    rtf.destroy();
    throw refused;
  }
  const interrupted = options.signal?.aborted === true;

  const admissionEnd = admission();
  const from = warmupReached ? admissionAtWarmup : admissionAtStart;
  const headline = recorders.get(metrics[0]!)!;
  const latency: Record<string, LatencySummary> = {};
  for (const [metric, recorder] of recorders) latency[metric] = recorder.summary();
  const rtfSummary = rtf.summary();
  const report: BenchReport = {
    tool: 'speechpipe bench',
    workload,
    transport,
    load:
      options.concurrency !== undefined
        ? { model: 'concurrency', concurrency: options.concurrency }
        : { model: 'rate', rate_per_second: options.rate! },
    duration_sec: options.durationSec,
    warmup_sec: warmupSec,
    pace: workload === 'live' || workload === 'diarization' ? (options.pace ?? 1) : null,
    target: options.target ?? 'unknown',
    started_at: new Date(Date.now() - elapsed()).toISOString(),
    interrupted,
    media: {
      clips: clips.length,
      audio_seconds: round(
        clips.reduce((s, c) => s + c.seconds, 0),
        2,
      ),
    },
    operations: counts,
    throughput: {
      audio_seconds_per_second: round(audioSeconds / (measuredMs / 1000), 3),
      requests_per_second: round(counts.completed / (measuredMs / 1000), 3),
    },
    latency_ms: latency,
    real_time_factor: {
      p50: perMille(rtfSummary.p50),
      p90: perMille(rtfSummary.p90),
      max: perMille(rtfSummary.max),
    },
    errors,
    rate_limited: {
      responses_429: admissionEnd.rejections - from.rejections + byteRate.responses,
      retry_after_wait_ms: Math.round(admissionEnd.pausedMs - from.pausedMs + byteRate.waitMs),
    },
    client_cpu_seconds_per_audio_second: audioSeconds > 0 ? round(cpuSeconds / audioSeconds, 5) : 0,
    series: headline.points,
    distribution: headline.distribution(),
  };
  for (const r of recorders.values()) r.destroy();
  rtf.destroy();
  return report;
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

/** A clip's live frames, cut once per clip, language and size (the source of every stream of it). */
const clipFrames = new WeakMap<BenchClip, Map<string, readonly AudioFrame[]>>();

function framesOf(clip: BenchClip, language: Language, frameMs: number): readonly AudioFrame[] {
  let byKind = clipFrames.get(clip);
  if (!byKind) {
    byKind = new Map();
    clipFrames.set(clip, byKind);
  }
  const key = `${language}/${frameMs}`;
  let frames = byKind.get(key);
  if (!frames) {
    frames = cutFrames(clip.pcm, { language, frameMs });
    byKind.set(key, frames);
  }
  return frames;
}

/**
 * A live source that lets its frames go on the clip's own timeline at `speed`: frame k when the
 * audio before it has had its time since `start`. A frame held back (the service has not taken
 * the ones before it) goes as soon as it can, however late, as a live source's backlog would
 * (pace() makes up at most a second), and no timer's lateness is lost. The frames are cut once
 * per clip, as the bare loop of bench/live-cpu.ts cuts its own: the simulated source's work is
 * not the client's cost.
 */
export function liveSource(frames: readonly AudioFrame[], start: number, speed: number): Readable {
  let next = 0;
  let offset = 0; // PCM bytes before the next frame
  let timer: NodeJS.Timeout | undefined;
  return new Readable({
    objectMode: true,
    highWaterMark: 1,
    read() {
      const frame = frames[next];
      if (!frame) {
        this.push(null);
        return;
      }
      const release = () => {
        timer = undefined;
        next++;
        offset += frame.pcm.length;
        this.push(frame);
      };
      const wait = start + (offset / LIVE_BYTES_PER_SECOND / speed) * 1000 - performance.now();
      if (wait <= 0) release();
      else timer = setTimeout(release, wait);
    },
    destroy(err, callback) {
      if (timer) clearTimeout(timer);
      timer = undefined;
      callback(err);
    },
  });
}

/** One operation of the workload on one clip. */
async function operation(
  options: BenchOptions,
  clip: BenchClip,
  signal: AbortSignal,
  progress: OpProgress,
  onByteRate: (retryAfterMs: number) => void,
): Promise<number> {
  const { client, transport } = options;
  const language = options.language ?? 'en';
  // A live session's 429 SESSION_BYTE_RATE_EXCEEDED is waited out by the session (the frame
  // goes again after Retry-After, holding the frames behind it): counted here, as the client's
  // admission counts the others.
  const byteRate = { penalize: (retryAfterMs: number) => onByteRate(retryAfterMs) };
  const now = () => performance.now();
  const start = now();
  switch (options.workload) {
    case 'live':
    case 'diarization': {
      const diarization = options.workload === 'diarization';
      const { latencies } = progress;
      // The simulated source releases audio in frames of the size the transport sends (a
      // second per POST over HTTP, as sttStream joins them; 100 ms events over Socket.IO): the
      // source's own rhythm is not the client's cost, and the bare loop of bench/live-cpu.ts
      // paces the same frames.
      const frameMs = transport === 'socketio' ? 100 : 1000;
      const frames = framesOf(clip, language, frameMs);
      const speed = options.pace ?? 1;
      // The final result counts from when the last frame was due, not from when it went: a
      // service that holds frames back (a write completes when the service took the frame)
      // delays the frames after them, and must not shorten the figure by doing so.
      const lastFrameOffset = clip.pcm.length - (frames.at(-1)?.pcm.length ?? 0);
      progress.lastAudioDueMs = (lastFrameOffset / LIVE_BYTES_PER_SECOND / speed) * 1000;
      const lastAudioDue = start + progress.lastAudioDueMs;
      await pipeline(
        liveSource(frames, start, speed),
        diarization
          ? diarizationStream({ client, transport, pacer: byteRate })
          : sttStream({ client, transport, pacer: byteRate }),
        new Writable({
          objectMode: true,
          write(record: AsrRecord | DiarizationRecord, _encoding, callback) {
            const t = now() - start;
            if (diarization) {
              const r = record as DiarizationRecord;
              if (
                latencies.first_segment === undefined &&
                r.final_segments.length + r.active_segments.length > 0
              )
                latencies.first_segment = t;
            } else {
              const r = record as AsrRecord;
              if (r.words.length > 0) {
                latencies.first_partial ??= t;
                if (r.is_speech_final) latencies.first_final_word ??= t;
              }
            }
            if (record.is_final) latencies.final_after_last_audio = now() - lastAudioDue;
            callback();
          },
        }),
        { signal },
      );
      return clip.seconds;
    }
    case 'fast': {
      const { latencies } = progress;
      for await (const record of client.fast.transcribe(clip.wav, { transport, language, signal })) {
        latencies.first_record ??= now() - start;
        if (record.is_final) latencies.final = now() - start;
      }
      return clip.seconds;
    }
    case 'batch': {
      const ack = await client.batch.submit(clip.wav, { language, signal });
      const job = await client.batch.wait(ack.jobId, { signal, initialIntervalMs: 50, maxIntervalMs: 1000 });
      if (job.status !== 'done') {
        const err = new Error(`batch job ended ${job.status}`) as Error & { code: string };
        err.code = `JOB_${job.status.toUpperCase()}`;
        throw err;
      }
      progress.latencies.submit_to_done = now() - start;
      return clip.seconds;
    }
    case 'tts': {
      const text = clip.text ?? BUILTIN_SENTENCES[0]!;
      const synthesis = await client.tts.synthesize({ text, transport, signal });
      const { latencies } = progress;
      let bytes = 0;
      for await (const chunk of synthesis.audio) {
        latencies.first_audio ??= now() - start;
        bytes += (chunk as Buffer).length;
      }
      latencies.first_audio ??= now() - start;
      latencies.complete = now() - start;
      return bytes / 2 / synthesis.sampleRate;
    }
  }
}

/** A real-time factor recorded in thousandths (the recorder's whole units), or null. */
const perMille = (x: number | null) => (x === null ? null : x / 1000);
