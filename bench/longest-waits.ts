// The longest wait of each operation, with default options, against servers that accept and
// never answer (issue 23): a raw node:http server that reads each request and never answers, a
// Socket.IO server whose login (CONNECT) never completes, and one that lets clients in and never
// acknowledges an event. Every operation runs at once, each on a client of its own; the table
// gives what each took beside its documented bound (DEFAULT_DEADLINES, the client's timeouts)
// and what ended it. Several defaults are minutes (batch.submit: 30 min bound): run it in the
// background.
//
//   node bench/longest-waits.ts [--only REGEX] [--json]

import { once } from 'node:events';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Server } from 'socket.io';
import { createClient, DEFAULT_DEADLINES, type SpeechClient } from '../src/client/index.ts';
import { DEFAULT_LIVE_END_MS } from '../src/client/live.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { randomUuid } from '../src/protocol/uuid.ts';

/** The stalled servers. */
type Stall = 'http' | 'socket-login' | 'socket-ack';

export interface WaitCase {
  operation: string;
  stall: Stall;
  /** The documented bound, ms, and where it is documented. */
  boundMs: number;
  bound: string;
  /** `ctx.endedMs`: a live session says when it was over at the service too. */
  run(client: SpeechClient, ctx: { endedMs?: number }): Promise<unknown>;
}

export interface WaitResult {
  operation: string;
  stall: Stall;
  measuredMs: number;
  boundMs: number;
  bound: string;
  /** The code of what ended it (`ok` when it succeeded, which a stalled server cannot allow). */
  code: string;
  /** The code of the last failure before it (a deadline's cause). */
  cause?: string;
  attempts?: number;
  /** A live session: until it was over at the service too (`session.ended`). */
  endedMs?: number;
  /** Measured within the bound (and {@link SLACK_MS} of timer lateness). */
  withinBound: boolean;
}

const wav = encodeWav(Buffer.alloc(32_000), 16_000, 1); // 1 s of silence: nobody listens anyway
const pcm = Buffer.alloc(3_200);
const text = 'Nobody will ever answer this.';
const D = DEFAULT_DEADLINES;
const min = (ms: number) =>
  ms >= 3_600_000 ? `${ms / 3_600_000} h` : ms >= 60_000 ? `${ms / 60_000} min` : `${ms / 1000} s`;
/** Timers fire a little late under load: a bound is kept if met within this. */
const SLACK_MS = 1_000;

/**
 * A live session's first frame; `ctx.endedMs` once the session was over (a failed session is
 * ended at the service, bounded by endTimeoutMs), in the background of the measured failure.
 */
function liveFirstFrame(kind: 'stt' | 'diarization', transport: 'http' | 'socketio') {
  return async (client: SpeechClient, ctx: { endedMs?: number; ended?: Promise<void> }) => {
    const session = client.live.open(kind, { transport, language: 'en' });
    const started = performance.now();
    ctx.ended = session.ended.then(() => {
      ctx.endedMs = performance.now() - started;
    });
    await session.send(pcm);
  };
}

function cases(): WaitCase[] {
  const http: WaitCase[] = [
    {
      operation: 'batch.submit',
      stall: 'http',
      boundMs: D.batchSubmit,
      bound: `deadlines.batchSubmit ${min(D.batchSubmit)}`,
      run: (c) => c.batch.submit(wav, { language: 'en' }),
    },
    {
      operation: 'batch.get',
      stall: 'http',
      boundMs: D.batchGet,
      bound: `deadlines.batchGet ${min(D.batchGet)}`,
      run: (c) => c.batch.get(randomUuid()),
    },
    {
      operation: 'batch.getLegacy',
      stall: 'http',
      boundMs: D.batchGet,
      bound: `deadlines.batchGet ${min(D.batchGet)}`,
      run: (c) => c.batch.getLegacy(randomUuid()),
    },
    {
      operation: 'batch.wait',
      stall: 'http',
      boundMs: D.batchWait,
      bound: `deadlines.batchWait ${min(D.batchWait)} (each poll: what is left of it)`,
      run: (c) => c.batch.wait(randomUuid()),
    },
    {
      operation: 'fast.http',
      stall: 'http',
      boundMs: D.fast,
      bound: `deadlines.fast ${min(D.fast)}`,
      run: (c) => c.fast.transcribeFinal(wav, { language: 'en' }),
    },
    {
      operation: 'tts.synthesize http',
      stall: 'http',
      boundMs: D.ttsStart,
      bound: `deadlines.ttsStart ${min(D.ttsStart)}`,
      run: (c) => c.tts.synthesize({ text }),
    },
    {
      operation: 'tts.synthesizeToBuffer http',
      stall: 'http',
      boundMs: D.ttsBuffer,
      bound: `deadlines.ttsBuffer ${min(D.ttsBuffer)}`,
      run: (c) => c.tts.synthesizeToBuffer({ text }),
    },
    ...(['stt', 'diarization'] as const).map(
      (kind): WaitCase => ({
        operation: `live ${kind} first frame http`,
        stall: 'http',
        boundMs: D.liveStart,
        bound: `deadlines.liveStart ${min(D.liveStart)} (+ endTimeoutMs ${DEFAULT_LIVE_END_MS / 1000} s to end it)`,
        run: liveFirstFrame(kind, 'http'),
      }),
    ),
  ];
  const socket = (stall: Stall): WaitCase[] => [
    {
      operation: 'fast.socket',
      stall,
      boundMs: D.fast,
      bound: `deadlines.fast ${min(D.fast)}`,
      run: (c) => c.fast.transcribeFinal(wav, { language: 'en', transport: 'socketio' }),
    },
    {
      operation: 'tts.synthesize socketio',
      stall,
      boundMs: D.ttsStart,
      bound: `deadlines.ttsStart ${min(D.ttsStart)}`,
      run: (c) => c.tts.synthesize({ text, transport: 'socketio' }),
    },
    {
      operation: 'tts.synthesizeToBuffer socketio',
      stall,
      boundMs: D.ttsBuffer,
      bound: `deadlines.ttsBuffer ${min(D.ttsBuffer)}`,
      run: (c) => c.tts.synthesizeToBuffer({ text, transport: 'socketio' }),
    },
    {
      operation: 'tts.listVoices',
      stall,
      boundMs: D.voices,
      bound: `deadlines.voices ${min(D.voices)}`,
      run: (c) => c.tts.listVoices(),
    },
    ...(['stt', 'diarization'] as const).map(
      (kind): WaitCase => ({
        operation: `live ${kind} first frame socketio`,
        stall,
        boundMs: D.liveStart,
        bound: `deadlines.liveStart ${min(D.liveStart)} (+ endTimeoutMs ${DEFAULT_LIVE_END_MS / 1000} s to end it)`,
        run: liveFirstFrame(kind, 'socketio'),
      }),
    ),
  ];
  return [...http, ...socket('socket-login'), ...socket('socket-ack')];
}

