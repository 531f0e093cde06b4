// The client's HTTP transport: one keep-alive undici Agent per client, explicit timeouts,
// the key in a header only, every response body consumed or destroyed, and network failures
// mapped to `TransportError`s that say whether the request may have taken effect.

import type { Readable } from 'node:stream';
import { Agent, type Dispatcher, request } from 'undici';
import type { ServiceConfig } from '../protocol/config.ts';
import { errorFromResponse, type SpeechServiceError, TransportError } from '../protocol/errors.ts';
import type { OperationName } from '../protocol/operations.ts';

/** The HTTP transport's timeouts, in milliseconds (`ClientOptions.timeouts`). */
export interface HttpTimeouts {
  /** TCP/TLS connect. Default 10 s. */
  connectMs: number;
  /** Wait for response headers after the request was sent. Default 60 s. */
  headersMs: number;
  /**
   * Wait for response headers after an upload (batch submit, fast transcription): the service
   * decodes and validates the whole recording first. Default 300 s.
   */
  uploadHeadersMs: number;
  /** Longest silence between two chunks of a response body. Default 120 s. */
  bodyIdleMs: number;
}

/**
 * The HTTP timeouts used where `ClientOptions.timeouts` gives none: connect 10 s, headers 60 s,
 * upload headers 300 s, body idle 120 s.
 */
export const DEFAULT_TIMEOUTS: Readonly<HttpTimeouts> = Object.freeze({
  connectMs: 10_000,
  headersMs: 60_000,
  uploadHeadersMs: 300_000,
  bodyIdleMs: 120_000,
});

export interface HttpRequest {
  operation: OperationName;
  method: 'GET' | 'POST';
  /** Path under the service address, starting with `/`. */
  path: string;
  query?: Record<string, string | undefined>;
  headers?: Record<string, string>;
  body?: Buffer | Readable | null;
  signal?: AbortSignal | undefined;
  headersTimeoutMs?: number;
  bodyTimeoutMs?: number;
}

export interface HttpResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Dispatcher.ResponseData['body'];
}

const NOT_SENT = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);
const TIMEOUTS = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);
const CLOSED = new Set(['UND_ERR_CLOSED', 'UND_ERR_DESTROYED']);

/**
 * Map an undici or socket failure. `mayHaveTakenEffect` says whether the service may have
 * acted on the request (the whole body was handed to the socket); connect failures never have.
 */
export function transportError(
  err: unknown,
  operation: OperationName,
  mayHaveTakenEffect: boolean,
): TransportError {
  const code = (err as { code?: string }).code ?? '';
  const cause = (err as { cause?: { code?: string } }).cause;
  const anyCode = code || cause?.code || '';
  if (NOT_SENT.has(anyCode)) {
    return new TransportError('ERR_CONNECT', `${operation}: cannot connect to the service (${anyCode})`, {
      operation,
      ambiguous: false,
      cause: err,
    });
  }
  if (CLOSED.has(anyCode)) {
    return new TransportError('ERR_CLIENT_CLOSED', `${operation}: the client is closed`, {
      operation,
      cause: err,
    });
  }
  if (TIMEOUTS.has(anyCode)) {
    return new TransportError('ERR_TIMEOUT', `${operation}: timed out (${anyCode})`, {
      operation,
      ambiguous: mayHaveTakenEffect,
      cause: err,
    });
  }
  return new TransportError(
    'ERR_CONNECTION_RESET',
    `${operation}: connection lost (${anyCode || (err as Error).message})`,
    {
      operation,
      ambiguous: mayHaveTakenEffect,
      cause: err,
    },
  );
}

const ignore = () => {};

/**
 * Drop the raw response bytes undici keeps on a parser error (`HTTPParserError.data`, the bytes
 * from the point it refused): they are whatever a broken or hostile server sent, the key it
 * echoed included, and `util.inspect` of our error printed them with its cause.
 */
function withoutResponseBytes(err: unknown): void {
  for (let e = err, depth = 0; typeof e === 'object' && e !== null && depth < 4; depth++) {
    const data = (e as { data?: unknown }).data;
    if (typeof data === 'string' || data instanceof Uint8Array) {
      (e as { data?: unknown }).data = `[${data.length} bytes of the response withheld]`;
    }
    e = (e as { cause?: unknown }).cause;
  }
}

export class HttpTransport {
  readonly #config: ServiceConfig;
  readonly #agent: Dispatcher;
  readonly #ownsAgent: boolean;
  readonly timeouts: HttpTimeouts;
  readonly #userAgent: string;

  constructor(
    config: ServiceConfig,
    options: { timeouts?: Partial<HttpTimeouts>; dispatcher?: Dispatcher; userAgent?: string } = {},
  ) {
    this.#config = config;
    this.timeouts = { ...DEFAULT_TIMEOUTS, ...options.timeouts };
    this.#ownsAgent = options.dispatcher === undefined;
    this.#agent =
      options.dispatcher ??
      new Agent({
        connect: { timeout: this.timeouts.connectMs },
        keepAliveTimeout: 4_000,
        headersTimeout: this.timeouts.headersMs,
        bodyTimeout: this.timeouts.bodyIdleMs,
      });
    this.#userAgent = options.userAgent ?? 'speechpipe';
  }

