// Servers that misbehave on purpose, for the client's bounds: an HTTP server that reads each
// request and answers as told (by default never), and a Socket.IO server set up by the test
// (a login that never completes, events never acknowledged, refusals by `error` events). Both
// close when the test ends.

import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from 'socket.io';

interface Context {
  after(fn: () => unknown): void;
}

/** An HTTP server that reads each request and answers as `answer` says (by default: never). */
export async function httpServer(
  t: Context,
  answer: (req: IncomingMessage, res: ServerResponse) => void = () => {},
): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => answer(req, res));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests: () => requests };
}

/** A Socket.IO server set up by `setup` (its middleware, its connections' handlers). */
export async function socketServer(t: Context, setup: (io: Server) => void): Promise<string> {
  const http = createServer();
  const io = new Server(http, { transports: ['websocket'] });
  setup(io);
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  t.after(async () => {
    io.disconnectSockets(true);
    await io.close();
  });
  return `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
}