/** A node:http server that reads each request to its end and never answers. */
async function stalledHttp(): Promise<{ url: string; close(): Promise<void> }> {
  // No server-side timeout may answer for it (Node's requestTimeout sends a 408 after 300 s).
  const server = createServer({ requestTimeout: 0, keepAliveTimeout: 0 }, (req) => req.resume());
  server.timeout = 0;
  return listen(server, async () => {
    server.closeAllConnections();
    server.close();
  });
}

/** A Socket.IO server whose login never completes (`login`), or that never acknowledges (`ack`). */
async function stalledSocket(mode: 'login' | 'ack'): Promise<{ url: string; close(): Promise<void> }> {
  const http = createServer();
  const io = new Server(http, { transports: ['websocket'], maxHttpBufferSize: 64 * 1024 * 1024 });
  if (mode === 'login') io.use(() => {}); // next() is never called: no CONNECT answer
  return listen(http, async () => {
    io.disconnectSockets(true);
    http.closeAllConnections();
    await io.close();
  });
}

async function listen(server: HttpServer, close: () => Promise<void>) {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close };
}

export async function runLongestWaits(
  options: { only?: RegExp; log?: (line: string) => void } = {},
): Promise<WaitResult[]> {
  const log = options.log ?? (() => {});
  const selected = cases().filter((c) => !options.only || options.only.test(`${c.operation} ${c.stall}`));
  const servers = {
    http: await stalledHttp(),
    'socket-login': await stalledSocket('login'),
    'socket-ack': await stalledSocket('ack'),
  };
  const clients: SpeechClient[] = [];
  const t0 = performance.now();
  try {
    return await Promise.all(
      selected.map(async (c): Promise<WaitResult> => {
        // Defaults throughout: only the address and a key are given.
        const client = createClient({ apiUrl: servers[c.stall].url, apiKey: 'stalled-server-key', env: {} });
        clients.push(client);
        const started = performance.now();
        let code = 'ok';
        let cause: string | undefined;
        let attempts: number | undefined;
        const ctx: { endedMs?: number; ended?: Promise<void> } = {};
        try {
          await c.run(client, ctx);
        } catch (err) {
          const e = err as { code?: string; name?: string; cause?: { code?: string }; attempts?: number };
          code = e.code ?? e.name ?? String(err);
          cause = e.cause?.code;
          attempts = e.attempts;
        }
        const measuredMs = performance.now() - started;
        await ctx.ended;
        const { endedMs } = ctx;
        const result: WaitResult = {
          operation: c.operation,
          stall: c.stall,
          measuredMs: Math.round(measuredMs),
          boundMs: c.boundMs,
          bound: c.bound,
          code,
          ...(cause ? { cause } : {}),
          ...(attempts !== undefined ? { attempts } : {}),
          ...(endedMs !== undefined ? { endedMs: Math.round(endedMs) } : {}),
          withinBound: measuredMs <= c.boundMs + SLACK_MS,
        };
        log(
          `[${((performance.now() - t0) / 1000).toFixed(1)} s] ${c.operation} (${c.stall}): ${fmt(measuredMs)}, ${code}${cause ? ` (cause ${cause})` : ''}`,
        );
        return result;
      }),
    );
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    for (const s of Object.values(servers)) await s.close();
  }
}

const fmt = (ms: number) =>
  ms >= 60_000 ? `${(ms / 60_000).toFixed(2)} min` : `${(ms / 1000).toFixed(2)} s`;

export function formatWaits(results: readonly WaitResult[]): string {
  const rows = [
    [
      'operation',
      'stalled server',
      'measured',
      'documented bound',
      'ended by',
      'attempts',
      'session over at',
      'within',
    ],
    ...results.map((r) => [
      r.operation,
      r.stall,
      fmt(r.measuredMs),
      r.bound,
      `${r.code}${r.cause ? ` (cause ${r.cause})` : ''}`,
      r.attempts === undefined ? '' : String(r.attempts),
      r.endedMs === undefined ? '' : fmt(r.endedMs),
      r.withinBound ? 'yes' : 'NO',
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const at = args.indexOf('--only');
  const results = await runLongestWaits({
    ...(at >= 0 ? { only: new RegExp(args[at + 1]!, 'i') } : {}),
    log: (line) => console.error(line),
  });
  console.log(args.includes('--json') ? JSON.stringify(results, null, 2) : formatWaits(results));
}
