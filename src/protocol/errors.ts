// Typed errors of speechpipe: one class for what the service (or an intermediary) answers,
// and small classes for what goes wrong on the wire. Every error carries a stable `code`.

import { ERROR_CODES, isServiceErrorCode } from './error-codes.ts';

/** Options common to every `SpeechpipeError`. */
export interface SpeechpipeErrorOptions {
  /** The underlying error, passed on as the standard `Error.cause`. */
  cause?: unknown;
}

/** Base class: every error speechpipe raises has a stable `code` string. */
export class SpeechpipeError extends Error {
  override name = 'SpeechpipeError';
  readonly code: string;

  constructor(code: string, message: string, options?: SpeechpipeErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
  }
}

/** `data` of a limit rejection (interface, Error body): the limit, the value that broke it, its unit and which bound. */
export interface LimitData {
  /** The limit, in `unit`. */
  limit: number;
  /** The value seen, in `unit`; greater than `limit` (durations rounded up). */
  observed: number;
  /** Unit of `limit` and `observed`, such as `bytes` or `seconds` (see `LIMIT_BOUNDS`). */
  unit: string;
  /** Which limit was broken (see `LimitBound`). */
  bound: string;
}

/** `data` of the batch 429 `RATE_LIMIT_EXCEEDED` body. */
export interface CapacityData {
  /** The capacity figure the service reports; the interface gives no unit. */
  capacity: number;
}

/** Where an error body came from. */
export type ErrorOrigin =
  /** a JSON error body of the service */
  | 'service'
  /** a non-service body, such as a proxy's HTML 403 or 502 page */
  | 'intermediary'
  /** raised by speechpipe before sending, with the status and code the service would give */
  | 'local';

/** Fields of a new `SpeechServiceError`; `secrets` are redacted from every string field and the message. */
export interface SpeechServiceErrorInit {
  /** HTTP status (or the one the service would give). */
  status: number;
  /** The service's error code, or `HTTP_<status>` for a body without one. */
  code: string;
  /** Whether the same request may be retried. */
  retryable: boolean;
  /** Wait before retrying, in ms; clamped to 0..`MAX_RETRY_AFTER_MS`, NaN dropped. */
  retryAfterMs?: number | undefined;
  /** Human-readable detail of the body; never branched on. */
  detail?: string | undefined;
  /** Trace id: the body's `request_id` or the `x-request-id` header. */
  requestId?: string | undefined;
  /** The body's `job_id`. */
  jobId?: string | undefined;
  /** The body's `data`: limit or capacity data, or any other object. */
  data?: LimitData | CapacityData | Record<string, unknown> | undefined;
  /** The body's `timestamp`. */
  timestamp?: string | undefined;
  /** Where the error came from; default `service`. */
  origin?: ErrorOrigin;
  /** The operation that failed (an `OperationName`), prefixed to the message. */
  operation?: string | undefined;
  /** The request may have taken effect (batch submission after a 5xx, timeout or lost connection). */
  ambiguous?: boolean;
  /** Strings that must never appear in the error (the API key). */
  secrets?: readonly string[];
  /** The underlying error, passed on as `Error.cause`. */
  cause?: unknown;
}

/**
 * An error answer of the service. Branch on `status`, then on `code` and `retryable`;
 * never on the message text.
 */
export class SpeechServiceError extends SpeechpipeError {
  override name = 'SpeechServiceError';
  readonly status: number;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly detail: string | undefined;
  readonly requestId: string | undefined;
  readonly jobId: string | undefined;
  readonly data: LimitData | CapacityData | Record<string, unknown> | undefined;
  readonly timestamp: string | undefined;
  readonly origin: ErrorOrigin;
  readonly operation: string | undefined;
  ambiguous: boolean;

