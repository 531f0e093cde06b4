// The caption relay's HTTP routes: which Host names it answers, what other origins may read
// (CORS), the fixed pages, `/events`, and mounts that serve a whole path prefix (an HLS
// presentation under `/hls/`). Everything else is 404; a method other than GET or HEAD is 405.

import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { SECURITY_HEADERS } from './overlay-page.ts';

/** A fixed text the relay serves, made when asked. */
export interface TextRoute {
  type: string;
  body: () => string;
  /** Other origins may read it (with `cors`). */
  shared?: boolean;
}

/** Everything under one path prefix, served by its own handler (GET and HEAD only). */
export interface RelayMount {
  /** Starts and ends with `/`: `/hls/`. */
  prefix: string;
  /**
   * Answer the request for `path` (the part after the prefix, still percent-encoded). The CORS
   * headers to add are given: a mount is for players, on any origin `cors` allows.
   */
  serve(req: IncomingMessage, res: ServerResponse, path: string, corsHeaders: Record<string, string>): void;
}

/** What the router serves, and to whom. */
export interface RelayRoutes {
  text: ReadonlyMap<string, TextRoute>;
  /** `/events`, shared with other origins. */
  events(req: IncomingMessage, res: ServerResponse, query: URLSearchParams, head: boolean): void;
  mounts?: readonly RelayMount[];
  /** An origin or `*` whose pages may read the shared routes and the mounts. */
  cors?: string | undefined;
  /** Whether a request's Host header names this relay (DNS rebinding). */
  hostAllowed(host: string | undefined): boolean;
}

/** The request handler of a relay serving `routes`. */
export function relayRouter(routes: RelayRoutes): RequestListener {
  // What another site's page may read: the captions, not the page or its script.
  const corsHeaders: Record<string, string> = routes.cors
    ? { 'access-control-allow-origin': routes.cors }
    : {};
  const mounts = routes.mounts ?? [];
  const shared = (path: string) =>
    path === '/events' ||
    routes.text.get(path)?.shared === true ||
    mounts.some((m) => path.startsWith(m.prefix));
  return (req, res) => {
    if (!routes.hostAllowed(req.headers.host)) {
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
    if (req.method === 'OPTIONS' && routes.cors && shared(path)) {
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
    const text = routes.text.get(path);
    if (text) {
      res
        .writeHead(200, {
          ...SECURITY_HEADERS,
          ...(text.shared ? corsHeaders : {}),
          'content-type': text.type,
          'cache-control': 'no-store',
        })
        .end(req.method === 'HEAD' ? undefined : text.body());
      return;
    }
    if (path === '/events') return routes.events(req, res, searchParams, req.method === 'HEAD');
    const mount = mounts.find((m) => path.startsWith(m.prefix));
    if (mount) return mount.serve(req, res, path.slice(mount.prefix.length), corsHeaders);
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
  };
}
