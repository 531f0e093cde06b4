// A stand-in for YouTube's live caption ingestion, strict about the documented format: every
// POST is checked (text/plain UTF-8 body of `<UTC time>` and text lines, `seq` in the query,
// `seq` + 1 for new data, the same `seq` and the same body for a retry) and each rule broken is
// recorded. Faults are injected per attempt: error statuses, answers that never come, connections
// reset before or after the captions were taken. A retry of captions already taken is answered
// 200 and not taken twice, as the real ingestion dedupes by `seq`.

import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A caption the receiver took: its seq, time line and text line, and when it arrived. */
export interface ReceivedCaption {
  seq: number;
  time: string;
  text: string;
  /** Date.now() when it was taken. */
  at: number;
}

/** What the receiver does with one attempt (a POST): take it or not, and how it answers. */
export type Fault =
  /** Answer this status without taking the captions (Retry-After when given). */
  | { status: number; retryAfter?: string }
  /** Take the captions, then answer this status (the sender cannot know they were taken). */
  | { takeThenStatus: number }
  /** Take the captions and never answer. */
  | 'hang'
  /** Reset the connection before reading the body. */
  | 'reset-before'
  /** Take the captions, then reset the connection. */
  | 'reset-after';

export interface CaptionReceiver {
  /** The ingestion URL, `http://127.0.0.1:PORT/closedcaption?cid=...`. */
  url: string;
  cid: string;
  /** Captions taken, in order, each once. */
  captions: ReceivedCaption[];
  /** POSTs received (attempts), in order. */
  attempts: { seq: number; body: string }[];
  /** Every rule a POST broke. */
  violations: string[];
  close(): Promise<void>;
}

const TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}(?: region:\S+)?$/;

/**
 * Start the receiver on a free port. `fault(seq, attempt)` (attempt 1 for the first POST of a
 * seq) decides what to do with each POST; default: take it, answer 200 with the server time.
 */
export async function startCaptionReceiver(
  fault: (seq: number, attempt: number) => Fault | undefined = () => undefined,
): Promise<CaptionReceiver> {
  const cid = `cid-${Math.random().toString(36).slice(2)}-secret`;
  const captions: ReceivedCaption[] = [];
  const attempts: { seq: number; body: string }[] = [];
  const violations: string[] = [];
  /** The body first sent under each seq, and whether it was taken. */
  const bySeq = new Map<number, { body: string; taken: boolean }>();
  /** POSTs of each seq so far. */
  const tries = new Map<number, number>();
  let lastSeq: number | undefined;
  let lastTime = '';

  const take = (seq: number, body: string) => {
    const entry = bySeq.get(seq)!;
    if (entry.taken) return; // the retry of captions already taken: not taken twice
    entry.taken = true;
    const lines = body.slice(0, -1).split('\n');
    for (let i = 0; i + 1 < lines.length; i += 2) {
      captions.push({ seq, time: lines[i]!, text: lines[i + 1]!, at: Date.now() });
    }
  };

  const check = (req: IncomingMessage, url: URL, body: string): number | undefined => {
    const problems: string[] = [];
    if (req.method !== 'POST') problems.push(`method ${req.method}`);
    if (url.pathname !== '/closedcaption') problems.push(`path ${url.pathname}`);
    if (url.searchParams.get('cid') !== cid) problems.push('cid missing or changed');
    if (url.searchParams.getAll('seq').length !== 1) problems.push('not exactly one seq');
    const seq = Number(url.searchParams.get('seq'));
    if (!/^\d+$/.test(url.searchParams.get('seq') ?? '')) problems.push(`seq ${url.searchParams.get('seq')}`);
    if (!/^text\/plain(;\s*charset=utf-8)?$/i.test(req.headers['content-type'] ?? ''))
      problems.push(`content-type ${req.headers['content-type']}`);
    if (!body.endsWith('\n')) problems.push('body does not end with a line break');
    const seen = Number.isNaN(seq) ? undefined : bySeq.get(seq);
    if (seen) {
      // A retry: the same seq must carry the same captions.
      if (seen.body !== body) problems.push(`seq ${seq} sent again with other captions`);
    } else {
      const lines = body.slice(0, -1).split('\n');
      if (lines.length % 2 !== 0 || lines.length === 0)
        problems.push(`${lines.length} lines: not time and text pairs`);
      for (let i = 0; i + 1 < lines.length; i += 2) {
        const time = lines[i]!;
        const text = lines[i + 1]!;
        if (!TIME.test(time)) problems.push(`time line ${JSON.stringify(time)}`);
        else {
          if (Date.parse(`${time.slice(0, 23)}Z`) > Date.now() + 1000)
            problems.push(`time ${time} in the future`);
          if (time.slice(0, 23) < lastTime) problems.push(`time ${time} before ${lastTime}`);
          lastTime = time.slice(0, 23);
        }
        if (text.trim() === '' || TIME.test(text)) problems.push(`text line ${JSON.stringify(text)}`);
      }
      if (!Number.isNaN(seq)) {
        if (lastSeq !== undefined && seq !== lastSeq + 1) problems.push(`seq ${seq} after ${lastSeq}`);
        bySeq.set(seq, { body, taken: false });
        lastSeq = seq;
      }
    }
    for (const p of problems) violations.push(`POST seq=${url.searchParams.get('seq')}: ${p}`);
    return problems.length === 0 ? seq : undefined;
  };

  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://receiver');
    const seq = Number(url.searchParams.get('seq'));
    const attempt = (tries.get(seq) ?? 0) + 1;
    tries.set(seq, attempt);
    const f = fault(seq, attempt);
    if (f === 'reset-before') {
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    const body = raw.toString('utf8');
    if (!Buffer.from(body, 'utf8').equals(raw)) violations.push(`POST seq=${seq}: body is not UTF-8`);
    attempts.push({ seq, body });
    const ok = check(req, url, body);
    if (ok === undefined) {
      res.writeHead(400).end();
      return;
    }
    if (f && typeof f === 'object' && 'status' in f) {
      res.writeHead(f.status, f.retryAfter ? { 'retry-after': f.retryAfter } : {}).end();
      return;
    }
    take(ok, body);
    if (f === 'hang') return; // answered never; closed with the server
    if (f === 'reset-after') {
      req.socket.destroy();
      return;
    }
    if (f && typeof f === 'object') {
      res.writeHead(f.takeThenStatus).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`${new Date().toISOString().slice(0, 23)}\n`);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/closedcaption?cid=${cid}`,
    cid,
    captions,
    attempts,
    violations,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
