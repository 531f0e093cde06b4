// `startEmulator`: one HTTP server for every operation of the interface, Socket.IO on the
// configured paths, and a `close()` that releases every connection, timer, process and file.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { Server as SocketServer } from 'socket.io';
import { REALTIME_HTTP_PREFIXES } from '../protocol/http-paths.ts';
import type { OperationName } from '../protocol/operations.ts';
import { SOCKET_PATHS } from '../protocol/socket-events.ts';
import { handleAdmin, isAdminPath } from './admin.ts';
import { EmulatorContext } from './context.ts';
import { HttpExchange } from './http-exchange.ts';
import { runHttpOperation } from './http-operation.ts';
import { JobStore } from './jobs.ts';
import { newRequestId, reject } from './rejection.ts';
import { getJob, submitBatch } from './routes/batch.ts';
import { fastHttp } from './routes/fast.ts';
import { liveHttp } from './routes/live-http.ts';
import { ttsHttp } from './routes/tts.ts';
import {
  capConnections,
  DEFAULT_SERVER_LIMITS,
  type ServerLimits,
  serverOptions,
  UploadRateGuard,
} from './server-limits.ts';
import { LiveSessions } from './sessions.ts';
import { authenticateHandshake, handleConnections } from './socket.ts';
import type { Emulator, EmulatorKey, EmulatorOptions } from './types.ts';
import { listVoices } from './voices.ts';

interface Route {
  op: OperationName;
  run: (ex: HttpExchange, key: EmulatorKey) => Promise<void>;
}

/**
 * engine.io refuses a message over its buffer size by closing the connection, before we could
 * answer 413: the slack lets a payload somewhat over its limit (plus the event's framing) reach
 * the emulator's own 413. Beyond it the connection drops (DECISIONS, "does not make faithful").
 */
const SOCKET_SLACK_BYTES = 1024 * 1024;

/**
 * Start the service emulator: the whole interface over HTTP and Socket.IO on `host:port`, with
 * fault injection and statistics. Resolves once it listens; `close()` it when done.
 * @throws RangeError or TypeError when an option is invalid (a limit, a fault rule, a language of
 * `asrModels`).
 */
export async function startEmulator(options: EmulatorOptions = {}): Promise<Emulator> {
  const ctx = new EmulatorContext(options);
  const jobs = new JobStore(ctx, { retentionMs: options.jobRetentionMs });
  const sessions = new LiveSessions(ctx);

  const route = (method: string, path: string): Route | { allow: string } | undefined => {
    const segments = path.split('/').slice(1);
    if (
      segments[0] === 'v1' &&
      segments[1] === 'transcribe' &&
      (segments.length === 3 || segments.length === 4)
    ) {
      const a = safeDecode(segments[2]!);
      if (segments.length === 3) {
        if (method === 'POST') return { op: 'batch.submit', run: (ex, key) => submitBatch(ex, key, a, jobs) };
        if (method === 'GET') return { op: 'batch.get', run: (ex, key) => getJob(ex, key, a, false, jobs) };
        return { allow: 'GET, POST' };
      }
      if (method === 'GET')
        return { op: 'batch.getLegacy', run: (ex, key) => getJob(ex, key, a, true, jobs) };
      return { allow: 'GET' };
    }
    for (const prefix of REALTIME_HTTP_PREFIXES) {
      if (!path.startsWith(`${prefix}/`)) continue;
      const name = path.slice(prefix.length + 1);
      let found: Route | undefined;
      if (name === 'stt-stream' || name === 'realtime-asr')
        found = { op: 'stt.http', run: (ex, key) => liveHttp(ex, key, 'asr', sessions) };
      else if (name === 'diarization-stream')
        found = {
          op: 'diarization.http',
          run: (ex, key) => liveHttp(ex, key, 'diarization', sessions),
        };
      else if (name === 'stt') found = { op: 'fast.http', run: fastHttp };
      else if (name === 'tts') found = { op: 'tts.http', run: ttsHttp };
      if (found) return method === 'POST' ? found : { allow: 'POST' };
    }
    return undefined;
  };

  const adminEnabled = options.admin ?? true;
  const serverLimits: ServerLimits = { ...DEFAULT_SERVER_LIMITS, ...options.server };
  const uploads = new UploadRateGuard(serverLimits, () => ctx.stats.rejection('UPLOAD_TOO_SLOW'));

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://emulator.invalid');
    if (adminEnabled && isAdminPath(url.pathname)) {
      void handleAdmin(ctx, req, res, url.pathname);
      return;
    }
    const found = route(req.method ?? 'GET', url.pathname);
    if (found && 'op' in found) {
      uploads.watch(req, res);
      const ex = new HttpExchange(ctx, req, res, found.op, url);
      void runHttpOperation(ex, (key) => found.run(ex, key));
      return;
    }
    const rejection = found
      ? reject('METHOD_NOT_ALLOWED', `${req.method} is not allowed here`, {
          status: 405,
          headers: { allow: found.allow },
        })
      : reject('NOT_FOUND', `no operation at ${url.pathname}`, { status: 404 });
    ctx.stats.rejection(rejection.code);
    const body = JSON.stringify(rejection.body(newRequestId()));
    res.writeHead(rejection.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...rejection.headers(),
    });
    res.end(body);
    req.resume();
  };

  const server = createServer(serverOptions(serverLimits), onRequest);
  capConnections(server, serverLimits);
  server.on('clientError', (_err, socket: Duplex) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
    socket.destroy();
  });

  const { limits } = ctx;
  const maxHttpBufferSize =
    Math.max(
      limits.fastAudioBytes,
      limits.realtimeAsrFrameBytes,
      limits.realtimeDiarizationFrameBytes,
      limits.ttsRequestBytes,
    ) + SOCKET_SLACK_BYTES;
  const socketPaths = options.socketPaths ?? [SOCKET_PATHS.default, SOCKET_PATHS.legacy];
  const ioServers = socketPaths.map((path) => {
    const io = new SocketServer(server, {
      path,
      // The interface's handshake is websocket; long-polling is not offered.
      transports: ['websocket'],
      serveClient: false,
      maxHttpBufferSize,
      destroyUpgrade: false,
      cors: { origin: true },
    });
    authenticateHandshake(ctx, io);
    handleConnections(ctx, io, sessions);
    return io;
  });
  // Upgrades for no Socket.IO path would otherwise hang: refuse them.
  server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
    const path = (req.url ?? '/').split('?')[0]!;
    if (!socketPaths.some((p) => path === p || path.startsWith(`${p}/`))) socket.destroy();
  });

  await new Promise<void>((resolve, rejectListen) => {
    server.once('error', rejectListen);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', rejectListen);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      const closed = new Promise<void>((resolve) => server.once('close', () => resolve()));
      ctx.lifecycle.close();
      uploads.close();
      sessions.closeAll();
      // Socket.IO closes its sockets and stops the HTTP server from accepting connections.
      for (const io of ioServers) void io.close();
      server.closeAllConnections();
      if (server.listening) server.close();
      await closed;
    })();
    return closing;
  };

  return {
    url,
    apiKey: ctx.keys.first.key,
    stats: () => ctx.stats.snapshot(),
    faults: { add: (rule) => ctx.faults.add(rule), clear: () => ctx.faults.clear() },
    registerTranscript: (key, text) => ctx.registerTranscript(key, text),
    voices: Object.freeze(listVoices()),
    close,
  };
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