  constructor(init: SpeechServiceErrorInit) {
    const secrets = init.secrets ?? [];
    const detail = init.detail === undefined ? undefined : redactSecrets(init.detail, secrets);
    const where = init.operation ? `${init.operation}: ` : '';
    const tail = init.requestId ? ` (request ${init.requestId})` : '';
    super(
      // The body's `code` is as much the service's text as `detail`: one echoing the key must
      // not carry it out (no catalog code holds it, so nothing that is branched on changes).
      redactSecrets(init.code, secrets),
      redactSecrets(`${where}${init.status} ${init.code}${detail ? `: ${detail}` : ''}${tail}`, secrets),
      { cause: init.cause },
    );
    this.status = init.status;
    this.retryable = init.retryable;
    // Capped here, whatever the source (header, Socket.IO body, caller): a wait past 2^31-1 ms
    // would make setTimeout fire at once, turning a long Retry-After into a retry storm.
    const after = init.retryAfterMs;
    this.retryAfterMs =
      after === undefined || Number.isNaN(after)
        ? undefined
        : Math.min(MAX_RETRY_AFTER_MS, Math.max(0, after));
    this.detail = detail;
    // Bodies echo client-supplied values (`job_id`, `data`): none may carry the key out.
    this.requestId = init.requestId === undefined ? undefined : redactSecrets(init.requestId, secrets);
    this.jobId = init.jobId === undefined ? undefined : redactSecrets(init.jobId, secrets);
    this.data = secrets.length === 0 ? init.data : (redactDeep(init.data, secrets) as typeof init.data);
    this.timestamp = init.timestamp === undefined ? undefined : redactSecrets(init.timestamp, secrets);
    this.origin = init.origin ?? 'service';
    this.operation = init.operation;
    this.ambiguous = init.ambiguous ?? false;
  }

  /** The limit rejection data (`limit`, `observed`, `unit`, `bound`), when the body carried it. */
  get limit(): LimitData | undefined {
    const d = this.data as Partial<LimitData> | undefined;
    return d && typeof d.bound === 'string' && typeof d.limit === 'number' ? (d as LimitData) : undefined;
  }

  /** The error's fields as a plain object for logs and `JSON.stringify` (no `cause`, no `timestamp`). */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      message: this.message,
      status: this.status,
      code: this.code,
      retryable: this.retryable,
      retryAfterMs: this.retryAfterMs,
      detail: this.detail,
      requestId: this.requestId,
      jobId: this.jobId,
      data: this.data,
      origin: this.origin,
      operation: this.operation,
      ambiguous: this.ambiguous,
    };
  }
}

/**
 * A live stream, fast transcription or TTS body ended without its final signal
 * (`is_final: true` record, or the final TTS frame). Never a success.
 */
export class IncompleteStreamError extends SpeechpipeError {
  override name = 'IncompleteStreamError';
  readonly operation: string | undefined;
  readonly id: string | undefined;
  /** Records or frames received before the end. */
  readonly received: number;
  readonly retryable = true;

  constructor(
    message: string,
    options: { operation?: string; id?: string; received?: number; cause?: unknown } = {},
  ) {
    super('ERR_INCOMPLETE_STREAM', message, options);
    this.operation = options.operation;
    this.id = options.id;
    this.received = options.received ?? 0;
  }
}

/** Codes of `ProtocolError`: malformed NDJSON, TTS frames, records or WAV headers. */
export type ProtocolErrorCode =
  | 'ERR_NDJSON_LINE_TOO_LONG'
  | 'ERR_NDJSON_INVALID_JSON'
  | 'ERR_NDJSON_TRUNCATED'
  | 'ERR_NDJSON_NULL'
  | 'ERR_TTS_FRAME'
  | 'ERR_INVALID_RECORD'
  | 'ERR_WAV_FORMAT';

/** One problem found by a record validator. */
export interface ValidationIssue {
  /** JSONPath-like location, `$` is the whole value. */
  path: string;
  /** What is wrong, such as `is required` or `expected a string, got null`. */
  message: string;
}

/** The peer sent bytes or records that break the wire format. */
export class ProtocolError extends SpeechpipeError {
  override name = 'ProtocolError';
  declare readonly code: ProtocolErrorCode;
  /** 1-based line number, for NDJSON. */
  readonly line: number | undefined;
  /** Byte offset in the input, where known. */
  readonly offset: number | undefined;
  readonly issues: readonly ValidationIssue[];

  constructor(
    code: ProtocolErrorCode,
    message: string,
    options: { line?: number; offset?: number; issues?: readonly ValidationIssue[]; cause?: unknown } = {},
  ) {
    super(code, message, options);
    this.line = options.line;
    this.offset = options.offset;
    this.issues = options.issues ?? [];
  }
}

