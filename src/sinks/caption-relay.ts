// captionRelay(): live captions to browsers. A Writable of transcript events (partial,
// utterance, final) that lays utterances out as caption cues and serves them over HTTP: an
// overlay page for a broadcast (a browser source), Server-Sent Events, and the recent cues as
// WebVTT. A viewer that cannot keep up is dropped, never waited for: one slow browser must not
// hold back the broadcast.

import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import {
  CaptionBuilder,
  type CaptionOptions,
  type Cue,
  formatVttCue,
  tailLines,
  VTT_HEADER,
} from '../transforms/to-captions.ts';

/**
 * Options of {@link captionRelay}: where it serves, how much it keeps, and the captions' layout.
 */
export interface CaptionRelayOptions extends Omit<CaptionOptions, 'format'> {
  /** Default 0 (any free port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Cues kept for `/captions.vtt` and for viewers who join late. Default 200. */
  history?: number;
  /** Viewers at once (`/events`); more are answered 503. Default 100. */
  maxViewers?: number;
  /** Bytes a viewer may fall behind before it is dropped. Default 256 KiB. */
  maxViewerBufferBytes?: number;
  /** Seconds between keep-alive comments on `/events` (proxies close quiet streams). Default 15. */
  heartbeatSec?: number;
  /** The overlay page's title. */
  title?: string;
  /**
   * The captions' language, a BCP 47 tag (`ar`, `en`), for the page's `lang` (fonts, screen
   * readers). Default: none said. Each line's direction follows its text (`dir="auto"`), so
   * Arabic reads right to left in any case.
   */
  lang?: string;
  /**
   * Host names requests may be addressed to. Default: bound to a loopback address, only
   * loopback names (`localhost`, `127.0.0.1`, `[::1]`, the bound address), so that a page on
   * another site cannot read the captions through a rebound DNS name; bound elsewhere, any.
   */
  allowedHosts?: readonly string[];
  /**
   * An origin (`https://player.example`) or `*`: pages there may read `/events`, `/cues.json`
   * and `/captions.vtt` (CORS). Default: none but the relay's own page.
   */
  cors?: string;
}

/** `*`, or an http(s) origin as a browser sends it: scheme, host and port only. */
export function isCorsOrigin(value: string): boolean {
  if (value === '*') return true;
  try {
    const url = new URL(value);
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.origin === value;
  } catch {
    return false;
  }
}

/** A cue as the relay sends it (`cue` events, and `/cues.json`). */
export interface RelayCue {
  index: number;
  startMs: number;
  endMs: number;
  lines: string[];
  speaker: string | null;
}

/** What a caption relay has served so far. */
export interface CaptionRelayStats {
  /** Viewers connected now (`/events`). */
  viewers: number;
  /** Cues relayed. */
  cues: number;
  /** Viewers dropped for falling behind. */
  dropped: number;
  /** Viewers refused because `maxViewers` were connected. */
  refused: number;
}

/** A running caption relay: a Writable of transcript events that serves them to overlay pages. */
export interface CaptionRelay extends Writable {
  /** `http://host:port` (the overlay page is at `/`). */
  readonly url: string;
  /** Viewers and cues so far. */
  stats(): CaptionRelayStats;
  /**
   * Stop serving. Viewers are told the captions ended (`end`) only if the writes had ended;
   * otherwise their connections just close, and overlays reconnect to whatever serves next.
   */
  close(): Promise<void>;
}

interface TranscriptLike {
  type?: unknown;
  text?: unknown;
  words?: unknown;
}

const PAGE = (title: string, lang: string | undefined) => `<!doctype html>
<html${lang ? ` lang="${lang}"` : ''}>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`)}</title>
<link rel="stylesheet" href="/overlay.css">
<script src="/overlay.js" defer></script>
</head>
<body>
<div id="captions" aria-live="polite"><p id="cue" class="cue" dir="auto"></p><p id="partial" class="partial" dir="auto"></p></div>
</body>
</html>
`;

const CSS = `html, body { margin: 0; background: transparent; }
#captions { position: fixed; left: 5%; right: 5%; bottom: 6%; text-align: center;
  font: 600 clamp(12px, 2.8vw, 44px)/1.3 system-ui, sans-serif; color: #fff; }
