// What goes on the wire: the key only in the x-api-key header, never in a URL; never in errors.

import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import { type AddressInfo, createServer as createNetServer } from 'node:net';
import { after, test } from 'node:test';
import { inspect } from 'node:util';
import { createClient } from '../src/client/index.ts';
import { encodeWav, SpeechServiceError, TransportError } from '../src/index.ts';
import { httpServer, socketServer } from './helpers/hostile-servers.ts';

const KEY = 'sk_live_Zx9Qw8Er7Ty6Ui5Op4As3Df2';
const seen: { method: string; url: string; headers: IncomingMessage['headers'] }[] = [];
const server = createServer((req, res) => {
  seen.push({ method: req.method!, url: req.url!, headers: req.headers });
  req.resume();
  req.on('end', () => {
    res.writeHead(401, { 'content-type': 'application/json' });
    // A hostile or buggy service echoing the key back must not leak it through our errors.
    res.end(
      JSON.stringify({
        error: 'unauthorized',
        code: 'AUTH_UNAUTHORIZED',
        detail: `key ${KEY} rejected`,
        retryable: false,
        timestamp: new Date().toISOString(),
      }),
    );
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const client = createClient({ apiUrl: url, apiKey: KEY, env: {} });
after(async () => {
  await client.close();
  await new Promise((resolve) => server.close(resolve));
});

const wav = encodeWav(Buffer.alloc(3200), 16000);

test('every HTTP operation sends the key in x-api-key only, and errors never contain it', async () => {
  const attempts: Promise<unknown>[] = [
    client.batch.submit(wav),
    client.batch.get('0f8fad5b-d9cb-469f-a165-70867728950e'),
    client.batch.getLegacy('0f8fad5b-d9cb-469f-a165-70867728950e'),
    client.fast.transcribeFinal(wav),
    client.tts.synthesize({ text: 'hello' }),
    (async () => {
      const s = client.live.stt();
      await s.send(Buffer.alloc(320), { final: true });
    })(),
  ];
  const errors = await Promise.all(
    attempts.map((p) =>
      p.then(
        () => assert.fail('expected a 401'),
        (e: unknown) => e,
      ),
    ),
  );
  for (const err of errors) {
    assert.ok(err instanceof SpeechServiceError && err.status === 401, String(err));
    for (const text of [
      err.message,
      err.detail ?? '',
      String(err.stack),
      JSON.stringify(err),
      inspect(err, { depth: 9 }),
    ]) {
      assert.ok(!text.includes(KEY), text);
    }
  }
  assert.equal(seen.length, 6);
  for (const request of seen) {
    assert.equal(request.headers['x-api-key'], KEY);
    assert.ok(!request.url.includes(KEY) && !decodeURIComponent(request.url).includes(KEY), request.url);
  }
  const paths = seen.map((r) => `${r.method} ${r.url.split('?')[0]}`).sort();
  assert.deepEqual(paths, [
    'GET /v1/transcribe/0f8fad5b-d9cb-469f-a165-70867728950e',
    'GET /v1/transcribe/0f8fad5b-d9cb-469f-a165-70867728950e/en',
    'POST /realtime/http/stt',
    'POST /realtime/http/stt-stream',
    'POST /realtime/http/tts',
    'POST /v1/transcribe/auto',
  ]);
});

test('a response the HTTP parser refuses does not carry the key it echoed into our error', async () => {
  // undici keeps the bytes from where it refused (HTTPParserError.data): in the status line,
  // and in a chunked body after a 200.
  const answers = [
    (key: string) => `HTTP/1.1 2x0 ${key}\r\ncontent-length: 0\r\n\r\n`,
    (key: string) =>
      `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\nzz ${key}\r\n\r\n`,
  ];
  for (const answer of answers) {
    const raw = createNetServer((socket) => {
      let head = '';
      socket.on('data', (chunk) => {
        head += chunk;
        if (!head.includes('\r\n\r\n')) return;
        const key = /x-api-key: ([^\r]*)/i.exec(head)?.[1] ?? '';
        socket.end(answer(key));
      });
    });
    await new Promise<void>((resolve) => raw.listen(0, '127.0.0.1', resolve));
    const echoed = createClient({
      apiUrl: `http://127.0.0.1:${(raw.address() as AddressInfo).port}`,
      apiKey: KEY,
      env: {},
      retry: { maxAttempts: 1 },
    });
    const err = await echoed.batch.get('0f8fad5b-d9cb-469f-a165-70867728950e').then(
      () => assert.fail('a refused response must fail'),
      (e: unknown) => e,
    );
    await echoed.close();
    await new Promise((resolve) => raw.close(resolve));
    assert.ok(err instanceof TransportError, String(err));
    const text = inspect(err, { depth: 9 });
    assert.match(text, /HTTPParserError/);
    assert.ok(!text.includes(KEY), text);
  }
});

test("an error body's code echoing the key does not carry it into our error (HTTP and Socket.IO)", async (t) => {
  const echo = { code: `E_${KEY}`, detail: 'echo', retryable: false, timestamp: new Date().toISOString() };
  const { url: httpUrl } = await httpServer(t, (_req, res) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'echo', ...echo }));
  });
  const socketUrl = await socketServer(t, (io) =>
    io.on('connection', (socket) =>
      socket.on('list_voices', (_body: unknown, ack: (a: unknown) => void) =>
        ack({ ok: false, error: echo }),
      ),
    ),
  );
  const errors: unknown[] = [];
  for (const apiUrl of [httpUrl, socketUrl]) {
    const c = createClient({ apiUrl, apiKey: KEY, env: {} });
    t.after(() => c.close());
    const run =
      apiUrl === httpUrl
        ? () => c.batch.get('0f8fad5b-d9cb-469f-a165-70867728950e')
        : () => c.tts.listVoices();
    errors.push(await run().catch((e: unknown) => e));
  }
  for (const err of errors) {
    assert.ok(err instanceof SpeechServiceError, String(err));
    // Before, `code` kept the body's text as it came: inspect() and JSON showed the key.
    for (const text of [err.code, err.message, JSON.stringify(err), inspect(err, { depth: 9 })])
      assert.ok(!text.includes(KEY), text);
  }
});