/**
 * Codes of `TransportError`: retryable by default, except `ERR_CLIENT_CLOSED` (the caller closed
 * the client) and `ERR_DEADLINE_EXCEEDED` (the caller's own bound, see `DeadlineExceededError`).
 */
export type TransportErrorCode =
  | 'ERR_CONNECT'
  | 'ERR_TIMEOUT'
  | 'ERR_CONNECTION_RESET'
  | 'ERR_SOCKET_DISCONNECTED'
  | 'ERR_CLIENT_CLOSED'
  | 'ERR_DEADLINE_EXCEEDED';

/** The network failed: connect, timeout, reset. `ambiguous` when the request may have taken effect. */
export class TransportError extends SpeechpipeError {
  override name = 'TransportError';
  declare readonly code: TransportErrorCode;
  readonly retryable: boolean;
  readonly operation: string | undefined;
  ambiguous: boolean;

  constructor(
    code: TransportErrorCode,
    message: string,
    options: { retryable?: boolean; ambiguous?: boolean; operation?: string; cause?: unknown } = {},
  ) {
    super(code, message, options);
    this.retryable = options.retryable ?? code !== 'ERR_CLIENT_CLOSED';
    this.ambiguous = options.ambiguous ?? false;
    this.operation = options.operation;
  }
}

/**
 * An operation's overall deadline (`deadlineMs`) passed before it succeeded: its attempts, the
 * pauses between them and the waits inside them took that long together. `cause` is the last
 * attempt's failure, when one had failed; `ambiguous` when an attempt was under way at the
 * deadline and may have taken effect. Not retryable: the deadline is the caller's bound.
 */
export class DeadlineExceededError extends TransportError {
  override name = 'DeadlineExceededError';
  /** The deadline that passed, in milliseconds. */
  readonly deadlineMs: number;
  /** Attempts started before it passed (admission refusals included). */
  readonly attempts: number;

  constructor(
    operation: string,
    deadlineMs: number,
    options: { attempts: number; ambiguous?: boolean; cause?: unknown },
  ) {
    const last = options.cause instanceof Error ? `; last failure: ${options.cause.message}` : '';
    super(
      'ERR_DEADLINE_EXCEEDED',
      `${operation}: not done within its deadline of ${deadlineMs} ms (${options.attempts} attempt${options.attempts === 1 ? '' : 's'}${last})`,
      { operation, retryable: false, ambiguous: options.ambiguous ?? false, cause: options.cause },
    );
    this.deadlineMs = deadlineMs;
    this.attempts = options.attempts;
  }
}

/** Missing or invalid configuration (API URL, key, path). Never contains the key. */
export class ConfigError extends SpeechpipeError {
  override name = 'ConfigError';
  constructor(message: string) {
    super('ERR_CONFIG', message);
  }
}

/** A caller passed an invalid option or argument to a speechpipe function. */
export class InvalidArgumentError extends SpeechpipeError {
  override name = 'InvalidArgumentError';
  constructor(message: string) {
    super('ERR_INVALID_ARGUMENT', message);
  }
}

/**
 * The error the service would give for `code`, raised locally (origin `local`), e.g. by
 * `decodeFrame` or TTS pre-flight. `status` defaults to the catalog's status for the code.
 */
export function localServiceError(
  code: string,
  detail: string,
  options: { status?: number; data?: LimitData; operation?: string } = {},
): SpeechServiceError {
  const info = isServiceErrorCode(code) ? ERROR_CODES[code] : undefined;
  return new SpeechServiceError({
    status: options.status ?? info?.status ?? 400,
    code,
    retryable: info?.retryable ?? false,
    detail,
    data: options.data,
    origin: 'local',
    operation: options.operation,
  });
}

/** What stands in a text for a secret taken out of it. */
export const REDACTED = '[redacted]';

/** A character of a word (letter, digit, mark, `_`): a redaction never stops inside a word. */
const WORD_CHAR = /^[\p{L}\p{N}\p{M}_]$/u;

/** The code point of `text` that starts at UTF-16 index `at`: whether it is a word character, and its length. */
function pointAt(text: string, at: number): { word: boolean; length: number } {
  const point = text.codePointAt(at);
  if (point === undefined) return { word: false, length: 0 };
  return { word: WORD_CHAR.test(String.fromCodePoint(point)), length: point > 0xffff ? 2 : 1 };
}

