// Batch jobs: created on an accepted submission, moved queued → processing → done/failed on
// the configured schedule, cleared after a read without save_result (only the status record is
// kept), forgotten some time after they end, and rendered in the V2 or the V1 legacy shape.

import type {
  DiarizationSegment,
  JobStatus,
  JobV1,
  JobV2,
  JobV2Envelope,
  LegacyWordOffset,
} from '../protocol/jobs.ts';
import type { WordSegment } from '../protocol/records.ts';
import { SegmentIndex } from '../protocol/segment-index.ts';
import type { EmulatorContext } from './context.ts';
import { type AnalyzedAudio, type BatchOptions, type BatchResult, batchResult } from './engine/recording.ts';
import { roundToMs } from './engine/times.ts';

export const SERVICE_VERSION = 'speechpipe-emulator 0.1.0';
export const LEGACY_API_VERSION = 'v1';
export const VENDOR_VERSION = 'emulator-1';
/** The rate the service transcribes at, reported as `sample_rate_hz`. */
export const SERVICE_SAMPLE_RATE = 16_000;

/** How long an ended job is kept by default (the interface defines no retention). */
export const DEFAULT_JOB_RETENTION_MS = 60 * 60 * 1000;

export interface JobRetention {
  /**
   * An ended job (`done`, `failed`, `cleared`) is forgotten this long after its last status
   * change; later reads are 404. Default one hour; `Infinity` keeps every job.
   */
  retentionMs?: number;
  /** The clock retention is measured with (milliseconds); default `Date.now`. */
  now?: () => number;
}

/** What a job's result is made from: held until the job ends. */
interface JobInput {
  readonly audio: AnalyzedAudio;
  readonly options: BatchOptions;
}

export interface Job {
  readonly id: string;
  /** The billable account whose key submitted it: only that account's keys can read it. */
  readonly account: string;
  version: number;
  readonly createdAt: string;
  updatedAt: string;
  readonly language: string;
  readonly durationSec: number;
  /** The job ends `failed` (a `fail` fault on the submission). */
  readonly fails: boolean;
  status: JobStatus;
  /** Until the job ends (speech regions, a registered transcript); then dropped. */
  input: JobInput | undefined;
  /** While `done`; dropped when the job is cleared, leaving only the fields above. */
  result: BatchResult | undefined;
}

const ENDED: ReadonlySet<JobStatus> = new Set(['done', 'failed', 'cleared']);

export class JobStore {
  readonly #jobs = new Map<string, Job>();
  /** Ended jobs by id → when they are forgotten; in that order, as the retention is fixed. */
  readonly #expiry = new Map<string, number>();
  readonly #ctx: EmulatorContext;
  readonly #retentionMs: number;
  readonly #now: () => number;

  constructor(ctx: EmulatorContext, retention: JobRetention = {}) {
    this.#ctx = ctx;
    const ms = retention.retentionMs ?? DEFAULT_JOB_RETENTION_MS;
    if (!(typeof ms === 'number' && ms >= 0)) throw new RangeError('retentionMs must be >= 0');
    this.#retentionMs = ms;
    this.#now = retention.now ?? Date.now;
  }

  create(account: string, audio: AnalyzedAudio, options: BatchOptions, fails: boolean): Job {
    this.#sweep();
    const now = new Date().toISOString();
    const job: Job = {
      id: this.#ctx.newJobId(),
      account,
      version: 1,
      createdAt: now,
      updatedAt: now,
      language: options.language,
      durationSec: audio.durationSec,
      fails,
      status: 'queued',
      input: { audio, options },
      result: undefined,
    };
    this.#jobs.set(job.id, job);
    this.#ctx.stats.jobsCreated++;
    const { queuedMs, processingMs } = this.#ctx.jobTiming;
    const { lifecycle } = this.#ctx;
    lifecycle.timeout(queuedMs, () => {
      this.#move(job, 'processing');
      const input = job.input!;
      // The recognizer decodes while the job is processing; it is done when both are.
      const recognized = job.fails ? undefined : this.#ctx.recordingWords(input.audio, 'batch');
      recognized?.catch(() => {});
      if (job.fails) input.audio.recording?.release();
      const work = processingMs + this.#ctx.audioDelayMs(job.durationSec);
      lifecycle.timeout(work, async () => {
        job.input = undefined;
        let words: WordSegment[][] | undefined;
        try {
          words = await recognized;
        } catch {
          if (lifecycle.closed) return;
          this.#move(job, 'failed');
          return;
        }
        if (job.fails) this.#move(job, 'failed');
        else {
          job.result = batchResult(input.audio, input.options, words);
          this.#move(job, 'done');
        }
      });
    });
    return job;
  }

  /** The job, if `account` owns it: another account's job is as unknown as a job never made. */
  get(id: string, account: string): Job | undefined {
    this.#sweep();
    const job = this.#jobs.get(id.toLowerCase());
    return job?.account === account ? job : undefined;
  }

  /** After a read without save_result, a terminal result is cleared for later reads. */
  clearAfterRead(job: Job): void {
    if (job.status !== 'done' && job.status !== 'failed') return;
    job.result = undefined;
    this.#move(job, 'cleared');
  }

  /** What the store holds: jobs, jobs still holding their input, and results. */
  held(): { jobs: number; inputs: number; results: number } {
    let inputs = 0;
    let results = 0;
    for (const job of this.#jobs.values()) {
      if (job.input) inputs++;
      if (job.result) results++;
    }
    return { jobs: this.#jobs.size, inputs, results };
  }

  #move(job: Job, status: JobStatus): void {
    job.status = status;
    job.version++;
    job.updatedAt = new Date().toISOString();
    if (ENDED.has(status) && this.#retentionMs !== Number.POSITIVE_INFINITY) {
      // Re-inserted at the end: the map stays ordered by expiry.
      this.#expiry.delete(job.id);
      this.#expiry.set(job.id, this.#now() + this.#retentionMs);
    }
  }

  /** Forget the ended jobs whose retention has passed. */
  #sweep(): void {
    const now = this.#now();
    for (const [id, at] of this.#expiry) {
      if (at > now) break;
      this.#expiry.delete(id);
      this.#jobs.delete(id);
    }
  }
}

export function renderV2(job: Job): JobV2Envelope {
  const base = {
    id: job.id,
    version: job.version,
    created_at: job.createdAt,
    updated_at: job.updatedAt,
    language: job.language,
    audio_duration: roundToMs(job.durationSec),
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
    metadata: { vendorVersion: VENDOR_VERSION, jobId: job.id, fileDuration: roundToMs(job.durationSec) },
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
  // Indexed once: a lookup of a long job's words is O(log segments) a word, not a scan of every segment.
  const index = new SegmentIndex(segments);
  return words.map((w) => ({
    word: w.word,
    startTime: w.start_time,
    endTime: w.end_time,
    speaker: index.v1Speaker(w, forceAlign),
  }));
}
