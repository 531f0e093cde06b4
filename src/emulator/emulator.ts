// `startEmulator`: one HTTP server for every operation of the interface, Socket.IO on the
// configured paths, and a `close()` that releases every connection, timer, process and file.

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Server as SocketServer } from 'socket.io';
import { REALTIME_HTTP_PREFIXES } from '../protocol/http-paths.ts';
import type { OperationName } from '../protocol/operations.ts';
import { SOCKET_PATHS } from '../protocol/socket-events.ts';
import { handleAdmin, isAdminPath } from './admin.ts';
import { EmulatorContext } from './context.ts';
import { HttpExchange, pathnameOf } from './http-exchange.ts';
import { type HandlerResult, runHttpOperation } from './http-operation.ts';
import { JobStore } from './jobs.ts';
import { newRequestId, reject } from './rejection.ts';
import { getJob, submitBatch } from './routes/batch.ts';
import { fastHttp } from './routes/fast.ts';
import { liveHttp } from './routes/live-http.ts';
import { ttsHttp } from './routes/tts.ts';
import {
  capConnections,
  DEFAULT_SERVER_LIMITS,
  SendStallGuard,
  type ServerLimits,
  serverOptions,
  UploadRateGuard,
} from './server-limits.ts';
import { ServerSessions } from './sessions.ts';
import { authenticateHandshake, handleConnections } from './socket.ts';
import { forward, ownerOf, peekBody, type ThreadMember } from './threads.ts';
import type { Emulator, EmulatorKey, EmulatorOptions } from './types.ts';
import { listVoices } from './voices.ts';

interface Route {
  op: OperationName;
  run: (ex: HttpExchange, key: EmulatorKey) => HandlerResult;
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
  return (await startEmulatorServer(options)).emulator;
}

/** Ids a request names in its path (a batch job) or its body's first 16 bytes (a live frame). */
const JOB_READS: ReadonlySet<OperationName> = new Set(['batch.get', 'batch.getLegacy']);
const LIVE_FRAMES: ReadonlySet<OperationName> = new Set(['stt.http', 'diarization.http']);
const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The emulator; with `member`, one thread of an emulator served by several (`threads.ts`):
 * admission and fault counters shared, the port shared (SO_REUSEPORT), and a private loopback
 * server the other threads pass requests to for the jobs and live streams this one owns.
 */