/** The code point of `text` that ends just before UTF-16 index `at`. */
function pointBefore(text: string, at: number): { word: boolean; length: number } {
  if (at <= 0) return { word: false, length: 0 };
  const low = text.charCodeAt(at - 1);
  const pair = at >= 2 && low >= 0xdc00 && low <= 0xdfff && (text.charCodeAt(at - 2) & 0xfc00) === 0xd800;
  return pointAt(text, pair ? at - 2 : at - 1);
}

/**
 * `text` with every secret taken out, as a token: each occurrence of a secret (as it is, or
 * URL-encoded, or escaped in a JSON string) becomes `[redacted]` together with the rest of any
 * word it runs into, so a redaction never cuts a word in two (no `websoc[redacted]et`), and a
 * secret glued to other letters (`key%3D<secret>`, `\n<secret>`) goes with them. Nothing of a
 * secret is left: every occurrence lies inside what is replaced. A secret that is part of an
 * ordinary word takes that word, which is why `ApiKey` refuses keys too short to be keys.
 */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  const spans: Array<[number, number]> = [];
  for (const secret of secrets) {
    if (!secret) continue;
    for (const form of new Set([secret, encodeURIComponent(secret), JSON.stringify(secret).slice(1, -1)]))
      for (let at = text.indexOf(form); at !== -1; at = text.indexOf(form, at + 1))
        spans.push([at, at + form.length]);
  }
  if (spans.length === 0) return text;
  spans.sort((a, b) => a[0] - b[0]);
  let out = '';
  let kept = 0;
  let i = 0;
  while (i < spans.length) {
    let [start, end] = spans[i]!;
    // Together with what overlaps or touches it, then out to the ends of the words it cuts.
    for (;;) {
      while (pointAt(text, start).word && pointBefore(text, start).word)
        start -= pointBefore(text, start).length;
      while (pointBefore(text, end).word && pointAt(text, end).word) end += pointAt(text, end).length;
      if (i + 1 < spans.length && spans[i + 1]![0] <= end) end = Math.max(end, spans[++i]![1]);
      else break;
    }
    out += text.slice(kept, start) + REDACTED;
    kept = end;
    i++;
  }
  return out + text.slice(kept);
}

/** A copy of `value` with every string in it (object keys too) redacted. */
function redactDeep(value: unknown, secrets: readonly string[], seen = new WeakSet<object>()): unknown {
  if (typeof value === 'string') return redactSecrets(value, secrets);
  if (typeof value !== 'object' || value === null) return value;
  if (seen.has(value)) return '[circular]';
  seen.add(value);
  let out: unknown;
  if (Array.isArray(value)) out = value.map((v) => redactDeep(v, secrets, seen));
  else {
    const copy: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value))
      copy[redactSecrets(k, secrets)] = redactDeep(v, secrets, seen);
    out = copy;
  }
  seen.delete(value);
  return out;
}

/** Response headers as `getHeader` reads them: a WHATWG `Headers`-like object, a Node header record, or none. */
export type HeaderSource =
  | {
      /** The header's value, or `null` when absent (as WHATWG `Headers.get`). */
      get(name: string): string | null;
    }
  | Record<string, string | string[] | number | undefined>
  | undefined;

/** Read one header from a WHATWG `Headers` or a plain (lower-cased) header record. */
export function getHeader(headers: HeaderSource, name: string): string | undefined {
  if (!headers) return undefined;
  if (typeof (headers as { get?: unknown }).get === 'function') {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | number | undefined>;
  const value = record[name.toLowerCase()] ?? record[name];
  if (value === undefined) return undefined;
  return Array.isArray(value) ? value[0] : String(value);
}

/**
 * Longest `Retry-After` we honour: 1 hour. No wait the interface names comes near it (its
 * longest window is the 900 s idle retirement), so a larger value is a misconfigured or hostile
 * header, and a client should not sleep for days on it.
 */
export const MAX_RETRY_AFTER_MS = 3_600_000;

const MONTH_NAMES = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const MONTH = `(?<month>${MONTH_NAMES.join('|')})`;
const TIME = '(?<hh>\\d{2}):(?<mm>\\d{2}):(?<ss>\\d{2})';
/** The three HTTP-date forms of RFC 9110 5.6.7, matched exactly (case-sensitive, as it says). */
const HTTP_DATES = [
  // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
  new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (?<day>\\d{2}) ${MONTH} (?<year>\\d{4}) ${TIME} GMT$`),
  // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
  new RegExp(
    `^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (?<day>\\d{2})-${MONTH}-(?<year>\\d{2}) ${TIME} GMT$`,
  ),
  // asctime: Sun Nov  6 08:49:37 1994
  new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ${MONTH} (?<day>[ \\d]\\d) ${TIME} (?<year>\\d{4})$`),
];

