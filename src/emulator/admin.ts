// The admin endpoint under `/_emulator/` (outside every path of the interface): statistics as
// JSON and fault rules added, listed and cleared over HTTP, so tests in any language can drive
// the emulator as Node tests drive `emulator.stats()` and `emulator.faults`. Loopback peers only.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIPv4 } from 'node:net';
import type { EmulatorContext } from './context.ts';
import type { ActiveFaultRule } from './faults.ts';
import { EmulatorJsonError, faultRuleFromJson, faultRulesFromJson, parseKeyedJson } from './options-json.ts';
import { newRequestId, Rejection, reject } from './rejection.ts';
import type { FaultRule } from './types.ts';

/** No operation of the interface lives under it (`/v1`, `/http`, `/realtime`, `/socket.io`). */
export const ADMIN_PREFIX = '/_emulator';

/** The largest fault-rule body accepted (413 above it). */
export const ADMIN_BODY_LIMIT = 64 * 1024;

/** Shown instead of a rule's API key: the admin endpoint takes no key, so it never shows one. */
export const REDACTED_KEY = '(redacted)';

export const isAdminPath = (pathname: string): boolean =>
  pathname === ADMIN_PREFIX || pathname.startsWith(`${ADMIN_PREFIX}/`);

/**
 * Whether a socket's peer address is loopback (127.0.0.0/8, ::1, or either mapped into IPv6).
 * Decided from the connection itself, never from a header a client or proxy could set.
 */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false;
  const lower = address.toLowerCase();
  const v4 = lower.startsWith('::ffff:') ? lower.slice(7) : lower;
  if (isIPv4(v4)) return v4.startsWith('127.');
  return lower === '::1' || lower === '0:0:0:0:0:0:0:1';
}

/** Answer one request under `ADMIN_PREFIX`. Admin requests are not counted in the statistics. */
export async function handleAdmin(
  ctx: EmulatorContext,
  req: IncomingMessage,
  res: ServerResponse,
  pathname: string,
): Promise<void> {
  try {
    // Loopback only, and never on behalf of a web page: a browser sends `Origin` with every
    // cross-origin request and every POST/DELETE, which keeps other sites (and DNS rebinding)
    // from changing faults through a developer's browser.
    if (!isLoopbackAddress(req.socket.remoteAddress))
      throw reject('ADMIN_FORBIDDEN', 'the admin endpoint answers loopback clients only', { status: 403 });
    if (req.headers.origin !== undefined)
      throw reject('ADMIN_FORBIDDEN', 'the admin endpoint does not answer web pages (Origin was sent)', {
        status: 403,
      });
    const method = req.method ?? 'GET';
    const path = pathname.slice(ADMIN_PREFIX.length);
    if (path === '/stats') {
      if (method !== 'GET') throw notAllowed(method, 'GET');
      // Several threads: the statistics of all of them, summed.
      return send(req, res, 200, ctx.member ? await ctx.member.ask({ type: 'stats' }) : ctx.stats.snapshot());
    }
    if (path === '/faults') {
      if (method === 'GET') return send(req, res, 200, { faults: ctx.faults.list().map(shown) });
      if (method === 'DELETE')
        return send(req, res, 200, {
          cleared: ctx.member ? await ctx.member.ask<number>({ type: 'faults.clear' }) : ctx.faults.clear(),
        });
      if (method !== 'POST') throw notAllowed(method, 'GET, POST, DELETE');
      const body = parseJson(await readBody(req));
      // All or nothing: every rule is checked before any is added.
      const rules: FaultRule[] = Array.isArray(body) ? faultRulesFromJson(body) : [faultRuleFromJson(body)];
      // Several threads: the rules are in force in every thread before the answer.
      const ids = ctx.member
        ? await ctx.member.ask<number[]>({ type: 'faults.add', rules })
        : rules.map((rule) => ctx.faults.add(rule).id);
      return send(req, res, 201, Array.isArray(body) ? { ids } : { id: ids[0] });
    }
    const one = /^\/faults\/(\d{1,15})$/.exec(path);
    if (one) {
      if (method !== 'DELETE') throw notAllowed(method, 'DELETE');
      const id = Number(one[1]);
      const removed = ctx.member
        ? (await ctx.member.ask<number>({ type: 'faults.remove', id })) > 0
        : ctx.faults.remove(id);
      if (!removed) throw reject('NOT_FOUND', `no fault rule ${id}`, { status: 404 });
      return send(req, res, 200, { removed: id });
    }
    throw reject('NOT_FOUND', `no admin resource at ${pathname}`, { status: 404 });
  } catch (err) {
    const rejection = asRejection(err);
    send(req, res, rejection.status, rejection.body(newRequestId()), rejection.headers());
  }
}

/** A rule as listed: its key replaced, so the admin endpoint never shows an API key. */
function shown(active: ActiveFaultRule): ActiveFaultRule {
  const rule = active.rule.key === undefined ? active.rule : { ...active.rule, key: REDACTED_KEY };
  return { ...active, rule };
}

function notAllowed(method: string, allow: string): Rejection {
  return reject('METHOD_NOT_ALLOWED', `${method} is not allowed here`, { status: 405, headers: { allow } });
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const type = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
  if (type !== 'application/json')
    throw reject('UNSUPPORTED_MEDIA_TYPE', 'send fault rules as application/json', { status: 415 });
  const declared = Number(req.headers['content-length']);
  if (declared > ADMIN_BODY_LIMIT) throw bodyTooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > ADMIN_BODY_LIMIT) throw bodyTooLarge();
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

const bodyTooLarge = (): Rejection =>
  reject('PAYLOAD_TOO_LARGE', `fault rules over ${ADMIN_BODY_LIMIT} bytes`, { status: 413 });

function parseJson(body: Buffer): unknown {
  try {
    return parseKeyedJson(body.toString('utf8'));
  } catch (err) {
    throw reject('VALIDATION_INVALID_FORMAT', `the body is not JSON: ${(err as Error).message}`, {
      status: 400,
    });
  }
}

function asRejection(err: unknown): Rejection {
  if (err instanceof EmulatorJsonError)
    return reject('VALIDATION_INVALID_FORMAT', err.message, { status: 400 });
  // The injector's own checks (they agree with the JSON checks; this is the backstop).
  if (err instanceof RangeError || err instanceof TypeError)
    return reject('VALIDATION_INVALID_FORMAT', err.message, { status: 400 });
  if (err instanceof Rejection) return err;
  return reject('SERVER_INTERNAL', `admin endpoint error: ${(err as Error)?.message ?? err}`, {
    status: 500,
  });
}

/** Send a JSON answer; a request body not read yet is drained, so the connection stays usable. */
function send(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.headersSent || res.destroyed) return;
  const body = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...headers,
  });
  res.end(body);
  if (!req.complete) req.resume();
}
