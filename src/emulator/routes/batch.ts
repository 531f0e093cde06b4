// Batch transcription: POST /v1/transcribe/{lang} (multipart upload → job), and the job
// lookups GET /v1/transcribe/{job_id} (V2) and GET /v1/transcribe/{job_id}/{lang} (V1 legacy).

import { isLanguage } from '../../protocol/languages.ts';
import { isUuid } from '../../protocol/uuid.ts';
import type { DiarizationModel } from '../engine/recording.ts';
import type { HttpExchange } from '../http-exchange.ts';
import { answeredAfterEffect, throwIfFailing } from '../http-operation.ts';
import { type JobStore, renderV1, renderV2 } from '../jobs.ts';
import { reject } from '../rejection.ts';
import type { EmulatorKey } from '../types.ts';
import { checkUploadHeaders, receiveUpload, uploadRules } from '../upload.ts';

const DIARIZATION: Record<string, DiarizationModel> = {
  '0': 'off',
  false: 'off',
  '1': 'd1',
  true: 'd1',
  d1: 'd1',
  d2: 'd2',
};
const BOOLEAN: Record<string, boolean> = { '0': false, false: false, '1': true, true: true };

/** A query boolean (`0`, `1`, `false`, `true`), `fallback` when absent, else 400. */
export function queryBoolean(params: URLSearchParams, name: string, fallback: boolean): boolean {
  const raw = params.get(name);
  if (raw === null) return fallback;
  const value = BOOLEAN[raw];
  if (value === undefined) {
    throw reject(
      'VALIDATION_INVALID_PARAM',
      `${name} must be one of 0, 1, false, true; got ${JSON.stringify(raw)}`,
    );
  }
  return value;
}

export async function submitBatch(
  ex: HttpExchange,
  key: EmulatorKey,
  lang: string,
  jobs: JobStore,
): Promise<void> {
  const { ctx } = ex;
  if (!isLanguage(lang)) {
    throw reject(
      'VALIDATION_INVALID_LANGUAGE',
      `unknown language ${JSON.stringify(lang)}; use en, ar, codeswitch or auto`,
    );
  }
  const q = ex.url.searchParams;
  const rawDiarization = q.get('diarization');
  const diarization = rawDiarization === null ? 'off' : DIARIZATION[rawDiarization];
  if (diarization === undefined) {
    throw reject(
      'VALIDATION_INVALID_PARAM',
      `diarization must be one of 0, 1, false, true, d1, d2; got ${JSON.stringify(rawDiarization)}`,
    );
  }
  const itn = queryBoolean(q, 'itn', false);
  const redact = queryBoolean(q, 'redact', false);
  ctx.asrModel(lang, q.get('asr') ?? undefined);

  const rules = uploadRules(ctx.limits, 'batch');
  const headers = checkUploadHeaders(ex, rules);
  const release = ex.admit(() => ctx.concurrency.acquire(key.account, 'batch'));
  try {
    const audio = await receiveUpload(ex, rules, headers, ctx.recognizes(lang));
    await ctx.lifecycle.sleep(ctx.perRequestMs, ex.signal);
    const job = jobs.create(
      key.account,
      audio,
      { language: lang, diarization, itn, redact, transcript: ctx.fileTranscript(audio) },
      ex.plan.fail,
    );
    if (await answeredAfterEffect(ex)) return;
    await ex.json(200, { jobId: job.id, status: 'queued' });
  } finally {
    release();
  }
}

export async function getJob(
  ex: HttpExchange,
  key: EmulatorKey,
  rawId: string,
  legacy: boolean,
  jobs: JobStore,
): Promise<void> {
  const { ctx } = ex;
  if (!isUuid(rawId)) throw reject('VALIDATION_INVALID_UUID', 'job_id is not a UUID', { jobId: rawId });
  const q = ex.url.searchParams;
  const save = queryBoolean(q, 'save_result', false);
  const forceAlign = legacy ? queryBoolean(q, 'diarization_force_align', true) : true;
  ex.admit();
  await ctx.lifecycle.sleep(ctx.perRequestMs, ex.signal);
  const job = jobs.get(rawId, key.account);
  if (!job) throw reject('TRANSCRIPTION_JOB_NOT_FOUND', 'no job with this id', { jobId: rawId });
  throwIfFailing(ex);
  const body = legacy ? renderV1(job, forceAlign) : renderV2(job);
  // The result is cleared after the response is built: a later read returns `cleared`.
  if (!save) jobs.clearAfterRead(job);
  if (await answeredAfterEffect(ex)) return;
  await ex.json(200, body);
}