/**
 * An HTTP-date as epoch milliseconds, always GMT (asctime carries no zone and means GMT too),
 * or `undefined` when `text` is not exactly one of the three forms or names no real time.
 */
function parseHttpDate(text: string, now: number): number | undefined {
  const groups = HTTP_DATES.map((form) => form.exec(text)?.groups).find((g) => g !== undefined);
  if (groups === undefined) return undefined;
  const day = Number(groups.day);
  const [hh, mm, ss] = [Number(groups.hh), Number(groups.mm), Number(groups.ss)];
  let year = Number(groups.year);
  if (groups.year!.length === 2) {
    // RFC 9110: a two-digit year more than 50 years ahead is the most recent past such year.
    const thisYear = new Date(now).getUTCFullYear();
    year += Math.floor(thisYear / 100) * 100;
    if (year > thisYear + 50) year -= 100;
  }
  if (day < 1 || hh > 23 || mm > 59 || ss > 60) return undefined;
  const when = Date.UTC(year, MONTH_NAMES.indexOf(groups.month!), day, hh, mm, ss);
  // Date.UTC rolls 31 Feb over into March: such a date names no real day. (A leap second,
  // :60, is read as the next second.)
  if (new Date(when - (ss === 60 ? 1000 : 0)).getUTCDate() !== day) return undefined;
  return when;
}

/**
 * `Retry-After` as milliseconds (RFC 9110 10.2.3): delay-seconds (digits only; a decimal
 * fraction is also read, as the emulator's fault rules can send one) or an HTTP-date in one of
 * its three exact forms. `undefined` for a missing or unparseable value; a date in the past
 * gives 0; anything longer is clamped to `MAX_RETRY_AFTER_MS`.
 */
export function parseRetryAfter(
  value: string | undefined | null,
  now: number = Date.now(),
): number | undefined {
  if (value === undefined || value === null) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(text)) return Math.min(MAX_RETRY_AFTER_MS, Math.round(Number(text) * 1000));
  const when = parseHttpDate(text, now);
  if (when === undefined) return undefined;
  return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, when - now));
}

/** A non-2xx HTTP response, as `errorFromResponse` takes it. */
export interface ResponseErrorInput {
  /** HTTP status of the response. */
  status: number;
  /** Response headers; `retry-after` and `x-request-id` are read. */
  headers?: HeaderSource;
  /** The response body as received; it may be JSON, HTML or empty. */
  body?: string | Uint8Array | null;
  /** The operation that failed (an `OperationName`). */
  operation?: string;
  /** Strings that must never appear in the error (the API key). */
  secrets?: readonly string[];
  /** Current time in epoch ms, for an HTTP-date `Retry-After`; default `Date.now()`. */
  now?: number;
}

const MAX_DETAIL_CHARS = 300;

/**
 * Build the typed error for a non-2xx response. Works on service error bodies, the batch 429
 * shape, the missing-key 401 and non-JSON bodies of intermediaries. Decides from `status`,
 * `code` and `retryable` only; `error` and `message` are never used to decide anything.
 */
export function errorFromResponse(input: ResponseErrorInput): SpeechServiceError {
  const { status } = input;
  const text = bodyText(input.body);
  const body = parseJsonObject(text);
  const code = status === 401 ? 'AUTH_UNAUTHORIZED' : `HTTP_${status}`;
  const retryAfterMs = parseRetryAfter(getHeader(input.headers, 'retry-after'), input.now);
  const requestId = getHeader(input.headers, 'x-request-id');
  // A service error body is told by the fields clients decide on (`code`, `retryable`), never by
  // `error` or `message`: a proxy's JSON page can carry those too.
  if (body !== undefined && (typeof body.code === 'string' || typeof body.retryable === 'boolean')) {
    return errorFromErrorBody(body, {
      status,
      defaultCode: code,
      retryAfterMs,
      requestId,
      operation: input.operation,
      secrets: input.secrets,
    });
  }
  let detail: string | undefined;
  // `message` appears only on the missing-key 401; shown for humans, never branched on.
  if (body !== undefined)
    detail =
      stringOrUndefined(body.detail) ??
      stringOrUndefined(body.message) ??
      `response body: ${summarize(text)}`;
  else if (text) detail = `non-JSON response body: ${summarize(text)}`;
  return new SpeechServiceError({
    status,
    code,
    retryable: defaultRetryable(code, status),
    retryAfterMs,
    detail,
    requestId,
    origin: 'intermediary',
    operation: input.operation,
    secrets: input.secrets,
  });
}

