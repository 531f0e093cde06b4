// captionRelay(): live captions to browsers. A caption output (a Writable of transcript events)
// that lays utterances out as caption cues and serves them over HTTP: an overlay page for a
// broadcast (a browser source), Server-Sent Events, the recent cues as WebVTT, and whatever is
// mounted beside them (an HLS presentation). Its parts: the options checked here, the viewers'
// fan-out (viewer-fan-out.ts), the routes (relay-router.ts), the page (overlay-page.ts).

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { InvalidArgumentError } from '../protocol/errors.ts';
import {
  CaptionBuilder,
  type CaptionOptions,
  formatVttCue,
  tailLines,
  VTT_HEADER,
} from '../transforms/to-captions.ts';
import { type CaptionOutput, captionOutput } from './caption-output.ts';
import { OVERLAY_CSS, overlayPage, overlayScript } from './overlay-page.ts';
import { type RelayMount, relayRouter, type TextRoute } from './relay-router.ts';
import { ViewerFanOut } from './viewer-fan-out.ts';

export type { RelayCue } from './viewer-fan-out.ts';

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
  /**
   * More to serve under path prefixes of their own (an HLS presentation under `/hls/`, from
   * `hlsOutput().mount`), to other origins as `cors` says.
   */
  mounts?: readonly RelayMount[];
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
export interface CaptionRelay extends CaptionOutput {
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

function count(name: string, value: number | undefined, fallback: number, min = 1): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min)
    throw new InvalidArgumentError(`captionRelay: ${name} must be an integer >= ${min}, got ${v}`);
  return v;
}

/** {@link CaptionRelayOptions} checked, with their defaults. */
interface RelaySettings {
  builder: CaptionBuilder;
  history: number;
  maxViewers: number;
  maxBufferBytes: number;
  heartbeatMs: number;
  port: number;
  host: string;
  title: string;
  lang: string | undefined;
  cors: string | undefined;
  allowedHosts: readonly string[] | undefined;
}

/** Check the options (each bad one an `InvalidArgumentError` naming it) and fill in the defaults. */
function relaySettings(options: CaptionRelayOptions): RelaySettings {
  // The overlay writes a speaker's label into the first line: it must fit there too.
  const builder = new CaptionBuilder({ ...options, format: 'vtt' }, { labelsInText: true });
  const settings = {
    builder,
    history: count('history', options.history, 200),
    maxViewers: count('maxViewers', options.maxViewers, 100),
    maxBufferBytes: count('maxViewerBufferBytes', options.maxViewerBufferBytes, 256 * 1024),
    heartbeatMs: count('heartbeatSec', options.heartbeatSec, 15) * 1000,
    port: count('port', options.port, 0, 0),
    // listen() takes an empty host for every interface: captions meant for one address would
    // be served to the whole network, to any Host name.
    host: options.host ?? '127.0.0.1',
    title: options.title ?? 'speechpipe captions',
    lang: options.lang,
    cors: options.cors,
    allowedHosts: options.allowedHosts,
  };
  if (typeof settings.host !== 'string' || settings.host.trim() === '')
    throw new InvalidArgumentError(
      `captionRelay: host must be an address, got ${JSON.stringify(settings.host)}`,
    );
  if (settings.lang !== undefined && !/^[a-z]{2,3}(-[a-z0-9]{1,8})*$/i.test(settings.lang))
    throw new InvalidArgumentError(
      `captionRelay: lang must be a language tag (ar, en-GB), got ${JSON.stringify(settings.lang)}`,
    );
  if (settings.cors !== undefined && !isCorsOrigin(settings.cors))
    throw new InvalidArgumentError(
      `captionRelay: cors must be an origin (https://host[:port]) or *, got ${JSON.stringify(settings.cors)}`,
    );
  return settings;
}

