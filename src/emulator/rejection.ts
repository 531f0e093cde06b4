// Error answers of the emulator: a `Rejection` carries status, code, data and headers, and
// renders the interface's error body (HTTP) or the Socket.IO error payload.

import { randomUUID } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import { ERROR_CODES, isServiceErrorCode, unitOfBound } from '../protocol/error-codes.ts';
import type { CapacityData, ErrorBody, LimitData } from '../protocol/errors.ts';
import type { SocketErrorPayload } from '../protocol/socket-events.ts';

export interface RejectionInit {
  status?: number;
  detail: string;
  data?: LimitData | CapacityData;
  jobId?: string;
  /** The missing-key 401 alone carries `message`. */
  message?: string;
  retryAfterSec?: number | string;
  /** The batch 429 body has no `request_id`. */
  omitRequestId?: boolean;
  /** A body sent verbatim (an intermediary's page) instead of the error body. */
  rawBody?: string;
  contentType?: string;
  headers?: Record<string, string>;
}

/** An error answer: thrown by checks, rendered by the transport. */
export class Rejection extends Error {
  override name = 'Rejection';
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly init: RejectionInit;

  constructor(code: string, init: RejectionInit) {
    super(`${code}: ${init.detail}`);
    this.code = code;
    this.detail = init.detail;
    this.status = init.status ?? (isServiceErrorCode(code) ? ERROR_CODES[code].status : undefined) ?? 500;
    this.init = init;
  }

  get retryable(): boolean {
    if (isServiceErrorCode(this.code)) return ERROR_CODES[this.code].retryable;
    return this.status === 429 || this.status >= 500;
  }

  /** The error body; `requestId` fills `request_id`, `clientId` a `job_id` the rejection lacks. */
  body(requestId: string, clientId?: string): ErrorBody {
    const body: ErrorBody = {
      error: legacyError(this.status),
      code: this.code,
      detail: this.detail,
      retryable: this.retryable,
      timestamp: new Date().toISOString(),
    };
    if (this.init.message !== undefined) body.message = this.init.message;
    const jobId = this.init.jobId ?? clientId;
    if (jobId !== undefined) body.job_id = jobId;
    if (!this.init.omitRequestId) body.request_id = requestId;
    if (this.init.data !== undefined) body.data = this.init.data;
    return body;
  }

  /**
   * The Socket.IO error payload: the body, and `retry_after` in seconds where HTTP would send
   * `Retry-After` (an HTTP date counts the seconds until it, none if it has passed).
   */
  socketBody(requestId: string): SocketErrorPayload {
    const body: SocketErrorPayload = this.body(requestId);
    const after = this.init.retryAfterSec;
    if (typeof after === 'number') body.retry_after = after;
    else if (after !== undefined) {
      const at = Date.parse(after);
      if (Number.isFinite(at)) body.retry_after = Math.max(0, Math.ceil((at - Date.now()) / 1000));
    }
    return body;
  }

  headers(): Record<string, string> {
    const out: Record<string, string> = { ...this.init.headers };
    if (this.init.retryAfterSec !== undefined) out['retry-after'] = String(this.init.retryAfterSec);
    return out;
  }
}

/** The frozen legacy `error` identifier: the status's reason phrase. Clients never branch on it. */
function legacyError(status: number): string {
  return STATUS_CODES[status] ?? 'Error';
}

/** The first 24 characters of a random UUID (through its variant group and the dash after it). */
const REQUEST_ID_HEAD = randomUUID().slice(0, 24);
/** The counter after the head: 12 hex digits, kept as two 24-bit halves (no float arithmetic). */
const HALF_SPAN = 2 ** 24;
let seqHigh = Math.floor(Math.random() * HALF_SPAN);
let seqLow = Math.floor(Math.random() * HALF_SPAN);
let highText = seqHigh.toString(16).padStart(6, '0');
/** A fresh request id: `request_id` of error bodies and the `x-request-id` header. */
export const newRequestId = (): string => {
  // A random head per process (and thread) and a counter: unique, UUID-shaped, and without the
  // entropy refill a random UUID per request costs (every live frame gets an id).
  if (++seqLow === HALF_SPAN) {
    seqLow = 0;
    seqHigh = (seqHigh + 1) % HALF_SPAN;
    highText = seqHigh.toString(16).padStart(6, '0');
  }
  return REQUEST_ID_HEAD + highText + seqLow.toString(16).padStart(6, '0');
};

/** `data` of a limit rejection: `observed` is forced above `limit`, durations rounded up. */
export function limitData(bound: string, limit: number, observed: number): LimitData {
  const unit = unitOfBound(bound) ?? 'units';
  const rounded = unit === 'seconds' ? Math.ceil(observed) : Math.round(observed);
  return { limit, observed: rounded > limit ? rounded : Math.floor(limit) + 1, unit, bound };
}

export function reject(code: string, detail: string, init: Omit<RejectionInit, 'detail'> = {}): Rejection {
  return new Rejection(code, { ...init, detail });
}

/** 413 for a byte count over `limit` (interface, Errors rule 2). */
export function tooLarge(bound: string, limit: number, observed: number, what: string): Rejection {
  return reject('PAYLOAD_TOO_LARGE', `${what} exceeds ${limit} bytes`, {
    data: limitData(bound, limit, observed),
  });
}

/** 422 for decoded audio over a duration limit (`observed` whole seconds rounded up). */
export function tooLong(bound: string, limitSec: number, observedSec: number, what: string): Rejection {
  return reject('AUDIO_DURATION_EXCEEDED', `${what} exceeds ${limitSec} s`, {
    data: limitData(bound, limitSec, observedSec),
  });
}
