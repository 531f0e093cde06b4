// One HTTP request and its answer: reading a bounded body, error bodies, JSON, NDJSON record
// streams and binary bodies, with the fault plan (slow body, reset after N bytes or records)
// applied to whatever is written, and an abort signal for a client that goes away.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { OperationName } from '../protocol/operations.ts';
import type { Release, RequestAdmission } from './admission.ts';
import type { EmulatorContext } from './context.ts';
import { type FaultPlan, faultAfterValidation, NO_FAULTS, OutputMeter, type OutputUnit } from './faults.ts';
import { newRequestId, type Rejection, reject, tooLarge } from './rejection.ts';

const SLOW_TICK_MS = 50;

export class HttpExchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly ctx: EmulatorContext;
  readonly op: OperationName;
  readonly requestId = newRequestId();
  /** The request's own id (fast `id`, TTS `id`), once known: `job_id` of its error bodies. */
  clientId: string | undefined;
  /** The raw key header (fault rules select on it). */
  readonly keyHeader: string | undefined;
  plan: FaultPlan = NO_FAULTS;
  /** Set once the key is known (before the operation runs). */
  admission: RequestAdmission | undefined;
  /** Why the answer stopped: the client went away before it was complete, or the emulator closed. */
  #stopped: Error | undefined;
  /**
   * Made when `signal` is first asked for, with the listeners that abort it: most live frames
   * are answered at once and never ask, and `gone` needs no listener.
   */
  #abort: AbortController | undefined;
  #cut = false;
  #meter: OutputMeter | undefined;

  #url: URL | undefined;

  constructor(ctx: EmulatorContext, req: IncomingMessage, res: ServerResponse, op: OperationName) {
    this.ctx = ctx;
    this.req = req;
    this.res = res;
    this.op = op;
    const header = req.headers['x-api-key'];
    this.keyHeader = Array.isArray(header) ? header[0] : header;
  }

  /** Aborted when the client goes away before the answer is complete, or the emulator closes. */
  get signal(): AbortSignal {
    if (this.#abort) return this.#abort.signal;
    this.#abort = new AbortController();
    const { res, ctx } = this;
    if (res.closed) {
      // The client went away already (a thread of several peeks at a live frame's first bytes
      // before serving it), or the answer is over: no 'close' is coming to tell us.
      if (!res.writableFinished) this.#stop(CLIENT_GONE);
    } else {
      const onClose = ctx.lifecycle.onClose(() => this.#stop(EMULATOR_CLOSED));
      res.once('close', () => {
        onClose();
        if (!res.writableFinished) this.#stop(CLIENT_GONE);
      });
    }
    if (ctx.lifecycle.closed) this.#stop(EMULATOR_CLOSED);
    return this.#abort.signal;
  }

  #stop(reason: Error): void {
    if (this.#stopped) return;
    this.#stopped = reason;
    this.#abort?.abort(reason);
  }

  /** The request's URL (parsed when first asked for: most operations need only the path). */
  get url(): URL {
    this.#url ??= requestUrl(this.req.url);
    return this.#url;
  }

  /** True once the client went away (or a reset fault cut the connection). */
  get gone(): boolean {
    // A response whose client went away is destroyed (as is one answered and closed).
    return this.#stopped !== undefined || this.#cut || this.res.destroyed || this.ctx.lifecycle.closed;
  }

  /**
   * Admit the request after its own validation (rate, then what `acquire` takes); a status
   * fault at stage `afterValidation` answers here instead.
   */
  admit(acquire?: () => Release): Release {
    if (!this.admission) throw new Error('admit() before the key was authenticated');
    const fault = faultAfterValidation(this.plan);
    if (fault) throw fault;
    return this.admission.admit(acquire);
  }

  /** Whether the answer has begun (headers sent). */
  get started(): boolean {
    return this.res.headersSent;
  }

  /**
   * Read the whole body, at most `limit` bytes: a declared Content-Length over the limit is
   * refused before reading (observed = Content-Length), a longer body when it passes the limit
   * (observed = limit + 1). `head.seen` gets the first `head.bytes` bytes as soon as they have
   * arrived; what it throws is the answer, given while the rest of the body is still arriving.
   */
  readBody(
    limit: number,
    bound: string | undefined,
    what: string,
    head?: { bytes: number; seen: (head: Buffer) => void },
  ): Promise<Buffer> {
    return new Promise<Buffer>((resolve, reject) =>
      this.readBodyThen(limit, bound, what, head, (err, body) => (body ? resolve(body) : reject(err))),
    );
  }

  /**
   * `readBody` with a callback, called once: with the body, or with why there is none (a
   * rejection to answer, or the client gone). Every live frame reads its body so, and is
   * answered in the callback with no promise made: a promise and the async functions awaiting
   * it cost a live frame 8% of its instructions. Called at once when the answer is known at once.
   */
  readBodyThen(
    limit: number,
    bound: string | undefined,
    what: string,
    head: { bytes: number; seen: (head: Buffer) => void } | undefined,
    done: (err: unknown, body?: Buffer) => void,
  ): void {
    const declared = declaredLength(this.req);
    const over = (observed: number) =>
      bound === undefined ? tooLargePlain(limit, observed, what) : tooLarge(bound, limit, observed, what);
    if (declared !== undefined && declared > limit) {
      done(over(declared));
      return;
    }
    const { req, ctx } = this;
    // Destroyed before it ended (its client went away): no 'end' or 'close' is coming.
    if (req.destroyed && !req.readableEnded) {
      done(req.errored ?? PREMATURE_CLOSE);
      return;
    }
    const chunks: Buffer[] = [];
    let total = 0;
    let headSeen = head === undefined;
    let settled = false;
    // Listeners rather than an async iterator (its machinery cost more than the rest of reading
    // a small body), and not taken off once settled: they do nothing then. No 'error' listener:
    // a request whose client went away closes ('close' before 'end'), and without one Node
    // emits no 'error' for it.
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      // Not destroyed when we stop early: paused, then an answer is sent and the rest drained.
      req.pause();
      done(err);
    };
    const onEnd = () => {
      if (settled) return;
      settled = true;
      done(undefined, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total));
    };
    if (req.readableEnded) {
      onEnd();
      return;
    }
    req.on('data', (chunk: Buffer) => {
      if (settled) return;
      total += chunk.length;
      ctx.stats.bytesIn += chunk.length;
      if (total > limit) return fail(over(limit + 1));
      chunks.push(chunk);
      if (!headSeen && head && total >= head.bytes) {
        headSeen = true;
        const joined = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total);
        try {
          head.seen(joined.subarray(0, head.bytes));
        } catch (err) {
          fail(err);
        }
      }
    });
    req.on('end', onEnd);
    req.on('close', () => fail(req.errored ?? PREMATURE_CLOSE));
    // Also a request paused before (a thread of several peeked at its first bytes).
    req.resume();
  }

  /** Answer with an error body (or a fault's raw body). Never after the answer has begun. */
  async reject(rejection: Rejection): Promise<void> {
    this.ctx.stats.rejection(rejection.code);
    this.admission?.answered(rejection.status);
    if (this.started || this.gone) {
      this.cut(); // a failure after output began ends the answer, with no error appended
      return;
    }
    const raw = rejection.init.rawBody;
    const body = Buffer.from(raw ?? JSON.stringify(rejection.body(this.requestId, this.clientId)));
    const headers: Record<string, string | number> = {
      'content-type':
        rejection.init.contentType ?? (raw === undefined ? 'application/json' : 'text/html; charset=utf-8'),
      'content-length': body.length,
      'x-request-id': this.requestId,
      ...rejection.headers(),
    };
    this.#releaseRequest();
    this.res.writeHead(rejection.status, headers);
    await this.write(body);
    this.end();
  }

  async json(status: number, value: unknown): Promise<void> {
    const body = Buffer.from(JSON.stringify(value));
    this.#releaseRequest();
    this.res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': body.length,
      'x-request-id': this.requestId,
    });
    await this.write(body);
    this.end();
  }

  /** Start a streamed 200 (NDJSON records or a binary body), if not started yet. */
  startStream(contentType: string): void {
    if (this.started || this.gone) return;
    this.res.writeHead(200, { 'content-type': contentType, 'x-request-id': this.requestId });
  }

  /**
   * Answer with these NDJSON records and end. Without byte or record faults the records go in
   * one write with the headers, and the answer is given at once (no promise: every live frame
   * is answered so); with them, one record at a time. False once the connection is gone or a
   * fault cut it.
   */
  finishRecords(records: readonly unknown[]): boolean | Promise<boolean> {
    if (this.started || this.#perRecord) return this.#finishRecordByRecord(records);
    if (this.gone) return false;
    let text = '';
    for (const record of records) text += `${JSON.stringify(record)}\n`;
    // A string, so Node sends it in one piece with the headers.
    const length = Buffer.byteLength(text);
    this.ctx.stats.bytesOut += length;
    this.res.writeHead(200, {
      'content-type': 'application/x-ndjson',
      'content-length': length,
      'x-request-id': this.requestId,
    });
    this.res.end(text);
    return true;
  }

  /** Whether the plan cuts or slows the answer by records or bytes (never without faults). */
  get #perRecord(): boolean {
    return this.plan !== NO_FAULTS && (this.#output.counting || this.plan.slowBody?.usable === true);
  }

  async #finishRecordByRecord(records: readonly unknown[]): Promise<boolean> {
    for (const record of records) if (!(await this.record(record))) return false;
    this.startStream('application/x-ndjson');
    this.end();
    return !this.gone;
  }

  /** Write one NDJSON record; false once the connection is gone or a fault cut it. */
  async record(value: unknown): Promise<boolean> {
    this.startStream('application/x-ndjson');
    return this.write(Buffer.from(`${JSON.stringify(value)}\n`), 'record');
  }

  /** The plan's byte and record cuts over this answer (the plan is set before any output). */
  get #output(): OutputMeter {
    this.#meter ??= new OutputMeter(this.plan);
    return this.#meter;
  }

  /**
   * Write body bytes (`unit`: a whole record or TTS frame, or plain bytes) with the plan's slow
   * body and byte or record cuts, and the socket's backpressure. Returns false once the answer
   * is over: the connection is gone or cut, or truncation ended the body.
   */
  async write(buf: Buffer, unit: OutputUnit = 'bytes'): Promise<boolean> {
    if (this.gone || this.res.writableEnded) return false;
    // Every answer names its request, whichever way its headers go out.
    if (!this.res.headersSent) this.res.setHeader('x-request-id', this.requestId);
    let { bytes, cut } = this.#output.take(buf.length, unit);
    const data = buf.subarray(0, bytes);
    const bps = data.length > 0 ? this.plan.slowBytesPerSecond() : undefined;
    const slice = bps === undefined ? data.length : Math.max(1, Math.ceil((bps * SLOW_TICK_MS) / 1000));
    for (let at = 0; at < data.length; at += slice) {
      if (this.gone) return false;
      const piece = data.subarray(at, at + slice);
      this.ctx.stats.bytesOut += piece.length;
      if (!this.res.write(piece)) await this.#drain();
      if (bps !== undefined && at + slice < data.length) {
        try {
          await this.ctx.lifecycle.sleep((piece.length / bps) * 1000, this.signal);
        } catch {
          return false;
        }
      }
    }
    if (cut === undefined && unit !== 'bytes') cut = this.#output.unitDone();
    if (cut === 'reset') this.cut();
    else if (cut === 'end') this.end();
    return cut === undefined && !this.gone;
  }

  end(): void {
    if (this.gone || this.res.writableEnded) return;
    this.res.end();
  }

  /** End the connection after what was written so far (a failure after output began). */
  cut(): void {
    if (this.#cut || this.res.destroyed) return;
    this.#cut = true;
    const socket = this.res.socket;
    if (socket) socket.destroySoon();
    else this.res.destroy();
  }

  /** Reset the connection at once (the `reset` fault before or after the effect). */
  destroy(): void {
    this.#cut = true;
    const socket = this.req.socket;
    if (socket && !socket.destroyed) socket.resetAndDestroy();
    else this.res.destroy();
  }

  async #drain(): Promise<void> {
    if (this.gone) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.res.off('drain', done);
        this.res.off('close', done);
        resolve();
      };
      this.res.on('drain', done);
      this.res.on('close', done);
    });
  }

  /**
   * An answer sent before the request body was read: let the rest of the body drain (Node
   * discards it and the connection stays usable) instead of closing on a client still sending.
   */
  #releaseRequest(): void {
    if (this.req.complete) return;
    this.req.removeAllListeners('data');
    this.req.unpipe();
    this.req.on('data', (chunk: Buffer) => {
      this.ctx.stats.bytesIn += chunk.length;
    });
    this.req.resume();
  }
}

