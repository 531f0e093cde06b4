// What a production HTTP server has and the emulator needs too, as the default test bed and the
// embedded service: header, request and keep-alive timeouts, a cap on open connections, a
// minimum upload rate (a body that drips in is cut, and what its request held is released), and
// a send timeout (a client that stops reading its answer is disconnected, and the same).

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * The emulator's HTTP server limits, as a production server has them (`EmulatorOptions.server`).
 */
export interface ServerLimits {
  /** Complete request headers must arrive within this (slowloris). Default 20 s. */
  headersTimeoutMs: number;
  /** A whole request, body included, must arrive within this. Default 15 min (512 MiB at 0.6 MB/s). */
  requestTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. Default 5 s. */
  keepAliveTimeoutMs: number;
  /** Connections beyond this are closed as they arrive (file descriptors are finite). Default 1000. */
  maxConnections: number;
  /**
   * A request body arriving slower than this, over `uploadRateWindowMs`, is cut (unless the
   * emulator itself is not reading). Default 16 KiB/s; 0 disables.
   */
  minUploadBytesPerSecond: number;
  /** The window of the minimum upload rate, and the grace before it applies. Default 10 s. */
  uploadRateWindowMs: number;
  /**
   * A connection whose unsent output makes no progress for this long (its client does not read
   * its answer) is closed, and what its request held is released. Default 120 s; 0 disables.
   * Progress is the kernel taking bytes, which it does for a slow reader in blocks of up to half
   * the socket's send buffer: a reader at real-time TTS speed (32 kB/s) showed none for 45 s.
   */
  sendTimeoutMs: number;
}

/**
 * The server limits where `EmulatorOptions.server` gives none: headers 20 s, request 15 min,
 * keep-alive 5 s, 1000 connections, uploads at least 16 KiB/s over 10 s, send timeout 120 s.
 */
export const DEFAULT_SERVER_LIMITS: Readonly<ServerLimits> = Object.freeze({
  headersTimeoutMs: 20_000,
  requestTimeoutMs: 15 * 60_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 1000,
  minUploadBytesPerSecond: 16 * 1024,
  uploadRateWindowMs: 10_000,
  sendTimeoutMs: 120_000,
});

/** Options for `http.createServer`: the timeouts, checked often enough to matter. */
export function serverOptions(limits: ServerLimits) {
  return {
    headersTimeout: limits.headersTimeoutMs,
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node checks both timeouts on this interval (default 30 s): a slowloris would outlive them.
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4))),
  };
}

/** A connection's latest request, while its body may still be arriving. */
interface Upload {
  req: IncomingMessage | undefined;
  res: ServerResponse | undefined;
  /** When its window began, and the connection's bytes read then; NaN until a check first sees it. */
  windowStart: number;
  bytesAtWindowStart: number;
}

/**
 * Watches request bodies being received: one timer for all of them, running only while there
 * are some. A body whose bytes over the last window fall under the minimum rate is cut (the
 * request is destroyed, so its route's abort signal fires and releases what it held), unless
 * the emulator is the one not reading (its buffer is full).
 *
 * Kept per connection, not per request: an HTTP/1.1 connection receives one body at a time
 * (the next request is parsed only once the body before it is complete, also when that body is
 * drained after an early answer), so its latest request is the only one that can be arriving.
 * A request costs a lookup and three stores; its window begins when a check first sees it
 * (at most a check interval, a quarter of the window, after it arrived). A listener and a set
 * entry per request cost 4% of a live frame; keeping every request of the last interval
 * instead sent them to the old generation, and full collections cost more than that.
 */
