// The caption relay's viewers: Server-Sent Events to every overlay and player connected to
// `/events`, the recent cues kept for the late and the reconnecting, keep-alives for proxies. A
// viewer that cannot keep up is dropped, never waited for: one slow browser must not hold back
// the broadcast.

import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Cue } from '../transforms/to-captions.ts';

/** A cue as the relay sends it (`cue` events, and `/cues.json`). */
export interface RelayCue {
  index: number;
  startMs: number;
  endMs: number;
  lines: string[];
  speaker: string | null;
}

/** Settings of a {@link ViewerFanOut}, validated by the relay. */
export interface ViewerFanOutSettings {
  /** Cues kept for viewers who join late (and for `/captions.vtt`, `/cues.json`). */
  history: number;
  /** Viewers at once; more are answered 503. */
  maxViewers: number;
  /** Bytes a viewer may fall behind before it is dropped. */
  maxBufferBytes: number;
  /** Milliseconds between keep-alive comments. */
  heartbeatMs: number;
  /** Headers that let another origin read the events (CORS), or none. */
  corsHeaders: Readonly<Record<string, string>>;
}

/** Cues and provisional text to every viewer, with replay from Last-Event-ID. */
export class ViewerFanOut {
  /** The last `history` cues, oldest first. */
  readonly recent: RelayCue[] = [];
  /** Cues relayed, viewers dropped for falling behind, viewers refused for want of room. */
  readonly counts = { cues: 0, dropped: 0, refused: 0 };
  readonly #settings: ViewerFanOutSettings;
  readonly #viewers = new Set<ServerResponse>();
  /** This relay's name in event ids: a restarted relay numbers its cues from 1 again. */
  readonly #instance = randomBytes(6).toString('base64url').replace(/[-_]/g, '0');
  readonly #heartbeat: NodeJS.Timeout;
  #ended = false;
  /** The writes ended: the captions are over (not merely the relay stopping). */
  #captionsEnded = false;

  constructor(settings: ViewerFanOutSettings) {
    this.#settings = settings;
    this.#heartbeat = setInterval(() => {
      for (const res of this.#viewers) res.write(': keep-alive\n\n');
    }, settings.heartbeatMs);
    this.#heartbeat.unref();
  }

  /** Viewers connected now. */
  get viewers(): number {
    return this.#viewers.size;
  }

  /** Number the cues, keep them, and send each to every viewer. */
  addCues(cues: readonly Cue[]): void {
    for (const cue of cues) {
      const relayed: RelayCue = { index: ++this.counts.cues, ...cue };
      this.recent.push(relayed);
      if (this.recent.length > this.#settings.history) this.recent.shift();
      this.#broadcast('cue', relayed, relayed.index);
    }
  }

  /** Provisional text to every viewer (not kept). */
  partial(data: { text: string; lines: string[] }): void {
    this.#broadcast('partial', data);
  }

  /**
   * Answer a request for `/events`: refused past `maxViewers`, else the cues it missed and then
   * every new one until the captions end or the viewer leaves.
   */
  connect(req: IncomingMessage, res: ServerResponse, query: URLSearchParams, head: boolean): void {
    const cors = this.#settings.corsHeaders;
    if (this.#viewers.size >= this.#settings.maxViewers) {
      this.counts.refused++;
      res
        .writeHead(503, { ...cors, 'retry-after': '5', 'content-type': 'text/plain' })
        .end('too many viewers\n');
      return;
    }
    res.writeHead(200, {
      ...cors,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
    });
    if (head) {
      res.end();
      return;
    }
    res.write('retry: 2000\n\n');
    // The browser's own reconnection sends the header; it is newer than the page's query.
    const header = req.headers['last-event-id'];
    const lastId = (Array.isArray(header) ? header[0] : header) ?? query.get('lastEventId') ?? '';
    for (const cue of this.#replayFor(lastId)) res.write(this.#message('cue', cue, cue.index));
    if (this.#ended) {
      res.end(this.#captionsEnded ? 'event: end\ndata: {}\n\n' : undefined);
      return;
    }
    this.#viewers.add(res);
    res.once('close', () => this.#viewers.delete(res));
  }

  /**
   * No more events. `end` is sent only when the captions really ended (`captionsEnded`); a
   * relay stopped otherwise (a failure, an interrupt) just closes its connections, so overlays
   * reconnect to the next relay on the same address instead of going blank for good.
   */
  finish(captionsEnded: boolean): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#captionsEnded = captionsEnded;
    if (captionsEnded) this.#broadcast('end', {});
    for (const res of this.#viewers) res.end();
    this.#viewers.clear();
    clearInterval(this.#heartbeat);
  }

  /**
   * A cue's event id is its index and this relay's name, `12@k3x9q0`, so that a viewer
   * reconnecting says which cue it saw last, and whether this relay numbered it.
   */
  #message(event: string, data: unknown, index?: number): string {
    return `${index === undefined ? '' : `id: ${index}@${this.#instance}\n`}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  }

  #broadcast(event: string, data: unknown, id?: number): void {
    const message = this.#message(event, data, id);
    for (const res of this.#viewers) {
      res.write(message);
      // Past the bound the viewer is not reading: drop it rather than buffer for it.
      if (res.writableLength > this.#settings.maxBufferBytes) {
        this.counts.dropped++;
        this.#viewers.delete(res);
        res.destroy();
      }
    }
  }

  /**
   * The cues a viewer gets on connecting. New (no last id, or none that parses): the cue on
   * screen now, not a blank overlay until the next one. Reconnecting (`Last-Event-ID`, or
   * `?lastEventId=` from a page that had to open a new EventSource): the kept cues after the one
   * it saw last. An id of another relay (this one restarted), or past this relay's last cue:
   * every kept cue.
   */
  #replayFor(lastId: string): RelayCue[] {
    const id = /^(\d{1,15})(?:@(\w+))?$/.exec(lastId);
    if (!id) return this.recent.slice(-1);
    const lastSeen = id[2] === undefined || id[2] === this.#instance ? Number(id[1]) : Infinity;
    if (lastSeen > this.counts.cues) return this.recent;
    return this.recent.filter((c) => c.index > lastSeen);
  }
}