/**
 * Which Host names the relay answers: `allowedHosts`, else, bound to a loopback address, only
 * loopback names, so that a page on another site cannot read the captions through a rebound
 * DNS name; bound elsewhere, any.
 */
function hostCheck(
  allowedHosts: readonly string[] | undefined,
  bound: string,
): (host: string | undefined) => boolean {
  const loopback = /^(127\.|\[::1\]$)/.test(bound);
  const allowed = allowedHosts
    ? new Set(allowedHosts.map((h) => h.toLowerCase()))
    : loopback
      ? new Set(['localhost', '127.0.0.1', '[::1]', bound])
      : undefined;
  return (host) => {
    if (!allowed) return true;
    if (!host) return false;
    try {
      return allowed.has(new URL(`http://${host}`).hostname.toLowerCase());
    } catch {
      return false;
    }
  };
}

async function listen(server: Server, port: number, host: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  return address.family === 'IPv6' ? `[${address.address}]` : address.address;
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
  const settings = relaySettings(options);
  const { builder } = settings;
  const labels = builder.layout.labels;
  const corsHeaders: Record<string, string> = settings.cors
    ? { 'access-control-allow-origin': settings.cors }
    : {};
  const fanOut = new ViewerFanOut({
    history: settings.history,
    maxViewers: settings.maxViewers,
    maxBufferBytes: settings.maxBufferBytes,
    heartbeatMs: settings.heartbeatMs,
    corsHeaders,
  });
  const page = overlayPage(settings.title, settings.lang);
  const script = overlayScript(builder.layout);
  const text = new Map<string, TextRoute>([
    ['/', { type: 'text/html; charset=utf-8', body: () => page }],
    ['/overlay.css', { type: 'text/css; charset=utf-8', body: () => OVERLAY_CSS }],
    ['/overlay.js', { type: 'text/javascript; charset=utf-8', body: () => script }],
    [
      '/captions.vtt',
      {
        type: 'text/vtt; charset=utf-8',
        body: () => VTT_HEADER + fanOut.recent.map((c) => formatVttCue(c, labels)).join(''),
        shared: true,
      },
    ],
    ['/cues.json', { type: 'application/json', body: () => JSON.stringify(fanOut.recent), shared: true }],
  ]);
  let hostAllowed: (host: string | undefined) => boolean = () => false;
  const server: Server = createServer(
    relayRouter({
      text,
      events: (req, res, query, head) => fanOut.connect(req, res, query, head),
      mounts: options.mounts ?? [],
      cors: settings.cors,
      hostAllowed: (host) => hostAllowed(host),
    }),
  );
  let bound: string;
  try {
    bound = await listen(server, settings.port, settings.host);
  } catch (err) {
    fanOut.finish(false);
    throw err;
  }
  hostAllowed = hostCheck(settings.allowedHosts, bound);
  const url = `http://${bound}:${(server.address() as AddressInfo).port}`;

  let closing: Promise<void> | undefined;
  const close = () => {
    closing ??= new Promise<void>((resolve) => {
      fanOut.finish(false);
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

  const relay = captionOutput(
    'captionRelay',
    {
      utterance: (event) => fanOut.addCues(builder.add(event.words, { live: true })),
      // Within the cues' line limits: the tail, as a long utterance rolls up on screen.
      partial: (event) =>
        fanOut.partial({
          text: event.text,
          lines: tailLines(event.text, builder.layout.maxCharsPerLine, builder.layout.maxLines),
        }),
      // `end` only when the captions really ended (the writes ended).
      end: () => fanOut.finish(true),
      destroy: () => close(),
    },
    // The end of the captions is not the end of the service: viewers may still fetch the cues.
    { autoDestroy: false },
  ) as CaptionRelay;
  Object.defineProperties(relay, {
    url: { value: url, enumerable: true },
    stats: {
      value: (): CaptionRelayStats => ({ viewers: fanOut.viewers, ...fanOut.counts }),
    },
    close: { value: close },
  });
  return relay;
}