export class UploadRateGuard {
  readonly #limits: ServerLimits;
  readonly #connections = new Map<Socket, Upload>();
  /** Requests whose client sends the body only once asked (`Expect: 100-continue`), not asked yet. */
  readonly #notAsked = new WeakSet<IncomingMessage>();
  readonly #onCut: () => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(limits: ServerLimits, onCut: () => void) {
    this.#limits = limits;
    this.#onCut = onCut;
  }

  /**
   * `Expect: 100-continue`: the client waits for 100 Continue before it sends the body. It is
   * sent when something first reads the body (the operation, or a thread passing the request
   * on), not as Node would at once: a request refused by its headers (401, 404, 413 from
   * Content-Length) is answered without the client sending a body it would only have to
   * discard. Until then no body is not the client's fault (an operation that waits first, a
   * delay or stall fault, was cut as a slow upload before the client was ever asked).
   */
  askForBodyWhenRead(req: IncomingMessage, res: ServerResponse): void {
    this.#notAsked.add(req);
    const read = req._read;
    req._read = (size: number) => {
      req._read = read;
      this.#notAsked.delete(req);
      // Not once a final answer is under way (the rest of a refused body is being drained).
      if (!res.headersSent && !res.destroyed) res.writeContinue();
      return read.call(req, size);
    };
  }

  /**
   * Watch this request's body until it is complete or the connection closes, also after it was
   * answered (an error answered at once, the rest of the body drained): a body that drips after
   * its answer held its connection until the request timeout (15 min). The timer stops when a
   * check finds nothing left to watch, not as each body ends (a stream of small requests would
   * start and stop it for every one).
   */
  watch(req: IncomingMessage, res: ServerResponse): void {
    if (this.#limits.minUploadBytesPerSecond <= 0 || req.complete) return;
    const socket = req.socket;
    let upload = this.#connections.get(socket);
    if (!upload) {
      if (socket.destroyed) return;
      upload = { req, res, windowStart: Number.NaN, bytesAtWindowStart: 0 };
      const watched = upload;
      this.#connections.set(socket, watched);
      socket.once('close', () => {
        if (this.#connections.get(socket) === watched) this.#connections.delete(socket);
      });
    } else {
      upload.req = req;
      upload.res = res;
      upload.windowStart = Number.NaN;
    }
    this.#timer ??= setInterval(
      () => this.#check(),
      Math.min(1000, Math.max(10, this.#limits.uploadRateWindowMs / 4)),
    );
  }

  #check(): void {
    const now = performance.now();
    const { uploadRateWindowMs: windowMs, minUploadBytesPerSecond: rate } = this.#limits;
    let arriving = 0;
    for (const [socket, upload] of this.#connections) {
      const { req, res } = upload;
      if (req === undefined || res === undefined) continue;
      // Its connection gone: a request answered before its body ended left Node's list of the
      // connection's requests, so it is neither destroyed nor closed when its client goes away.
      if (req.complete || req.destroyed || socket.destroyed) {
        upload.req = undefined;
        upload.res = undefined;
        continue;
      }
      arriving++;
      const bytes = socket.bytesRead;
      // Our side is not reading (its buffer is full): not the client's fault. A paused request
      // whose buffer is not full still receives what the client sends (Node stops reading the
      // socket only once it is full), and one read with `read()` (a thread of several peeking
      // at a live frame's stream id) counts as paused: neither is a reason to wait forever. A
      // client waiting for 100 Continue is not asked to send yet. A body first seen now starts
      // its window now.
      if (
        Number.isNaN(upload.windowStart) ||
        req.readableLength >= req.readableHighWaterMark ||
        this.#notAsked.has(req)
      ) {
        upload.windowStart = now;
        upload.bytesAtWindowStart = bytes;
        continue;
      }
      if (now - upload.windowStart < windowMs) continue;
      const received = bytes - upload.bytesAtWindowStart;
      if (received < (rate * windowMs) / 1000) {
        upload.req = undefined;
        upload.res = undefined;
        arriving--;
        this.#onCut();
        // The connection, not only the response: one already answered is detached from it.
        res.destroy();
        socket.destroy();
        req.destroy();
        continue;
      }
      upload.windowStart = now;
      upload.bytesAtWindowStart = bytes;
    }
    if (arriving === 0) this.#stop();
  }

  #stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  close(): void {
    this.#connections.clear();
    this.#stop();
  }
}

interface Watched {
  /** Bytes the socket had not written, and libuv's part of them, when last seen to change. */
  pending: number;
  queued: number;
  since: number;
}

/**
 * Bytes libuv still holds for a socket (what the kernel has not taken yet). Node's own socket
 * timeout reads the same field to tell a write in progress from a stalled one; `writableLength`
 * alone moves only when a whole write completes, so a slow reader of one large write would look
 * stalled.
 */
function queuedBytes(socket: Socket): number {
  return (socket as unknown as { _handle?: { writeQueueSize?: number } })._handle?.writeQueueSize ?? 0;
}

/**
 * Watches the output of every connection (HTTP, and the websockets upgraded from them): one
 * whose unsent bytes make no progress for `sendTimeoutMs` is destroyed, so the operation
 * writing to it sees its client gone and releases what it held (a TTS answer waiting for a
 * client that never reads held its account's TTS slot for good). Nothing waiting to be sent is
 * never a stall: a held answer or a `stall` fault writes nothing. One timer for all connections,
 * running only while there are some.
 */
export class SendStallGuard {
  readonly #limits: ServerLimits;
  readonly #sockets = new Map<Socket, Watched>();
  readonly #onCut: () => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(limits: ServerLimits, onCut: () => void) {
    this.#limits = limits;
    this.#onCut = onCut;
  }

  /** Watch this connection until it closes. */
  watch(socket: Socket): void {
    if (this.#limits.sendTimeoutMs <= 0 || socket.destroyed) return;
    this.#sockets.set(socket, { pending: 0, queued: 0, since: performance.now() });
    socket.once('close', () => {
      this.#sockets.delete(socket);
      if (this.#sockets.size === 0) this.#stop();
    });
    if (!this.#timer) {
      this.#timer = setInterval(
        () => this.#check(),
        Math.min(1000, Math.max(10, this.#limits.sendTimeoutMs / 4)),
      );
      this.#timer.unref();
    }
  }

  #check(): void {
    const now = performance.now();
    for (const [socket, watched] of this.#sockets) {
      const pending = socket.destroyed ? 0 : socket.writableLength;
      const queued = pending === 0 ? 0 : queuedBytes(socket);
      if (pending === 0 || pending !== watched.pending || queued !== watched.queued) {
        watched.pending = pending;
        watched.queued = queued;
        watched.since = now;
        continue;
      }
      if (now - watched.since < this.#limits.sendTimeoutMs) continue;
      this.#sockets.delete(socket);
      this.#onCut();
      socket.destroy();
    }
    if (this.#sockets.size === 0) this.#stop();
  }

  #stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  close(): void {
    this.#sockets.clear();
    this.#stop();
  }
}

/** Apply the connection cap to a server. */
export function capConnections(server: Server, limits: ServerLimits): void {
  server.maxConnections = limits.maxConnections;
}
