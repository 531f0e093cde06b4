// Batch jobs: created on an accepted submission, moved queued → processing → done/failed on
// the configured schedule, cleared after a read without save_result, and rendered in the V2
// envelope or the V1 legacy shape.

import { randomUUID } from 'node:crypto';
import type {
  DiarizationSegment,
  JobStatus,
  JobV1,
  JobV2,
  JobV2Envelope,
  LegacyWordOffset,
} from '../protocol/jobs.ts';
import type { WordSegment } from '../protocol/records.ts';
import { realSegments, v1Speaker } from '../protocol/speaker-rule.ts';
import type { EmulatorContext } from './context.ts';
import { type AnalyzedAudio, type BatchOptions, type BatchResult, batchResult } from './engine/recording.ts';

export const SERVICE_VERSION = 'speechpipe-emulator 0.1.0';
export const LEGACY_API_VERSION = 'v1';
export const VENDOR_VERSION = 'emulator-1';
/** The rate the service transcribes at, reported as `sample_rate_hz`. */
export const SERVICE_SAMPLE_RATE = 16_000;

export interface Job {
  readonly id: string;
  version: number;
  readonly createdAt: string;
  updatedAt: string;
  readonly language: string;
  readonly audio: AnalyzedAudio;
  readonly options: BatchOptions;
  /** The job ends `failed` (a `fail` fault on the submission). */
  readonly fails: boolean;
  status: JobStatus;
  result: BatchResult | undefined;
}

export class JobStore {
  readonly #jobs = new Map<string, Job>();
  readonly #ctx: EmulatorContext;

  constructor(ctx: EmulatorContext) {
    this.#ctx = ctx;
  }

  create(audio: AnalyzedAudio, options: BatchOptions, fails: boolean): Job {
    const now = new Date().toISOString();
    const job: Job = {
      id: randomUUID(),
      version: 1,
      createdAt: now,
      updatedAt: now,
      language: options.language,
      audio,
      options,
      fails,
      status: 'queued',
      result: undefined,
    };
    this.#jobs.set(job.id, job);
    this.#ctx.stats.jobsCreated++;
    const { queuedMs, processingMs } = this.#ctx.jobTiming;
    const { lifecycle } = this.#ctx;
    lifecycle.timeout(queuedMs, () => {
      this.#move(job, 'processing');
      const work = processingMs + this.#ctx.audioDelayMs(audio.durationSec);
      lifecycle.timeout(work, () => {
        if (job.fails) this.#move(job, 'failed');
        else {
          job.result = batchResult(audio, options);
          this.#move(job, 'done');
        }
      });
    });
    return job;
  }

  get(id: string): Job | undefined {
    return this.#jobs.get(id.toLowerCase());
  }

  /** After a read without save_result, a terminal result is cleared for later reads. */
  clearAfterRead(job: Job): void {
    if (job.status !== 'done' && job.status !== 'failed') return;
    job.result = undefined;
    this.#move(job, 'cleared');
  }

  #move(job: Job, status: JobStatus): void {
    job.status = status;
    job.version++;
    job.updatedAt = new Date().toISOString();
  }
}

export function renderV2(job: Job): JobV2Envelope {
  const base = {
    id: job.id,
    version: job.version,
    created_at: job.createdAt,
    updated_at: job.updatedAt,
    language: job.language,
    audio_duration: round3(job.audio.durationSec),
    sample_rate_hz: SERVICE_SAMPLE_RATE,
  };
  let data: JobV2;
  if (job.status === 'done' && job.result) data = { ...base, status: 'done', ...structuredClone(job.result) };
  else data = { ...base, status: job.status as Exclude<JobStatus, 'done'> };
  return { message: 'success', data };
}

export function renderV1(job: Job, forceAlign: boolean): JobV1 {
  const done = job.status === 'done' && job.result !== undefined;
  const out: JobV1 = {
    status: job.status,
    APIVersion: LEGACY_API_VERSION,
    version: SERVICE_VERSION,
    metadata: { vendorVersion: VENDOR_VERSION, jobId: job.id, fileDuration: round3(job.audio.durationSec) },
    results: { transcript: done ? job.result!.final_result : '' },
    diarization_segments: done
      ? structuredClone(job.result!.diarization_segments)
      : job.status === 'cleared'
        ? []
        : null,
  };
  if (done) {
    out.results.offsets = alignSpeakers(
      job.result!.final_word_segments,
      job.result!.diarization_segments,
      forceAlign,
    );
  }
  return out;
}

/** `results.offsets` with the V1 speaker rule (`src/protocol/speaker-rule.ts`). */
export function alignSpeakers(
  words: readonly WordSegment[],
  segments: readonly DiarizationSegment[],
  forceAlign: boolean,
): LegacyWordOffset[] {
  const real = realSegments(segments);
  return words.map((w) => ({
    word: w.word,
    startTime: w.start_time,
    endTime: w.end_time,
    speaker: v1Speaker(w, real, forceAlign),
  }));
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;
