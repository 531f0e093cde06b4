// Batch transcription: submit (streamed multipart, never replayed blindly), the V2 and V1
// job lookups (typed separately, never mixed), polling until a terminal status, and
// submit + wait reading with save_result so a lost response can be read again.

import {
  DeadlineExceededError,
  InvalidArgumentError,
  localServiceError,
  ProtocolError,
  SpeechpipeError,
  SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import { batchJobLegacyPath, batchJobPath, batchSubmitPath } from '../protocol/http-paths.ts';
import {
  type BatchSubmitAck,
  isTerminalStatus,
  type JobStatus,
  type JobV1,
  type JobV2,
  type JobV2Envelope,
  validateJobV1,
  validateJobV2,
  validateSubmitAck,
} from '../protocol/jobs.ts';
import type { Language } from '../protocol/languages.ts';
import type { Limits } from '../protocol/limits.ts';
import { MAX_TIMER_MS } from '../protocol/options.ts';
import { isUuid } from '../protocol/uuid.ts';
import { unwrap } from '../protocol/validate.ts';
import { isAdmissionRejection } from './admission.ts';
import type { Attempt, RetryPolicy } from './attempts.ts';
import { DEFAULT_DEADLINES, type OperationDeadlines } from './deadlines.ts';
import { discard, type HttpResponse, type HttpTransport, readBody } from './http.ts';
import { oneShotRejection, type UploadInput, uploadSource } from './input.ts';
import { checkUploadBytes, multipartBody, withInputError } from './multipart.ts';
import { anySignal, isRetryableFailure, sleep } from './retry.ts';

/**
 * What a batch submission does when its outcome is ambiguous (the job may exist): `fail`
 * reports it, `resubmit` submits again, at the risk of a duplicate job.
 */
export type AmbiguousSubmitPolicy = 'fail' | 'resubmit';

/** Options of {@link BatchApi.submit}. */
export interface BatchSubmitOptions {
  /** Path language; default `auto`. */
  language?: Language;
  /** Exact ASR model key; omitted uses the service's default for the language. */
  asr?: string;
  /** `true` = default diarization model, `'d1'`/`'d2'` a specific one. */
  diarization?: boolean | 'd1' | 'd2';
  /** Inverse text normalization (number words as digits); omitted uses the service's default. */
  itn?: boolean;
  /** Redaction (e-mail addresses and numbers masked); omitted uses the service's default. */
  redact?: boolean;
  /** Aborts the submission, including its wait for admission. */
  signal?: AbortSignal;
  /**
   * The longest the submission may take from its first attempt: uploads, retries and pauses
   * (`DeadlineExceededError`, ambiguous if an upload was under way). Default the client's
   * `deadlines.batchSubmit` (30 min).
   */
  deadlineMs?: number;
  /**
   * After a 5xx, a timeout or a lost connection once the upload was complete, the job may
   * exist. `fail` (default) reports it (`err.ambiguous === true`) and submits nothing more;
   * `resubmit` submits again (a duplicate job is possible) and reports each through `onAmbiguous`.
   */
  onAmbiguousSubmit?: AmbiguousSubmitPolicy;
  /** Called with every ambiguous failure, before the policy applies. */
  onAmbiguous?: (err: SpeechServiceError | TransportError | UnreadableSubmitAnswerError) => void;
}

/** The service's acknowledgement of a batch submission (the job id), with how it was reached. */
export interface BatchSubmitResult extends BatchSubmitAck {
  /** Requests sent for this submission (admission retries excluded). */
  attempts: number;
  /** Earlier attempts whose outcome was ambiguous (possible duplicate jobs), under `resubmit`. */
  ambiguousAttempts: number;
}

/** Options of {@link BatchApi.get}. */
export interface GetOptions {
  /** Keep the result readable after this read (default false: a done or failed job reads `cleared` later). */
  saveResult?: boolean;
  /** Aborts the read. */
  signal?: AbortSignal;
  /** The longest the read and its retries may take. Default the client's `deadlines.batchGet` (2 min). */
  deadlineMs?: number;
}

/** Options of {@link BatchApi.getLegacy}, the V1 job lookup. */
export interface GetLegacyOptions extends GetOptions {
  /** The V1 compatibility path segment; not used by the service, but required. Default (also for `''`) `en`. */
  lang?: string;
  /** Default true (the service default). */
  diarizationForceAlign?: boolean;
}

/** Options of {@link BatchApi.wait}: polling with a growing pause until the job is terminal. */
export interface WaitOptions {
  /** Stops waiting (the job is untouched). */
  signal?: AbortSignal;
  /**
   * Give up after this long (throws `BatchWaitTimeoutError`; the job is untouched). Default the
   * client's `deadlines.batchWait` (4 h).
   */
  timeoutMs?: number;
  /** First pause between polls. Default 1 s. */
  initialIntervalMs?: number;
  /** Longest pause between polls. Default 15 s. */
  maxIntervalMs?: number;
  /** Growth of the pause per poll. Default 1.5. */
  factor?: number;
  /** Called after every poll with the job as read. */
  onStatus?: (job: JobV2) => void;
  /** Read with save_result (default true) so a lost final response can be read again. */
  saveResult?: boolean;
}

/**
 * A read without `save_result` lost its response, and the job now reads `cleared`: that read
 * may have consumed the result, which is gone. Never reported as a plain `cleared` job.
 */
export class BatchResultLostError extends SpeechpipeError {
  override name = 'BatchResultLostError';
  readonly jobId: string;
  readonly ambiguous = true;
  constructor(jobId: string, cause: unknown) {
    super(
      'ERR_RESULT_LOST',
      `job ${jobId} reads cleared after a read without save_result lost its response: the result may have been in that response`,
      { cause },
    );
    this.jobId = jobId;
  }
}

/**
 * A submission answered 200 with a body that is not a valid acknowledgement (not JSON, or not
 * its shape): the job was most likely created, but its id is unknown. Ambiguous, like a lost
 * answer, so it follows `onAmbiguousSubmit`. The `cause` is the body's ProtocolError.
 */
export class UnreadableSubmitAnswerError extends ProtocolError {
  override name = 'UnreadableSubmitAnswerError';
  readonly ambiguous = true;
  readonly operation = 'batch.submit';
  constructor(cause: ProtocolError) {
    super(cause.code, `batch.submit: the 200 answer is unreadable, the job may exist: ${cause.message}`, {
      issues: cause.issues,
      cause,
    });
  }
}

/** `wait()` reached its deadline; the job goes on, and can be waited for again. */
export class BatchWaitTimeoutError extends SpeechpipeError {
  override name = 'BatchWaitTimeoutError';
  readonly jobId: string;
  readonly lastStatus: JobStatus | undefined;
  constructor(jobId: string, lastStatus: JobStatus | undefined, timeoutMs: number, cause?: unknown) {
    super('ERR_WAIT_TIMEOUT', `job ${jobId} still ${lastStatus ?? 'unknown'} after ${timeoutMs} ms`, {
      cause,
    });
    this.jobId = jobId;
    this.lastStatus = lastStatus;
  }
}

/**
 * What a {@link BatchApi} shares with its client.
 * @internal
 */
export interface BatchDeps {
  http: HttpTransport;
  policy: RetryPolicy;
  limits: Limits;
  onAmbiguousSubmit: AmbiguousSubmitPolicy;
  /** Defaults of `deadlineMs` and `timeoutMs`. */
  deadlines?: Partial<Pick<OperationDeadlines, 'batchSubmit' | 'batchGet' | 'batchWait'>>;
}

function flag(value: boolean | undefined): string | undefined {
  return value === undefined ? undefined : value ? 'true' : 'false';
}

/**
 * Batch transcription (`client.batch`): submit a complete recording, read its job (V2 or V1),
 * wait for it to finish. Made by {@link SpeechClient}.
 */
export class BatchApi {
  readonly #deps: BatchDeps;

  /**
   * Made by the client; use `client.batch`.
   * @internal
   */
  constructor(deps: BatchDeps) {
    this.#deps = deps;
  }

  /**
   * Submit one complete recording (a path, bytes or a Readable; streamed, never buffered).
   * Admission rejections (429) wait in the queue; 413/422/4xx fail at once; connection
   * failures before the upload completed are retried; ambiguous failures follow the policy.
   */
  async submit(input: UploadInput, options: BatchSubmitOptions = {}): Promise<BatchSubmitResult> {
    const { http, limits } = this.#deps;
    const policy = options.onAmbiguousSubmit ?? this.#deps.onAmbiguousSubmit;
    const source = await uploadSource(input);
    // The service counts the whole multipart body against request_bytes.
    checkUploadBytes(source.size, {
      limit: limits.batchRequestBytes,
      bound: 'request_bytes',
      operation: 'batch.submit',
      multipart: source,
    });
    const query = {
      asr: options.asr,
      diarization:
        options.diarization === undefined
          ? undefined
          : options.diarization === true
            ? 'true'
            : options.diarization === false
              ? 'false'
              : options.diarization,
      itn: flag(options.itn),
      redact: flag(options.redact),
    };
    let attempts = 0;
    let ambiguousAttempts = 0;
    /** The attempt under way sent its whole upload: its answer is awaited. */
    let uploaded = false;
    /** close() cut an attempt whose upload was complete: the job may exist. */
    let closedAfterUpload = false;
    const closing = this.#deps.policy.closed;
    const onClose = () => {
      closedAfterUpload = uploaded;
    };
    closing?.addEventListener('abort', onClose, { once: true });
    const submitOnce = async ({ signal, accepted }: Attempt): Promise<BatchSubmitAck> => {
      const stream = source.open();
      if (!stream)
        throw new TransportError(
          'ERR_CONNECTION_RESET',
          'batch.submit: the input stream was already consumed and cannot be sent again',
          { operation: 'batch.submit' },
        );
      const multipart = multipartBody({
        filename: source.filename,
        contentType: source.contentType,
        stream,
        size: source.size,
      });
      attempts++;
      multipart.body.once('end', () => (uploaded = true));
      const res = await withInputError(
        multipart,
        http.send({
          operation: 'batch.submit',
          method: 'POST',
          path: batchSubmitPath(options.language ?? 'auto'),
          query,
          headers: {
            'content-type': multipart.contentType,
            ...(multipart.length === undefined ? {} : { 'content-length': String(multipart.length) }),
          },
          body: multipart.body,
          signal,
          headersTimeoutMs: http.timeouts.uploadHeadersMs,
        }),
      );
      if (res.status !== 200) {
        const err = await http.errorOf(res, 'batch.submit');
        // A 5xx may come after the job was created.
        if (err.status >= 500) err.ambiguous = true;
        throw err;
      }
      // The service took the submission: a success for admission (raises a lowered concurrency).
      accepted();
      // A body that breaks off is ambiguous: the job was created before the answer. So is a
      // 200 whose body cannot be read as the acknowledgement.
      try {
        return await parseBody(res, 'batch.submit', 'submission acknowledgement', validateSubmitAck, signal);
      } catch (err) {
        if (!(err instanceof ProtocolError)) throw err;
        throw new UnreadableSubmitAnswerError(err);
      }
    };
    try {
      const ack = await this.#deps.policy.run({
        operation: 'batch.submit',
        workload: 'batch',
        signal: options.signal,
        deadline: options.deadlineMs ?? this.#deps.deadlines?.batchSubmit ?? DEFAULT_DEADLINES.batchSubmit,
        repeatable: () => source.reopenable,
        // An ambiguous failure (the job may exist) is told, then follows the policy.
        retryable: (err) => {
          const unreadable = err instanceof UnreadableSubmitAnswerError;
          if (
            ((err instanceof SpeechServiceError || err instanceof TransportError) && err.ambiguous) ||
            unreadable
          ) {
            options.onAmbiguous?.(err);
            if (policy === 'fail') return false;
            ambiguousAttempts++;
          }
          return unreadable || isRetryableFailure(err);
        },
        run: (attempt) =>
          submitOnce(attempt).finally(() => {
            uploaded = false;
          }),
      });
      return { ...ack, attempts, ambiguousAttempts };
    } catch (err) {
      // The one-shot input cannot be sent again after an admission refusal.
      if (isAdmissionRejection(err) && !source.reopenable) throw oneShotRejection(err);
      // As after a lost connection: the upload reached the service, which may have created the
      // job; the closing reason, shared by every operation, says nothing of that.
      if (closedAfterUpload && err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED')
        throw new TransportError(
          'ERR_CLIENT_CLOSED',
          'batch.submit: the client was closed while the answer to a complete upload was awaited; the job may exist',
          { operation: 'batch.submit', ambiguous: true, cause: err },
        );
      throw err;
    } finally {
      closing?.removeEventListener('abort', onClose);
    }
  }

  /** V2 lookup (recommended). Result fields exist only when `status` is `done`. */
  async get(jobId: string, options: GetOptions = {}): Promise<JobV2> {
    checkJobId(jobId);
    const envelope = await this.#read<JobV2Envelope>(
      'batch.get',
      jobId,
      batchJobPath(jobId),
      {},
      options,
      validateJobV2,
      (e) => e.data.status,
    );
    return envelope.data;
  }

  /** V1 legacy lookup (the shape the 0.18 client libraries use). */
  getLegacy(jobId: string, options: GetLegacyOptions = {}): Promise<JobV1> {
    checkJobId(jobId);
    return this.#read<JobV1>(
      'batch.getLegacy',
      jobId,
      batchJobLegacyPath(jobId, options.lang || 'en'),
      { diarization_force_align: flag(options.diarizationForceAlign) },
      options,
      validateJobV1,
      (j) => j.status,
    );
  }

  /**
   * Poll the V2 lookup until `done`, `failed` or `cleared`, one poll at a time, pausing with
   * exponential backoff and jitter. Returns the terminal job (result fields only when done).
   */
  async wait(jobId: string, options: WaitOptions = {}): Promise<JobV2> {
    // NaN would arm no deadline and pause for NaN (1 ms) between polls: checked, not assumed.
    if (options.timeoutMs !== undefined && !(typeof options.timeoutMs === 'number' && options.timeoutMs >= 0))
      throw new InvalidArgumentError(
        `batch.wait: timeoutMs must be a number >= 0, got ${String(options.timeoutMs)}`,
      );
    const started = performance.now(); // monotonic: a clock step must not end or stretch the wait
    const timeoutMs = options.timeoutMs ?? this.#deps.deadlines?.batchWait ?? DEFAULT_DEADLINES.batchWait;
    const factor = options.factor ?? 1.5;
    const maxInterval = options.maxIntervalMs ?? 15_000;
    let interval = options.initialIntervalMs ?? 1_000;
    let last: JobStatus | undefined;
    while (true) {
      // The deadline bounds a poll in flight too (with its retries), not only the pauses. A
      // deadline beyond a timer's range (about 24.8 days) is not armed for this poll: a timer
      // given more fires at once, and one over 2^32 - 1 ms throws; a poll ends long before it,
      // and the next is checked again.
      const left = started + timeoutMs - performance.now();
      if (left <= 0) throw new BatchWaitTimeoutError(jobId, last, timeoutMs);
      const deadline = new AbortController();
      const timer = left <= MAX_TIMER_MS ? setTimeout(() => deadline.abort(), Math.ceil(left)) : undefined;
      let job: JobV2;
      try {
        job = await this.get(jobId, {
          saveResult: options.saveResult ?? true,
          signal: anySignal(options.signal, deadline.signal),
          // What is left of the wait, not a read's own deadline: a 429 whose Retry-After is
          // longer than a read may take is waited out while the wait allows it.
          deadlineMs: left,
        });
      } catch (err) {
        if (deadline.signal.aborted && !options.signal?.aborted)
          throw new BatchWaitTimeoutError(jobId, last, timeoutMs);
        // Its deadline is the wait's: a Retry-After past it, or the retries reaching it.
        if (err instanceof DeadlineExceededError && !options.signal?.aborted)
          throw new BatchWaitTimeoutError(jobId, last, timeoutMs, err);
        throw err;
      } finally {
        clearTimeout(timer);
      }
      last = job.status;
      options.onStatus?.(job);
      if (isTerminalStatus(job.status)) return job;
      // Jitter: between half and all of the interval.
      const remaining = started + timeoutMs - performance.now();
      if (remaining <= 0) throw new BatchWaitTimeoutError(jobId, last, timeoutMs);
      const pause = Math.min(interval * (0.5 + Math.random() * 0.5), remaining);
      await sleep(pause, anySignal(options.signal, this.#deps.policy.closed));
      interval = Math.min(maxInterval, interval * factor);
    }
  }

  /**
   * Submit and wait. The terminal job is returned; check `status` (`done` carries the result).
   * `onSubmitted` gets the job id as soon as the job exists: a wait that then fails (an abort,
   * the connection lost past its retries) leaves the job running at the service, its result
   * kept, and this is how to find it again (`wait(jobId)`). Timeouts and lost results carry it
   * too (`BatchWaitTimeoutError.jobId`, `BatchResultLostError.jobId`).
   */
  async transcribe(
    input: UploadInput,
    options: BatchSubmitOptions &
      Omit<WaitOptions, 'signal'> & { onSubmitted?: (jobId: string) => void } = {},
  ): Promise<JobV2 & { jobId: string }> {
    const ack = await this.submit(input, options);
    options.onSubmitted?.(ack.jobId);
    const job = await this.wait(ack.jobId, { ...options, saveResult: options.saveResult ?? true });
    return Object.assign(job, { jobId: ack.jobId });
  }

  /**
   * GET with retries on retryable statuses and connection failures. A read without
   * `save_result` is not idempotent once the job may be terminal: it clears a done or failed
   * job's result. So after a failure that may have come after the service read the job
   * (anything but a refused connection or a 429), the retries read with save_result=true and,
   * when they find the result, one more read without it clears it as the caller asked. If they
   * find `cleared`, the lost response may have held the result: `BatchResultLostError`.
   */
  async #read<T>(
    operation: 'batch.get' | 'batch.getLegacy',
    jobId: string,
    path: string,
    query: Record<string, string | undefined>,
    options: GetOptions,
    validate: (
      v: unknown,
    ) => ReturnType<typeof validateJobV1> | ReturnType<typeof validateJobV2> | { ok: boolean },
    statusOf: (value: T) => JobStatus,
  ): Promise<T> {
    const { http } = this.#deps;
    const { saveResult } = options;
    let lost: unknown;
    return this.#deps.policy.run({
      operation,
      signal: options.signal,
      deadline: options.deadlineMs ?? this.#deps.deadlines?.batchGet ?? DEFAULT_DEADLINES.batchGet,
      effectful: false,
      // Reads are not admission-queued: they wait out their own 429s.
      retryable: (err) => isRetryableFailure(err, { include429: true }),
      onRetry: (err) => {
        if (saveResult !== true && lost === undefined && mayHaveBeenRead(err)) lost = err;
      },
      run: async ({ signal }) => {
        const res = await http.send({
          operation,
          method: 'GET',
          path,
          query: { ...query, save_result: lost === undefined ? flag(saveResult) : 'true' },
          signal,
          headers: { accept: 'application/json' },
        });
        if (res.status !== 200) throw await http.errorOf(res, operation);
        const value = (await parseBody(
          res,
          operation,
          operation === 'batch.get' ? 'V2 job envelope' : 'V1 job',
          validate as never,
          signal,
        )) as T;
        if (lost !== undefined) {
          const status = statusOf(value);
          if (status === 'cleared') throw new BatchResultLostError(jobId, lost);
          if (status === 'done' || status === 'failed') await this.#clear(operation, path, query, signal);
        }
        return value;
      },
    });
  }

  /**
   * The clearing read after a recovered one. Best effort: the caller holds the result, and if
   * this read fails the result merely stays stored, as with save_result.
   */
  async #clear(
    operation: 'batch.get' | 'batch.getLegacy',
    path: string,
    query: Record<string, string | undefined>,
    signal: AbortSignal,
  ): Promise<void> {
    const { http } = this.#deps;
    try {
      const res = await http.send({ operation, method: 'GET', path, query, signal });
      if (res.status === 200) discard(res);
      else await http.errorOf(res, operation);
    } catch {
      // See above: nothing is lost.
    }
  }
}

/** Whether a failed read may have been performed by the service (and so cleared a result). */
function mayHaveBeenRead(err: unknown): boolean {
  if (err instanceof TransportError) return err.code !== 'ERR_CONNECT';
  return !(err instanceof SpeechServiceError && err.status === 429);
}

function checkJobId(jobId: string): void {
  if (!isUuid(jobId)) {
    throw localServiceError(
      'VALIDATION_INVALID_UUID',
      `job id ${JSON.stringify(String(jobId).slice(0, 64))} is not a UUID`,
    );
  }
}

async function parseBody<T>(
  res: HttpResponse,
  operation: 'batch.submit' | 'batch.get' | 'batch.getLegacy',
  kind: string,
  validate: (
    v: unknown,
  ) => { ok: true; value: T } | { ok: false; issues: { path: string; message: string }[] },
  signal: AbortSignal | undefined,
): Promise<T> {
  const text = await readBody(res, operation, 64 * 1024 * 1024, signal);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ProtocolError('ERR_INVALID_RECORD', `${kind} is not JSON`, { cause: err });
  }
  return unwrap(kind, validate(value));
}