  get secrets(): string[] {
    return [this.#config.apiKey.reveal()];
  }

  url(path: string, query?: Record<string, string | undefined>): string {
    const url = new URL(this.#config.apiUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, v);
    return url.href;
  }

  /**
   * Send a request. Network failures become `TransportError`s; for a Readable body the error is
   * ambiguous only if the whole body was consumed (a cut upload cannot have taken effect).
   */
  async send(req: HttpRequest): Promise<HttpResponse> {
    if (req.signal?.aborted) {
      // The body is never read: an input stream opened for it would hold its file open.
      if (req.body && !Buffer.isBuffer(req.body)) req.body.destroy();
      throw req.signal.reason;
    }
    let bodyConsumed = req.body === undefined || req.body === null || Buffer.isBuffer(req.body);
    if (req.body && !Buffer.isBuffer(req.body)) {
      req.body.once('end', () => (bodyConsumed = true));
      // A body that fails before undici reads it (its input could not be opened) must not be
      // an uncaught 'error': the request fails with it, and the caller says why.
      req.body.on('error', ignore);
    }
    try {
      const res = await request(this.url(req.path, req.query), {
        dispatcher: this.#agent,
        method: req.method,
        headers: {
          'x-api-key': this.#config.apiKey.reveal(),
          'user-agent': this.#userAgent,
          ...req.headers,
        },
        body: req.body ?? null,
        signal: req.signal,
        headersTimeout: req.headersTimeoutMs ?? this.timeouts.headersMs,
        bodyTimeout: req.bodyTimeoutMs ?? this.timeouts.bodyIdleMs,
      });
      // Before any reader of the body sees its error (listeners run in order of registration).
      res.body.on('error', withoutResponseBytes);
      return { status: res.statusCode, headers: res.headers, body: res.body };
    } catch (err) {
      withoutResponseBytes(err);
      if (req.body && !Buffer.isBuffer(req.body)) req.body.destroy();
      if (req.signal?.aborted) throw req.signal.reason;
      throw transportError(err, req.operation, req.method !== 'GET' && bodyConsumed);
    }
  }

  /** Read an error response into a `SpeechServiceError` (body bounded, key redacted). */
  async errorOf(res: HttpResponse, operation: OperationName): Promise<SpeechServiceError> {
    const text = await readText(res, 64 * 1024).catch(() => '');
    return errorFromResponse({
      status: res.status,
      headers: res.headers,
      body: text,
      operation,
      secrets: this.secrets,
    });
  }

  async close(): Promise<void> {
    if (this.#ownsAgent) await this.#agent.destroy();
  }
}

/** Read a response body as text, at most `maxBytes` (the rest is discarded). */
export async function readText(res: HttpResponse, maxBytes = 1024 * 1024): Promise<string> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of res.body) {
    const b = chunk as Buffer;
    if (total + b.length > maxBytes) {
      chunks.push(b.subarray(0, maxBytes - total));
      total = maxBytes;
      res.body.destroy();
      break;
    }
    chunks.push(b);
    total += b.length;
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Read a successful response's body as text. The request reached the service, so a failure
 * while reading (reset, body timeout) is a `TransportError` that may have taken effect; an
 * abort rethrows the signal's reason.
 */
export async function readBody(
  res: HttpResponse,
  operation: OperationName,
  maxBytes: number,
  signal?: AbortSignal,
): Promise<string> {
  try {
    return await readText(res, maxBytes);
  } catch (err) {
    res.body.destroy();
    if (signal?.aborted) throw signal.reason;
    throw transportError(err, operation, true);
  }
}

/** Read a JSON response body; a body that is not JSON is a `TransportError`-free ProtocolError upstream. */
export async function readJson(res: HttpResponse, maxBytes = 16 * 1024 * 1024): Promise<unknown> {
  const text = await readText(res, maxBytes);
  return JSON.parse(text);
}

/**
 * What a decoder core (NDJSON, TTS frames) appended to `out` in `step`, then its error if it
 * threw: values decoded before a bad line or frame are delivered, whatever the split of the
 * body into chunks (see src/transforms/core-transform.ts).
 */
export function* decoded<T>(step: (out: T[]) => unknown): Generator<T, void, undefined> {
  const out: T[] = [];
  let failure: { error: unknown } | undefined;
  try {
    step(out);
  } catch (error) {
    failure = { error };
  }
  yield* out;
  if (failure) throw failure.error;
}

/** Discard a body we do not need, releasing the connection. */
export function discard(res: HttpResponse): void {
  res.body.dump().catch(() => {});
}
