// Batch jobs: the submission acknowledgement, the V2 envelope (recommended) and the V1
// legacy shape. The two lookup shapes share statuses but must never be mixed.

import { checkWordSegment, type WordSegment } from './records.ts';
import { Checker, type Obj, unwrap, type Validation } from './validate.ts';

/** The five batch job statuses (interface, States and transitions). */
export const JOB_STATUSES = ['queued', 'processing', 'done', 'failed', 'cleared'] as const;
/** A batch job status. */
export type JobStatus = (typeof JOB_STATUSES)[number];
/** The statuses after which a job no longer changes except to `cleared`: `done`, `failed`, `cleared`. */
export type TerminalJobStatus = 'done' | 'failed' | 'cleared';

/** Whether `status` is terminal (`done`, `failed` or `cleared`); `queued` and `processing` are not. */
export function isTerminalStatus(status: JobStatus): status is TerminalJobStatus {
  return status === 'done' || status === 'failed' || status === 'cleared';
}

/** The acknowledgement of an accepted batch submission (`POST /v1/transcribe/{lang}`). */
export interface BatchSubmitAck {
  /** The new job's UUID, for the lookups. */
  jobId: string;
  /** Always `queued`. */
  status: 'queued';
}

/** A speaker segment of a batch job, times in seconds. */
export interface DiarizationSegment {
  /** Start, seconds. */
  start_time: number;
  /** End, seconds. */
  end_time: number;
  /** Speaker label. */
  speaker: string;
}

/** The V2 fields present for every status. */
interface JobV2Base {
  /** Job UUID. */
  id: string;
  /** An integer; the interface does not say what it counts. */
  version: number;
  /** ISO 8601 timestamp with milliseconds. */
  created_at: string;
  /** ISO 8601 timestamp with milliseconds. */
  updated_at: string;
  /** The submitted language. */
  language: string;
  /** Audio duration, seconds. */
  audio_duration: number;
  /** Sample rate of the audio, Hz. */
  sample_rate_hz: number;
}

/** V2 `data` of a job that is not `done`: no result fields. */
export interface JobV2Pending extends JobV2Base {
  /** Any status but `done`; a failed job carries no failure reason. */
  status: 'queued' | 'processing' | 'failed' | 'cleared';
}

/** V2 `data` of a `done` job, with every result field. */
export interface JobV2Done extends JobV2Base {
  /** Always `done`. */
  status: 'done';
  /** Transcript as recognized. */
  asr_result: string;
  /** Words of `asr_result`, without speakers. */
  asr_word_segments: WordSegment[];
  /** Speaker segments; labels are turns within this result, not identities. */
  diarization_segments: DiarizationSegment[];
  /** Transcript after inverse text normalization, or null. */
  itn_result: string | null;
  /** Words of `itn_result`, or null. */
  itn_word_segments: WordSegment[] | null;
  /** Inner shape not shown by the interface. */
  itn_output_formats: unknown;
  /** Transcript after redaction, or null. */
  redaction_result: string | null;
  /** Words of `redaction_result`, or null. */
  redaction_word_segments: WordSegment[] | null;
  /** Empty string when nothing was redacted. */
  redaction_labels: string;
  /** The final transcript. */
  final_result: string;
  /** Words of `final_result`. */
  final_word_segments: WordSegment[];
}

/** `data` of the V2 envelope: result fields exist only for `done`. */
export type JobV2 = JobV2Pending | JobV2Done;

/** The V2 lookup answer (`GET /v1/transcribe/{job_id}`). */
export interface JobV2Envelope {
  /** Always `success` on a 200. */
  message: 'success';
  /** The job; result fields only when `done`. */
  data: JobV2;
}

/** The result fields of a V2 `done` job, in the interface's order. */
export const V2_RESULT_FIELDS = [
  'asr_result',
  'asr_word_segments',
  'diarization_segments',
  'itn_result',
  'itn_word_segments',
  'itn_output_formats',
  'redaction_result',
  'redaction_word_segments',
  'redaction_labels',
  'final_result',
  'final_word_segments',
] as const;

/** A word of a V1 `done` result (`results.offsets`), times in seconds. */
export interface LegacyWordOffset {
  /** Text of the word. */
  word: string;
  /** Start, seconds. */
  startTime: number;
  /** End, seconds. */
  endTime: number;
  /** Speaker by the V1 speaker rule (see `v1Speaker`); null when the job has no real segment. */
  speaker: string | null;
}

/** The V1 legacy lookup shape (HTTP 200 for all five statuses). */
export interface JobV1 {
  status: JobStatus;
  APIVersion: string;
  version: string;
  metadata: { vendorVersion: string; jobId: string; fileDuration: number };
  /** `transcript` is empty unless done; `offsets` only when done. */
  results: { transcript: string; offsets?: LegacyWordOffset[] };
  /** null for queued, processing, failed; [] for cleared; populated for done. */
  diarization_segments: DiarizationSegment[] | null;
}

function checkDiarizationSegment(c: Checker, value: unknown, path: string): void {
  if (!c.object(value, path)) return;
  c.number(value, 'start_time', path, { min: 0 });
  c.number(value, 'end_time', path, { min: 0 });
  c.string(value, 'speaker', path);
}