#captions p { margin: 0.2em auto; display: table; padding: 0.1em 0.4em; border-radius: 0.2em;
  background: rgba(0, 0, 0, 0.72); white-space: pre-line; }
#captions p:empty { display: none; }
/* Provisional text: it may still change, and must not be taken for a final cue. */
.partial { opacity: 0.7; font-style: italic; font-weight: 400; }
.speaker { color: #ffd54a; }
`;

/**
 * The overlay's script. Cues of one utterance arrive together (within milliseconds), so they
 * go through a display queue, each on screen for a time it can be read in:
 * - alone, max(minDurationMs, chars / maxCharsPerSecond, its own endMs - startMs);
 * - with cues waiting behind it, only its reading time, max(minDurationMs, chars / cps), and
 *   with more than CATCH_UP waiting, that time times CATCH_UP / waiting, down to minDurationMs,
 *   so that a backlog drains faster than speech fills it (the cue on screen is shortened as
 *   soon as others arrive, never lengthened);
 * - at most MAX_WAITING cues wait: past that the oldest waiting one is dropped, so that a page
 *   that fell far behind (a tab that slept) jumps to the present rather than replaying minutes.
 * A cue whose time is up stays until the next one, or LINGER_MS more at the most.
 */
const SCRIPT = (layout: { minMs: number; cps: number }) => `'use strict';
const MIN_MS = ${Number(layout.minMs)};
const CPS = ${Number(layout.cps)};
const CATCH_UP = 2;
const MAX_WAITING = 12;
const LINGER_MS = 1500;
const cueEl = document.getElementById('cue');
const partialEl = document.getElementById('partial');
const waiting = [];
let current = null;
let shownAt = 0;
let holdTimer;
let lingerTimer;
function holdMs(cue, behind) {
  const chars = cue.lines.join(' ').length + (cue.speaker ? cue.speaker.length + 2 : 0);
  const reading = Math.max(MIN_MS, (chars * 1000) / CPS);
  if (behind === 0) return Math.max(reading, cue.endMs - cue.startMs);
  return Math.max(MIN_MS, reading * Math.min(1, CATCH_UP / behind));
}
function render(cue) {
  cueEl.textContent = '';
  if (cue.speaker) {
    const who = document.createElement('span');
    who.className = 'speaker';
    who.dir = 'auto';
    who.textContent = cue.speaker + ': ';
    cueEl.append(who);
  }
  cueEl.append(document.createTextNode(cue.lines.join('\\n')));
}
function schedule() {
  clearTimeout(holdTimer);
  const left = shownAt + holdMs(current, waiting.length) - performance.now();
  holdTimer = setTimeout(advance, Math.max(0, left));
}
function advance() {
  holdTimer = undefined;
  current = waiting.shift() ?? null;
  if (!current) {
    lingerTimer = setTimeout(() => { if (!current) cueEl.textContent = ''; }, LINGER_MS);
    return;
  }
  clearTimeout(lingerTimer);
  shownAt = performance.now();
  render(current);
  schedule();
}
function enqueue(cue) {
  if (waiting.length >= MAX_WAITING) waiting.shift();
  waiting.push(cue);
  if (current) schedule();
  else advance();
}
// A new EventSource does not send Last-Event-ID: the page says which cue it saw last itself.
let lastId;
// After the captions ended, or a connection the browser gave up on (a refusal, a relay gone),
// try again, ever less often (1 s doubling to 15 s, jittered so that many overlays spread out):
// a relay restarted on the same address is picked up by itself, and an ended one is not
// hammered. Captions arriving reset the pace.
const RETRY_MS = 1000;
const MAX_RETRY_MS = 15000;
let retries = 0;
let retryTimer;
function connect() {
  retryTimer = undefined;
  const events = new EventSource(lastId ? '/events?lastEventId=' + encodeURIComponent(lastId) : '/events');
  const retryLater = () => {
    events.close();
    if (retryTimer !== undefined) return;
    const ms = Math.min(MAX_RETRY_MS, RETRY_MS * 2 ** retries++);
    retryTimer = setTimeout(connect, ms * (0.5 + Math.random() / 2));
  };
  events.addEventListener('cue', (e) => {
    retries = 0;
    lastId = e.lastEventId;
    // The utterance is committed: its provisional text is obsolete.
    partialEl.textContent = '';
    enqueue(JSON.parse(e.data));
  });
  events.addEventListener('partial', (e) => {
    retries = 0;
    partialEl.textContent = JSON.parse(e.data).lines.join('\\n');
  });
  events.addEventListener('end', () => {
    partialEl.textContent = '';
    retryLater();
  });
  // A dropped connection the browser retries by itself (CONNECTING); one it gave up on is ours.
  events.addEventListener('error', () => {
    if (events.readyState === EventSource.CLOSED) retryLater();
  });
}
connect();
`;

const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

function count(name: string, value: number | undefined, fallback: number, min = 1): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min)
    throw new InvalidArgumentError(`captionRelay: ${name} must be an integer >= ${min}, got ${v}`);
  return v;
}

/**
 * Start a caption relay. Write transcript events into it (from `assembleTranscript()` or
 * `alignSpeakersStream()`): each `utterance` becomes cues at once (`cue` events), each
 * `partial` is passed on as provisional text (`partial` events), and the end of the writes
 * sends `end` (the relay keeps serving the page and the cues until `close()`). Served: `/` the
 * overlay page, `/events` Server-Sent Events (cue ids for Last-Event-ID), `/captions.vtt` and
 * `/cues.json` the recent cues (also to the `cors` origin).
 */
export async function captionRelay(options: CaptionRelayOptions = {}): Promise<CaptionRelay> {
  // The overlay writes a speaker's label into the first line: it must fit there too.
  const builder = new CaptionBuilder({ ...options, format: 'vtt' }, { labelsInText: true });
  const labels = builder.layout.labels;
  const history = count('history', options.history, 200);
  const maxViewers = count('maxViewers', options.maxViewers, 100);
  const maxBuffer = count('maxViewerBufferBytes', options.maxViewerBufferBytes, 256 * 1024);
  const heartbeatMs = count('heartbeatSec', options.heartbeatSec, 15) * 1000;
  const port = count('port', options.port, 0, 0);
  // listen() takes an empty host for every interface: captions meant for one address would
  // be served to the whole network, to any Host name.
  const host = options.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host.trim() === '')
    throw new InvalidArgumentError(`captionRelay: host must be an address, got ${JSON.stringify(host)}`);
  if (options.lang !== undefined && !/^[a-z]{2,3}(-[a-z0-9]{1,8})*$/i.test(options.lang))
    throw new InvalidArgumentError(
      `captionRelay: lang must be a language tag (ar, en-GB), got ${JSON.stringify(options.lang)}`,
    );
  const page = PAGE(options.title ?? 'speechpipe captions', options.lang);
  const script = SCRIPT(builder.layout);
  if (options.cors !== undefined && !isCorsOrigin(options.cors))
    throw new InvalidArgumentError(
      `captionRelay: cors must be an origin (https://host[:port]) or *, got ${JSON.stringify(options.cors)}`,
    );
  // What another site's page may read: the captions, not the page or its script.
  const corsHeaders: Record<string, string> = options.cors
    ? { 'access-control-allow-origin': options.cors }
    : {};
  const shared = new Set(['/events', '/cues.json', '/captions.vtt']);

  const recent: RelayCue[] = [];
  const instance = randomBytes(6).toString('base64url').replace(/[-_]/g, '0');
  const viewers = new Set<ServerResponse>();
  const stats = { cues: 0, dropped: 0, refused: 0 };
  let ended = false;
  /** The writes ended: the captions are over (not merely the relay stopping). */
  let captionsEnded = false;

  /**
   * A cue's event id is its index and this relay's name, `12@k3x9q0`, so that a viewer
   * reconnecting says which cue it saw last, and whether this relay numbered it: a restarted
   * relay numbers its cues from 1 again, and must not take a viewer's 12 for its own.
   */
  const message = (event: string, data: unknown, index?: number) =>
    `${index === undefined ? '' : `id: ${index}@${instance}\n`}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
  const send = (res: ServerResponse, event: string, data: unknown, id?: number) => {
    res.write(message(event, data, id));
    // Past the bound the viewer is not reading: drop it rather than buffer for it.
    if (res.writableLength > maxBuffer) {
      stats.dropped++;
      viewers.delete(res);
      res.destroy();
    }
  };
  const broadcast = (event: string, data: unknown, id?: number) => {
    for (const res of viewers) send(res, event, data, id);
  };

  /**
   * The cues a viewer gets on connecting. New (no last id, or none that parses): the cue on
   * screen now, not a blank overlay until the next one. Reconnecting (`Last-Event-ID`, or `?lastEventId=` from a page
   * that had to open a new EventSource): the kept cues after the one it saw last. An id of
   * another relay (this one restarted), or past this relay's last cue: every kept cue.
   */
  const replayFor = (lastId: string): RelayCue[] => {
    const id = /^(\d{1,15})(?:@(\w+))?$/.exec(lastId);
    if (!id) return recent.slice(-1);
    const lastSeen = id[2] === undefined || id[2] === instance ? Number(id[1]) : Infinity;
    if (lastSeen > stats.cues) return recent;
    return recent.filter((c) => c.index > lastSeen);
  };

  const onEvents = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams, head: boolean) => {
    if (viewers.size >= maxViewers) {
      stats.refused++;
      res
        .writeHead(503, { ...corsHeaders, 'retry-after': '5', 'content-type': 'text/plain' })
        .end('too many viewers\n');
      return;
    }
    res.writeHead(200, {
      ...corsHeaders,
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
    for (const cue of replayFor(lastId)) res.write(message('cue', cue, cue.index));
    if (ended) {
      res.end(captionsEnded ? 'event: end\ndata: {}\n\n' : undefined);
      return;
    }
    viewers.add(res);
    res.once('close', () => viewers.delete(res));
  };

  const vtt = () => VTT_HEADER + recent.map((c) => formatVttCue(c, labels)).join('');

  const server: Server = createServer((req, res) => {
    if (!hostAllowed(req.headers.host)) {
      res.writeHead(421, { 'content-type': 'text/plain' }).end('misdirected request\n');
      return;
    }
    // A target that is no URL (`GET http://[ HTTP/1.1`, which the parser lets through) is the
    // client's fault: thrown here, it would take the whole relay down.
    let target: URL;
    try {
      target = new URL(req.url ?? '/', 'http://relay');
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('bad request\n');
      return;
    }
    const { pathname: path, searchParams } = target;
    // A preflight: an EventSource coming back sends Last-Event-ID, which is not a simple header.
    if (req.method === 'OPTIONS' && options.cors && shared.has(path)) {
      res
        .writeHead(204, {
          ...corsHeaders,
          'access-control-allow-methods': 'GET, HEAD',
          'access-control-allow-headers': 'last-event-id',
          'access-control-max-age': '600',
        })
        .end();
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    const reply = (type: string, body: string) =>
      res
        .writeHead(200, {
          ...SECURITY_HEADERS,
          ...(shared.has(path) ? corsHeaders : {}),
          'content-type': type,
          'cache-control': 'no-store',
        })
        .end(req.method === 'HEAD' ? undefined : body);
    if (path === '/') return reply('text/html; charset=utf-8', page);
    if (path === '/overlay.css') return reply('text/css; charset=utf-8', CSS);
    if (path === '/overlay.js') return reply('text/javascript; charset=utf-8', script);
    if (path === '/captions.vtt') return reply('text/vtt; charset=utf-8', vtt());
    if (path === '/cues.json') return reply('application/json', JSON.stringify(recent));
    if (path === '/events') return onEvents(req, res, searchParams, req.method === 'HEAD');
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const bound = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const loopback = /^(127\.|\[::1\]$)/.test(bound);
  const allowed = options.allowedHosts
    ? new Set(options.allowedHosts.map((h) => h.toLowerCase()))
    : loopback
      ? new Set(['localhost', '127.0.0.1', '[::1]', bound])
      : undefined;
  function hostAllowed(host: string | undefined): boolean {
    if (!allowed) return true;
    if (!host) return false;
    try {
      return allowed.has(new URL(`http://${host}`).hostname.toLowerCase());
    } catch {
      return false;
    }
  }
  const url = `http://${bound}:${address.port}`;
  const heartbeat = setInterval(() => {
    for (const res of viewers) res.write(': keep-alive\n\n');
  }, heartbeatMs);
  heartbeat.unref();

  const addCues = (cues: Cue[]) => {
    for (const cue of cues) {
      const relayed: RelayCue = { index: ++stats.cues, ...cue };
      recent.push(relayed);
      if (recent.length > history) recent.shift();
      broadcast('cue', relayed, relayed.index);
    }
  };
  /**
   * `end` only when the captions really ended (the writes ended). A relay stopped otherwise
   * (a failure, an interrupt) just closes its connections, so overlays reconnect to the next
   * relay on the same address instead of going blank for good.
   */
  const finish = (done: boolean) => {
    if (ended) return;
    ended = true;
    captionsEnded = done;
    if (done) broadcast('end', {});
    for (const res of viewers) res.end();
    viewers.clear();
  };

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      finish(false);
      clearInterval(heartbeat);
      // Viewers get their last events first: idle connections close now, the rest once their
      // last bytes are out, or after a second at the most.
      const force = setTimeout(() => server.closeAllConnections(), 1000);
      server.close(() => {
        clearTimeout(force);
        resolve();
      });
      server.closeIdleConnections();
    });
    return closing;
  };

  const relay = new Writable({
    objectMode: true,
    // The end of the captions is not the end of the service: viewers may still fetch the cues.
    autoDestroy: false,
    write(event: TranscriptLike, _encoding, callback) {
      if (event?.type === 'utterance' && Array.isArray(event.words)) {
        let cues: Cue[];
        try {
          cues = builder.add(event.words, { live: true });
        } catch (err) {
          callback(err as Error);
          return;
        }
        addCues(cues);
      } else if (event?.type === 'partial' && typeof event.text === 'string') {
        // Within the cues' line limits: the tail, as a long utterance rolls up on screen.
        const lines = tailLines(event.text, builder.layout.maxCharsPerLine, builder.layout.maxLines);
        broadcast('partial', { text: event.text, lines });
      } else if (typeof event?.type !== 'string') {
        callback(
          new InvalidArgumentError('captionRelay: expected transcript events (partial, utterance, final)'),
        );
        return;
      }
      callback();
    },
    final(callback) {
      finish(true);
      callback();
    },
    destroy(err, callback) {
      close().then(
        () => callback(err),
        () => callback(err),
      );
    },
  }) as CaptionRelay;
  Object.defineProperties(relay, {
    url: { value: url, enumerable: true },
    stats: { value: (): CaptionRelayStats => ({ viewers: viewers.size, ...stats }) },
    close: { value: close },
  });
  return relay;
}