export async function startEmulatorServer(
  options: EmulatorOptions,
  member?: ThreadMember,
): Promise<{ emulator: Emulator; ctx: EmulatorContext; privateAddress?: { host: string; port: number } }> {
  const ctx = new EmulatorContext(options, member);
  const jobs = new JobStore(ctx, { retentionMs: options.jobRetentionMs });
  const sessions = new ServerSessions(ctx);

  /** The Realtime HTTP operations, by path (both spellings), made once: every live frame is one. */
  const REALTIME_ROUTES = new Map<string, Route>();
  for (const prefix of REALTIME_HTTP_PREFIXES) {
    const stt: Route = { op: 'stt.http', run: (ex, key) => liveHttp(ex, key, 'stt', sessions) };
    REALTIME_ROUTES.set(`${prefix}/stt-stream`, stt);
    REALTIME_ROUTES.set(`${prefix}/realtime-asr`, stt);
    REALTIME_ROUTES.set(`${prefix}/diarization-stream`, {
      op: 'diarization.http',
      run: (ex, key) => liveHttp(ex, key, 'diarization', sessions),
    });
    REALTIME_ROUTES.set(`${prefix}/stt`, { op: 'fast.http', run: fastHttp });
    REALTIME_ROUTES.set(`${prefix}/tts`, { op: 'tts.http', run: ttsHttp });
  }

  const route = (method: string, path: string): Route | { allow: string } | undefined => {
    const segments = path.startsWith('/v1/') ? path.split('/').slice(1) : [];
    // Every path parameter is a nonempty segment: `/v1/transcribe/{job_id}/` (a V1 lookup
    // without its required `{lang}`) and `/v1/transcribe/` name no operation.
    if (
      segments[0] === 'v1' &&
      segments[1] === 'transcribe' &&
      (segments.length === 3 || segments.length === 4) &&
      !segments.slice(2).includes('')
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
    const found = REALTIME_ROUTES.get(path);
    if (found) return method === 'POST' ? found : { allow: 'POST' };
    return undefined;
  };
  const adminEnabled = options.admin ?? true;
  const serverLimits: ServerLimits = { ...DEFAULT_SERVER_LIMITS, ...options.server };
  const uploads = new UploadRateGuard(serverLimits, () => ctx.stats.rejection('UPLOAD_TOO_SLOW'));
  const sends = new SendStallGuard(serverLimits, () => ctx.stats.rejection('SEND_TIMEOUT'));

  /** The thread that owns what `req` names, when it is another one (several threads only). */
  const ownerElsewhere = async (req: IncomingMessage, op: OperationName, pathname: string) => {
    // A request another thread passed on arrives on the private server, which never asks: a
    // client sending the marking header itself is passed on as any request (it was served
    // where it landed, its job not found half the time).
    if (!member) return undefined;
    let id: string | undefined;
    if (JOB_READS.has(op)) id = safeDecode(pathname.split('/')[3] ?? '');
    else if (LIVE_FRAMES.has(op)) {
      const head = await peekBody(req, 16);
      if (head === undefined) return undefined;
      if (head.length >= 16) id = head.subarray(12, 16).toString('hex');
    }
    if (id === undefined || !(UUID_TEXT.test(id) || /^[0-9a-f]{8}$/.test(id))) return undefined;
    const owner = ownerOf(id, member.workers);
    return owner === member.index ? undefined : member.peers[owner];
  };

  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const pathname = pathnameOf(req.url);
    // Every body is watched, from its headers to its end, whatever answers it and when (a
    // frame a thread peeks at, a body drained after an early answer, an admin request).
    uploads.watch(req, res);
    if (adminEnabled && isAdminPath(pathname)) {
      void handleAdmin(ctx, req, res, pathname);
      return;
    }
    const found = route(req.method ?? 'GET', pathname);
    if (found && 'op' in found && member && (JOB_READS.has(found.op) || LIVE_FRAMES.has(found.op))) {
      void ownerElsewhere(req, found.op, pathname).then((peer) => {
        if (peer) forward(req, res, peer);
        else serve(req, res, pathname, found);
      });
      return;
    }
    serve(req, res, pathname, found);
  };

  const serve = (
    req: IncomingMessage,
    res: ServerResponse,
    pathname: string,
    found: Route | { allow: string } | undefined,
  ) => {
    if (found && 'op' in found) {
      const ex = new HttpExchange(ctx, req, res, found.op);
      void runHttpOperation(ex, (key) => found.run(ex, key));
      return;
    }
    const rejection = found
      ? reject('METHOD_NOT_ALLOWED', `${req.method} is not allowed here`, {
          status: 405,
          headers: { allow: found.allow },
        })
      : reject('NOT_FOUND', `no operation at ${pathname}`, { status: 404 });
    ctx.stats.rejection(rejection.code);
    const requestId = newRequestId();
    const body = JSON.stringify(rejection.body(requestId));
    res.writeHead(rejection.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'x-request-id': requestId,
      ...rejection.headers(),
    });
    res.end(body);
    req.resume();
  };

  const socketPaths = options.socketPaths ?? [SOCKET_PATHS.default, SOCKET_PATHS.legacy];
  // A Socket.IO server takes the upgrades whose target begins with its path and a slash
  // (engine.io's own test, on the raw target).
  const engineTargets = socketPaths.map((p) => `${p.replace(/\/$/, '')}/`);
  const forSocketIo = (req: IncomingMessage) =>
    engineTargets.some((prefix) => (req.url ?? '/').startsWith(prefix));
  const server = createServer(
    {
      ...serverOptions(serverLimits),
      // Any other request carrying `Upgrade` (curl --http2 and Java's HttpClient ask for h2c on
      // every http:// request) is served over HTTP/1.1, as RFC 9110 lets a server do: Node
      // otherwise hands it to the upgrade listeners, and it got no answer at all (Node 24.9+;
      // older Node ignores the option and such requests are refused below).
      shouldUpgradeCallback: forSocketIo,
    },
    onRequest,
  );
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    uploads.askForBodyWhenRead(req, res);
    onRequest(req, res);
  });
  capConnections(server, serverLimits);
  server.on('connection', (socket: Socket) => sends.watch(socket));
  // A request Node cannot parse gets Node's own answer (400; 431 for headers too large; 408
  // when the request timed out) and the connection closes. No 'clientError' listener of ours:
  // Node's holds its answer back when a response is already being sent on the connection (bytes
  // that do not parse after a pipelined request), where ours wrote a 400 into that response.

  const { limits } = ctx;
  const maxHttpBufferSize =
    Math.max(
      limits.fastAudioBytes,
      limits.realtimeAsrFrameBytes,
      limits.realtimeDiarizationFrameBytes,
      limits.ttsRequestBytes,
    ) + SOCKET_SLACK_BYTES;
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
  // Upgrades for no Socket.IO path would otherwise hang: refuse them (`/socket.io` and
  // `/socket.io?EIO=4` too, which no engine.io takes: they were held unanswered for good).
  /** Connections upgraded to websockets: `closeAllConnections` does not reach them. */
  const upgraded = new Set<Duplex>();
  server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
    if (!forSocketIo(req)) {
      socket.destroy();
      return;
    }
    upgraded.add(socket);
    socket.once('close', () => upgraded.delete(socket));
  });

  await new Promise<void>((resolve, rejectListen) => {
    server.once('error', rejectListen);
    // Threads of one emulator share the port: the kernel spreads connections over them.
    server.listen({ port: options.port ?? 0, host: options.host ?? '127.0.0.1', reusePort: !!member }, () => {
      server.off('error', rejectListen);
      resolve();
    });
  });
  // Requests other threads pass on for the jobs and streams this one owns (loopback only).
  let privateServer: ReturnType<typeof createServer> | undefined;
  let privateAddress: { host: string; port: number } | undefined;
  if (member) {
    privateServer = createServer(serverOptions(serverLimits), (req, res) => {
      const pathname = pathnameOf(req.url);
      // Not watched here: the thread passing it on watches its client's body, and cutting that
      // ends this request too (watched on both, a dripping body was cut and counted twice).
      serve(req, res, pathname, route(req.method ?? 'GET', pathname));
    });
    privateServer.on('connection', (socket: Socket) => sends.watch(socket));
    await new Promise<void>((resolve) => privateServer!.listen(0, '127.0.0.1', () => resolve()));
    privateAddress = { host: '127.0.0.1', port: (privateServer.address() as AddressInfo).port };
  }
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      const closed = new Promise<void>((resolve) => server.once('close', () => resolve()));
      ctx.lifecycle.close();
      uploads.close();
      sends.close();
      sessions.closeAll();
      const recognizerClosed = ctx.recognizer?.close();
      // Socket.IO closes its sockets and stops the HTTP server from accepting connections.
      for (const io of ioServers) void io.close();
      server.closeAllConnections();
      if (server.listening) server.close();
      if (privateServer) {
        privateServer.closeAllConnections();
        privateServer.close();
      }
      // A websocket closes with a handshake that a client which does not read never answers
      // (ws then waits 30 s, and so did close()): those still open after a moment are destroyed.
      await allClosed(upgraded, WEBSOCKET_CLOSE_GRACE_MS);
      for (const socket of upgraded) socket.destroy();
      await closed;
      await recognizerClosed;
    })();
    return closing;
  };

  const emulator: Emulator = {
    url,
    apiKey: ctx.keys.first.key,
    engine: ctx.engine,
    stats: () => ctx.stats.snapshot(),
    faults: { add: (rule) => ctx.faults.add(rule), clear: () => ctx.faults.clear() },
    registerTranscript: (key, text) => ctx.registerTranscript(key, text),
    voices: Object.freeze(listVoices()),
    close,
  };
  return privateAddress ? { emulator, ctx, privateAddress } : { emulator, ctx };
}

/** How long `close()` lets websockets finish their closing handshake before destroying them. */
const WEBSOCKET_CLOSE_GRACE_MS = 1000;

/** Resolves once every socket of `sockets` has closed, or after `ms`, whichever comes first. */
function allClosed(sockets: Set<Duplex>, ms: number): Promise<void> {
  if (sockets.size === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      for (const socket of sockets) socket.off('close', check);
      resolve();
    };
    const check = () => {
      // The set's own 'close' listener, added first, has removed the socket already.
      if (sockets.size === 0) done();
    };
    const timer = setTimeout(done, ms);
    for (const socket of sockets) socket.once('close', check);
  });
}

function safeDecode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}