const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(\d*)?(Z|[+-]\d{2}:\d{2})$/;

function timestamp(c: Checker, obj: Obj, key: string, path: string): void {
  if (c.string(obj, key, path) && !TIMESTAMP.test(obj[key] as string)) {
    c.fail(`${path}.${key}`, 'expected an ISO 8601 date-time with milliseconds');
  }
}

/** Check a submission acknowledgement: a UUID `jobId` and status `queued`. Never throws. */
export function validateSubmitAck(value: unknown): Validation<BatchSubmitAck> {
  const c = new Checker();
  if (c.object(value, '$')) {
    c.uuid(value, 'jobId', '$');
    c.oneOf(value, 'status', '$', ['queued']);
  }
  return c.result(value);
}

/** Check a V2 envelope against the interface, including that result fields appear exactly when `done`. Never throws. */
export function validateJobV2(value: unknown): Validation<JobV2Envelope> {
  const c = new Checker();
  if (!c.object(value, '$')) return c.result(value);
  c.oneOf(value, 'message', '$', ['success']);
  const data = value.data;
  if (!c.object(data, '$.data')) return c.result(value);
  const p = '$.data';
  c.uuid(data, 'id', p);
  c.integer(data, 'version', p);
  timestamp(c, data, 'created_at', p);
  timestamp(c, data, 'updated_at', p);
  c.string(data, 'language', p);
  c.number(data, 'audio_duration', p, { min: 0 });
  c.integer(data, 'sample_rate_hz', p);
  if (!c.oneOf(data, 'status', p, JOB_STATUSES)) return c.result(value);
  if (data.status !== 'done') {
    for (const field of V2_RESULT_FIELDS) c.absent(data, field, p, `when status is ${data.status}`);
    return c.result(value);
  }
  const words = (w: unknown, path: string) => checkWordSegment(c, w, path);
  c.string(data, 'asr_result', p);
  c.array(data, 'asr_word_segments', p, words);
  c.array(data, 'diarization_segments', p, (s, path) => checkDiarizationSegment(c, s, path));
  c.string(data, 'itn_result', p, { nullable: true });
  c.array(data, 'itn_word_segments', p, words, { nullable: true });
  c.has(data, 'itn_output_formats', p);
  c.string(data, 'redaction_result', p, { nullable: true });
  c.array(data, 'redaction_word_segments', p, words, { nullable: true });
  c.string(data, 'redaction_labels', p);
  c.string(data, 'final_result', p);
  c.array(data, 'final_word_segments', p, words);
  return c.result(value);
}

/** Check a V1 legacy job, including the per-status rules for `transcript`, `offsets` and `diarization_segments`. Never throws. */
export function validateJobV1(value: unknown): Validation<JobV1> {
  const c = new Checker();
  if (!c.object(value, '$')) return c.result(value);
  const statusOk = c.oneOf(value, 'status', '$', JOB_STATUSES);
  c.string(value, 'APIVersion', '$');
  c.string(value, 'version', '$');
  const meta = value.metadata;
  if (c.object(meta, '$.metadata')) {
    c.string(meta, 'vendorVersion', '$.metadata');
    c.uuid(meta, 'jobId', '$.metadata');
    c.number(meta, 'fileDuration', '$.metadata', { min: 0 });
  }
  const results = value.results;
  const status = statusOk ? (value.status as JobStatus) : undefined;
  if (c.object(results, '$.results')) {
    c.string(results, 'transcript', '$.results');
    if (status !== undefined && status !== 'done') {
      if (results.transcript !== '' && typeof results.transcript === 'string') {
        c.fail('$.results.transcript', `must be empty when status is ${status}`);
      }
      c.absent(results, 'offsets', '$.results', `when status is ${status}`);
    } else if (status === 'done') {
      c.array(results, 'offsets', '$.results', (o, path) => {
        if (!c.object(o, path)) return;
        c.string(o, 'word', path);
        c.number(o, 'startTime', path, { min: 0 });
        c.number(o, 'endTime', path, { min: 0 });
        c.string(o, 'speaker', path, { nullable: true });
      });
    }
  }
  if (status === 'queued' || status === 'processing' || status === 'failed') {
    if (value.diarization_segments !== null)
      c.fail('$.diarization_segments', `must be null when status is ${status}`);
  } else if (status === 'cleared') {
    const segs = value.diarization_segments;
    if (!Array.isArray(segs) || segs.length !== 0)
      c.fail('$.diarization_segments', 'must be [] when status is cleared');
  } else if (status === 'done') {
    c.array(value, 'diarization_segments', '$', (s, path) => checkDiarizationSegment(c, s, path));
  }
  return c.result(value);
}

/** `validateSubmitAck`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseSubmitAck = (value: unknown): BatchSubmitAck =>
  unwrap('submission acknowledgement', validateSubmitAck(value));
/** `validateJobV2`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseJobV2 = (value: unknown): JobV2Envelope => unwrap('V2 job envelope', validateJobV2(value));
/** `validateJobV1`, or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export const parseJobV1 = (value: unknown): JobV1 => unwrap('V1 job', validateJobV1(value));