/** What `errorFromErrorBody` knows about an error body beyond the body itself. */
export interface ErrorBodyContext {
  /**
   * The answer's HTTP status. Without one (Socket.IO), the body's `status`, else the code's:
   * the catalog's, or the one an `HTTP_<status>` code names (a proxy's or fault's), else 0.
   */
  status?: number;
  /** The code when the body has none. */
  defaultCode: string;
  /** The transport's `Retry-After` (HTTP header; Socket.IO body `retry_after` seconds). */
  retryAfterMs?: number | undefined;
  /** When the body has no `request_id` (the `x-request-id` header). */
  requestId?: string | undefined;
  /** The operation that failed (an `OperationName`). */
  operation?: string | undefined;
  /** Strings that must never appear in the error (the API key). */
  secrets?: readonly string[];
}

/**
 * The typed error for a service error body: an HTTP error answer's, or a Socket.IO `error`
 * payload or negative acknowledgement. Decides from `code`, `retryable` and the status only.
 */
export function errorFromErrorBody(
  body: Record<string, unknown>,
  context: ErrorBodyContext,
): SpeechServiceError {
  const code = typeof body.code === 'string' && body.code !== '' ? body.code : context.defaultCode;
  const named = /^HTTP_([1-5]\d\d)$/.exec(code);
  const status =
    context.status ??
    (typeof body.status === 'number'
      ? body.status
      : ((isServiceErrorCode(code) ? ERROR_CODES[code].status : undefined) ??
        (named ? Number(named[1]) : 0)));
  return new SpeechServiceError({
    status,
    code,
    retryable: typeof body.retryable === 'boolean' ? body.retryable : defaultRetryable(code, status),
    retryAfterMs: context.retryAfterMs,
    // `message` appears only on the missing-key 401; shown for humans, never branched on.
    detail: stringOrUndefined(body.detail) ?? stringOrUndefined(body.message),
    requestId: stringOrUndefined(body.request_id) ?? context.requestId,
    jobId: stringOrUndefined(body.job_id),
    data: isPlainObject(body.data) ? (body.data as Record<string, unknown>) : undefined,
    timestamp: stringOrUndefined(body.timestamp),
    origin: 'service',
    operation: context.operation,
    secrets: context.secrets,
  });
}

/** `retryable` when the body does not say: the catalog's for the code, else 429 and 500/502/503/504. */
function defaultRetryable(code: string, status: number): boolean {
  if (isServiceErrorCode(code)) return ERROR_CODES[code].retryable;
  return status === 429 || status === 500 || status === 502 || status === 503 || status === 504;
}

/** The error body the service sends for `code` (used by the emulator and socket error events). */
export interface ErrorBody {
  error: string;
  message?: string;
  code: string;
  detail: string;
  job_id?: string;
  retryable: boolean;
  timestamp: string;
  request_id?: string;
  data?: LimitData | CapacityData;
}

function bodyText(body: string | Uint8Array | null | undefined): string {
  if (body === undefined || body === null) return '';
  if (typeof body === 'string') return body;
  return Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
}

function parseJsonObject(text: string): Record<string, unknown> | undefined {
  const trimmed = text.trim();
  if (!trimmed.startsWith('{')) return undefined;
  try {
    const value: unknown = JSON.parse(trimmed);
    return isPlainObject(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function isPlainObject(value: unknown): boolean {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}

function summarize(text: string): string {
  const plain = text
    .replace(/<(script|style)[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]*>/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return plain.length > MAX_DETAIL_CHARS ? `${plain.slice(0, MAX_DETAIL_CHARS)}…` : plain;
}
