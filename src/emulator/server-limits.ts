// What a production HTTP server has and the emulator needs too, as the default test bed and the
// embedded service: header, request and keep-alive timeouts, a cap on open connections, and a
// minimum upload rate (a body that drips in is cut, and what its request held is released).

import type { IncomingMessage, Server, ServerResponse } from 'node:http';

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
}

/**
 * The server limits where `EmulatorOptions.server` gives none: headers 20 s, request 15 min,
 * keep-alive 5 s, 1000 connections, uploads at least 16 KiB/s over 10 s.
 */
export const DEFAULT_SERVER_LIMITS: Readonly<ServerLimits> = Object.freeze({
  headersTimeoutMs: 20_000,
  requestTimeoutMs: 15 * 60_000,
  keepAliveTimeoutMs: 5_000,
  maxConnections: 1000,
  minUploadBytesPerSecond: 16 * 1024,
  uploadRateWindowMs: 10_000,
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

interface Upload {
  req: IncomingMessage;
  res: ServerResponse;
  startedAt: number;
  windowStart: number;
  bytesAtWindowStart: number;
}

/**
 * Watches request bodies being received: one timer for all of them, running only while there
 * are some. A body whose bytes over the last window fall under the minimum rate is cut (the
 * request is destroyed, so its route's abort signal fires and releases what it held), unless
 * the emulator is the one not reading (its buffer is full).
 */
export class UploadRateGuard {
  readonly #limits: ServerLimits;
  readonly #uploads = new Set<Upload>();
  readonly #onCut: () => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(limits: ServerLimits, onCut: () => void) {
    this.#limits = limits;
    this.#onCut = onCut;
  }

  /**
   * Watch this request's body until it is complete or the exchange closes. Nothing is added to
   * the request: a live frame costs one set entry, and the check drops what has ended. The
   * timer stops when a check finds nothing left to watch, not as each body ends (a stream of
   * small requests would start and stop it for every one).
   */
  watch(req: IncomingMessage, res: ServerResponse): void {
    if (this.#limits.minUploadBytesPerSecond <= 0 || req.complete) return;
    const now = performance.now();
    this.#uploads.add({
      req,
      res,
      startedAt: now,
      windowStart: now,
      bytesAtWindowStart: req.socket.bytesRead,
    });
    this.#timer ??= setInterval(
      () => this.#check(),
      Math.min(1000, Math.max(10, this.#limits.uploadRateWindowMs / 4)),
    );
  }

  #check(): void {
    const now = performance.now();
    const { uploadRateWindowMs: windowMs, minUploadBytesPerSecond: rate } = this.#limits;
    for (const upload of [...this.#uploads]) {
      const { req, res } = upload;
      if (req.complete || req.destroyed || res.closed) {
        this.#uploads.delete(upload);
        continue;
      }
      const bytes = req.socket.bytesRead;
      // Our side is not reading (a full buffer, a paused stream): not the client's fault.
      if (req.readableLength >= req.readableHighWaterMark || req.isPaused()) {
        upload.windowStart = now;
        upload.bytesAtWindowStart = bytes;
        continue;
      }
      if (now - upload.windowStart < windowMs) continue;
      const received = bytes - upload.bytesAtWindowStart;
      if (received < (rate * windowMs) / 1000) {
        this.#uploads.delete(upload);
        this.#onCut();
        upload.res.destroy();
        req.destroy();
        continue;
      }
      upload.windowStart = now;
      upload.bytesAtWindowStart = bytes;
    }
    if (this.#uploads.size === 0) this.#stop();
  }

  #stop(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  close(): void {
    this.#uploads.clear();
    this.#stop();
  }
}

/** Apply the connection cap to a server. */
export function capConnections(server: Server, limits: ServerLimits): void {
  server.maxConnections = limits.maxConnections;
}
