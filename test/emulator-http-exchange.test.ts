// One HTTP exchange of the emulator on its own: what it does with a request whose client went
// away before the exchange was made (a thread of several passes a live frame on only after
// peeking at its first bytes, so the client may be gone by the time the frame is read).

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { test } from 'node:test';
import { EmulatorContext } from '../src/emulator/context.ts';
import { HttpExchange } from '../src/emulator/http-exchange.ts';

/** A request whose client sent its headers and a few body bytes, then reset the connection. */
async function abandonedRequest(t: {
  after: (fn: () => unknown) => void;
}): Promise<{ req: IncomingMessage; res: ServerResponse }> {
  const server = createServer();
  t.after(() => server.close());
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const arrived = once(server, 'request') as Promise<[IncomingMessage, ServerResponse]>;
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  client.write('POST /http/stt-stream HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc');
  const [req, res] = await arrived;
  const closed = once(res, 'close');
  client.resetAndDestroy();
  await closed;
  assert.ok(req.destroyed && !req.complete, 'the request was abandoned');
  return { req, res };
}

/** Whether `promise` has settled once everything already due has run. */
async function settled(promise: Promise<unknown>): Promise<'resolved' | 'rejected' | 'pending'> {
  const state = promise.then(
    () => 'resolved' as const,
    () => 'rejected' as const,
  );
  const later = new Promise<'pending'>((resolve) =>
    setImmediate(() => setImmediate(() => resolve('pending'))),
  );
  return Promise.race([state, later]);
}

test('reading the body of a request its client already abandoned fails instead of waiting for good', async (t) => {
  const ctx = new EmulatorContext({});
  t.after(() => ctx.lifecycle.close());
  const { req, res } = await abandonedRequest(t);
  const ex = new HttpExchange(ctx, req, res, 'stt.http');
  const read = ex.readBody(1024, 'realtime_asr_frame_bytes', 'the frame body', { bytes: 16, seen: () => {} });
  assert.equal(await settled(read), 'rejected');
  assert.equal(req.listenerCount('data'), 0, 'no listener left on the request');
});

test('an exchange made for a response already closed is gone, and its abort signal says so', async (t) => {
  const ctx = new EmulatorContext({});
  t.after(() => ctx.lifecycle.close());
  const { req, res } = await abandonedRequest(t);
  const ex = new HttpExchange(ctx, req, res, 'stt.http');
  assert.equal(ex.gone, true);
  // A wait on the signal (a delay or stall fault, a response window) ends instead of lasting.
  assert.equal(ex.signal.aborted, true);
});
