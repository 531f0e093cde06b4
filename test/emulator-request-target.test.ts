// The emulator routes by a request's path without parsing a URL when the target is a plain
// path (every live frame); anything else goes through the URL parser, so both give one path.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { type IncomingMessage, request } from 'node:http';
import { test } from 'node:test';
import { pathnameOf, requestUrl } from '../src/emulator/http-exchange.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import { call, uuid } from './helpers/emulator-fixtures.ts';

test('pathnameOf gives the path the URL parser gives, for plain and unusual targets', () => {
  const targets = [
    '/http/stt-stream',
    '/v1/transcribe/en',
    '/v1/transcribe/0b6e2f1c-8a56-4c1e-9a63-6f0c2c7b1a11',
    '/http/./stt-stream',
    '/http/x/../stt-stream',
    '/v1/transcribe/en?num_speakers=2',
    '/v1/transcribe/%65n',
    '/http//stt-stream',
    '//x/http/stt-stream',
    '//http/stt-stream',
    '///http/stt-stream',
    '/a\\b',
    'http://other.example/http/stt-stream',
    '*',
    '/',
    undefined,
  ];
  for (const target of targets)
    assert.equal(pathnameOf(target), requestUrl(target).pathname, `target ${target}`);
});

test('every answer names its request in x-request-id: records, JSON, errors, and a dotted path', async (t) => {
  const emu = await startEmulator({ jobTiming: { queuedMs: 0, processingMs: 0 } });
  t.after(() => emu.close());
  const ids = new Set<string>();
  const idOf = (headers: Record<string, string | string[] | undefined>) => {
    const id = headers['x-request-id'];
    assert.match(String(id), /^[0-9a-f-]{36}$/);
    ids.add(String(id));
    return String(id);
  };
  const frame = (isStart: boolean) =>
    encodeFrame({ streamId, isStart, isFinal: false, language: 'en', pcm: Buffer.alloc(3200) });
  const streamId = uuid();
  const started = await call(`${emu.url}/http/stt-stream`, { key: emu.apiKey, body: frame(true) });
  assert.equal(started.status, 200);
  idOf(started.headers);
  // A target the URL parser normalizes reaches the same operation and stream (sent as it is:
  // a client's URL parser would normalize it first).
  const { hostname, port } = new URL(emu.url);
  const sent = request({
    host: hostname,
    port,
    path: '/http/./stt-stream',
    method: 'POST',
    headers: { 'x-api-key': emu.apiKey },
  });
  sent.end(frame(false));
  const [dotted] = (await once(sent, 'response')) as [IncomingMessage];
  dotted.resume();
  assert.equal(dotted.statusCode, 200);
  idOf(dotted.headers);
  const refused = await call(`${emu.url}/http/stt-stream`, { key: 'not-a-key', body: frame(false) });
  assert.equal(refused.status, 401);
  const body = refused.json() as { request_id?: string };
  assert.equal(idOf(refused.headers), body.request_id);
  const job = await call(`${emu.url}/v1/transcribe/${uuid()}`, { key: emu.apiKey });
  assert.equal(job.status, 404);
  idOf(job.headers);
  assert.equal(ids.size, 4, 'one id per request');
});

test('a target starting with // routes the same with or without a query; one the URL parser refuses is 404', async (t) => {
  const emu = await startEmulator();
  t.after(() => emu.close());
  const { hostname, port } = new URL(emu.url);
  /** The status of a GET sent with this exact request target. */
  const statusOf = async (path: string) => {
    const sent = request({ host: hostname, port, path, method: 'GET', agent: false });
    sent.end();
    const [res] = (await once(sent, 'response')) as [IncomingMessage];
    res.resume();
    return res.statusCode;
  };
  // As a URL reads it (the path after the authority `x`): the live operation, which is POST only.
  assert.equal(await statusOf('//x/http/stt-stream?a=1'), 405);
  assert.equal(await statusOf('//x/http/stt-stream'), 405);
  // No path the URL parser can read: no operation there, and the emulator keeps serving.
  assert.equal(await statusOf('//'), 404);
  assert.equal(await statusOf('//['), 404);
  assert.equal(await statusOf('/http/stt-stream'), 405);
});

test('an answer for no operation (404) or a wrong method (405) names its request in x-request-id too', async (t) => {
  const emu = await startEmulator();
  t.after(() => emu.close());
  for (const [path, status] of [
    ['/no/such/operation', 404],
    ['/http/stt-stream', 405],
  ] as const) {
    const reply = await call(`${emu.url}${path}`, { key: emu.apiKey });
    assert.equal(reply.status, status);
    const body = reply.json() as { request_id?: string };
    assert.equal(reply.headers['x-request-id'], body.request_id, path);
  }
});