const CLIENT_GONE = new Error('the client went away');
const EMULATOR_CLOSED = new Error('the emulator closed');
const PREMATURE_CLOSE = new Error('the request body ended before it was complete');

/** A request target as a URL (relative to a placeholder origin). */
export function requestUrl(target: string | undefined): URL {
  return new URL(target ?? '/', 'http://emulator.invalid');
}

/**
 * The path of a request target, as `requestUrl(target).pathname` gives it: a plain path
 * (letters, digits, `/`, `-`, `_`, not starting with `//`, which a URL parser reads as an
 * authority; nothing it would change) is taken as it is, since parsing a URL for every live
 * frame costs more than answering it. A target the URL parser refuses (`//`, `//[`) is given
 * back as it is: it names no operation (404), rather than throwing out of the request handler.
 */
export function pathnameOf(target: string | undefined): string {
  if (target !== undefined && PLAIN_PATH.test(target)) return target;
  try {
    return requestUrl(target).pathname;
  } catch {
    return target ?? '/';
  }
}
const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9_/-]*$/;

export function declaredLength(req: IncomingMessage): number | undefined {
  const raw = req.headers['content-length'];
  if (raw === undefined || req.headers['transfer-encoding'] !== undefined) return undefined;
  const n = Number(raw);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** The TTS body limit: 413 without `data` (interface, POST /http/tts). */
function tooLargePlain(limit: number, observed: number, what: string): Rejection {
  return reject('PAYLOAD_TOO_LARGE', `${what} of ${observed} bytes exceeds ${limit} bytes`);
}
