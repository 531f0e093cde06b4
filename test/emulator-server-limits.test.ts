// The emulator's HTTP server survives what a production server survives (issue 13): clients
// that never finish their headers, idle keep-alive connections, uploads that drip, and more
// connections than it should hold.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { after, test } from 'node:test';
import { startEmulator } from '../src/emulator/index.ts';
import {
  call,
  filePart,
  MULTIPART_TYPE,
  multipart,
  speechPcm,
  until,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const emu = await startEmulator({
  limits: { accountConcurrency: { batch: 1, tts: 1 }, ttsInputCharacters: { standard: 4000 } },
  jobTiming: { queuedMs: 0, processingMs: 0 },
  tts: { engine: 'synthetic' },
  server: {
    headersTimeoutMs: 300,
    requestTimeoutMs: 5_000,
    keepAliveTimeoutMs: 300,
    maxConnections: 6,
    minUploadBytesPerSecond: 50_000,
    uploadRateWindowMs: 300,
    sendTimeoutMs: 300,
  },
});
after(() => emu.close());
const { port } = new URL(emu.url);

const opened: Socket[] = [];
after(() => {
  for (const s of opened) s.destroy();
});
async function open(): Promise<Socket> {
  const socket = connect(Number(port), '127.0.0.1');
  opened.push(socket);
  socket.on('error', () => {});
  await once(socket, 'connect');
  // Read what comes (a socket nobody reads never sees the server close it).
  socket.resume();
  return socket;
}
const closed = (socket: Socket) =>
  socket.destroyed || socket.readyState === 'closed'
    ? Promise.resolve()
    : new Promise<void>((resolve) => socket.once('close', () => resolve()));

test('a client that never finishes its headers (slowloris) is disconnected', async () => {
  const socket = await open();
  socket.write(`POST /v1/transcribe/en HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\n`);
  await closed(socket);
});

test('an idle keep-alive connection is closed after the keep-alive timeout', async () => {
  const socket = await open();
  socket.write(
    `GET /v1/transcribe/00000000-0000-4000-8000-000000000000 HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\n\r\n`,
  );
  const answer = await new Promise<string>((resolve) =>
    socket.once('data', (d: Buffer) => resolve(d.toString())),
  );
  assert.match(answer, /^HTTP\/1\.1 404/);
  await closed(socket);
});

test('an upload that drips is cut, and the batch slot it held is free again at once', async () => {
  const wav = wavOf(speechPcm([{ speech: 0.5 }]));
  const body = multipart([filePart(wav)]);
  const socket = await open();
  socket.write(
    `POST /v1/transcribe/en HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: ${MULTIPART_TYPE}\r\ncontent-length: ${body.length}\r\n\r\n`,
  );
  // A few bytes now and then: far below the minimum rate.
  socket.write(body.subarray(0, 200));
  const drip = setInterval(() => socket.writable && socket.write(body.subarray(200, 201)), 100);
  try {
    await until(() => emu.stats().concurrent.batch === 1, 'the upload holds the batch slot');
    await closed(socket);
  } finally {
    clearInterval(drip);
  }
  assert.equal(emu.stats().rejections.UPLOAD_TOO_SLOW, 1);
  await until(() => emu.stats().concurrent.batch === 0, 'the slot given back');
  const next = await call(`${emu.url}/v1/transcribe/en`, {
    key: emu.apiKey,
    body,
    headers: { 'content-type': MULTIPART_TYPE },
  });
  assert.equal(next.status, 200, next.text);
});

test('a kept-alive connection whose second upload drips is cut (the guard follows the latest request)', async () => {
  const before = emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0;
  const socket = await open();
  const head = `GET /v1/transcribe/00000000-0000-4000-8000-000000000000 HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\n\r\n`;
  const answered = new Promise<string>((resolve) =>
    socket.once('data', (d: Buffer) => resolve(d.toString())),
  );
  socket.write(head);
  assert.match(await answered, /^HTTP\/1\.1 404/);
  const wav = wavOf(speechPcm([{ speech: 0.5 }]));
  const body = multipart([filePart(wav)]);
  socket.write(
    `POST /v1/transcribe/en HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: ${MULTIPART_TYPE}\r\ncontent-length: ${body.length}\r\n\r\n`,
  );
  socket.write(body.subarray(0, 200));
  // Faster than the keep-alive timeout, far below the minimum rate.
  const drip = setInterval(() => socket.writable && socket.write(body.subarray(200, 201)), 100);
  try {
    await closed(socket);
  } finally {
    clearInterval(drip);
  }
  assert.equal(emu.stats().rejections.UPLOAD_TOO_SLOW, before + 1);
  await until(() => emu.stats().concurrent.batch === 0, 'the slot given back');
});

test('an admin request whose body drips is cut as any upload is', async () => {
  const before = emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0;
  const socket = await open();
  const body = JSON.stringify({ operation: 'stt.http', action: { type: 'status', status: 503 } });
  socket.write(
    `POST /_emulator/faults HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/json\r\ncontent-length: ${body.length + 1000}\r\n\r\n`,
  );
  socket.write(body.slice(0, 10));
  const drip = setInterval(() => socket.writable && socket.write(' '), 100);
  try {
    await closed(socket);
  } finally {
    clearInterval(drip);
  }
  assert.equal(emu.stats().rejections.UPLOAD_TOO_SLOW, before + 1);
});

test('a client that never reads its answer is disconnected, and the TTS slot it held is free again', async () => {
  const tts = (text: string) => JSON.stringify({ id: crypto.randomUUID(), text, model: 'nebula' });
  // About 9 MB of speech: more than the socket buffers between the two ends take in.
  const body = tts('hello world '.repeat(250));
  const socket = connect(Number(port), '127.0.0.1');
  opened.push(socket);
  socket.on('error', () => {});
  socket.pause(); // never read
  await once(socket, 'connect');
  socket.write(
    `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  await until(() => emu.stats().concurrent.tts === 1, 'the answer holds the TTS slot');
  await until(() => emu.stats().rejections.SEND_TIMEOUT === 1, 'the connection closed');
  await until(() => emu.stats().concurrent.tts === 0, 'the slot given back');
  const next = await call(`${emu.url}/http/tts`, {
    key: emu.apiKey,
    body: tts('hi there'),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(next.status, 200, next.text);
});

test('bytes that do not parse, sent while an answer is streaming on the connection, do not write into it', async () => {
  const slow = emu.faults.add({
    operation: 'tts.http',
    action: { type: 'slowBody', bytesPerSecond: 20_000 },
  });
  const socket = await open();
  try {
    const body = JSON.stringify({ id: crypto.randomUUID(), text: 'hello there' });
    let received = '';
    socket.on('data', (d: Buffer) => {
      received += d.toString('latin1');
    });
    socket.write(
      `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
    );
    await until(() => received.length > 1000, 'the answer is streaming');
    socket.write('NOT HTTP\r\n\r\n');
    await closed(socket);
    assert.match(received, /^HTTP\/1\.1 200 /);
    assert.doesNotMatch(received.slice(1), /HTTP\/1\.1 400/, 'no answer written into the streaming one');
  } finally {
    slow.remove();
  }
});

test('a body that drips after its request was answered (an unknown key) is cut too', async () => {
  const before = emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0;
  const socket = await open();
  let answer = '';
  socket.once('data', (d: Buffer) => {
    answer = d.toString('latin1');
  });
  socket.write(
    `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: not-a-key\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{`,
  );
  const drip = setInterval(() => socket.writable && socket.write(' '), 100);
  try {
    await closed(socket);
  } finally {
    clearInterval(drip);
  }
  assert.match(answer, /^HTTP\/1\.1 401 /);
  assert.equal(
    emu.stats().rejections.UPLOAD_TOO_SLOW,
    before + 1,
    'cut by the upload rate, not the request timeout',
  );
});

test('a body answered early whose client then closes the connection is not counted as a slow upload', async () => {
  const before = emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0;
  const socket = await open();
  const answer = new Promise<string>((resolve) =>
    socket.once('data', (d: Buffer) => resolve(d.toString('latin1'))),
  );
  socket.write(
    `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: not-a-key\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{`,
  );
  assert.match(await answer, /^HTTP\/1\.1 401 /);
  // The client stops sending once refused, and goes away.
  socket.destroy();
  // A body that drips, watched after the one above: once it is cut, the guard has looked at both.
  const drip = await open();
  drip.write(
    `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{`,
  );
  const dripping = setInterval(() => drip.writable && drip.write(' '), 100);
  try {
    await closed(drip);
  } finally {
    clearInterval(dripping);
  }
  assert.equal(emu.stats().rejections.UPLOAD_TOO_SLOW, before + 1, 'only the dripping body was cut');
});

test('Expect: 100-continue: a body refused by its headers is answered without asking for it; one accepted is asked for', async () => {
  const exchange = async (headers: string, body?: Buffer) => {
    const socket = await open();
    const first = new Promise<string>((resolve) =>
      socket.once('data', (d: Buffer) => resolve(d.toString('latin1'))),
    );
    socket.write(
      `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n${headers}expect: 100-continue\r\n\r\n`,
    );
    const answer = await first;
    if (body && /^HTTP\/1\.1 100 /.test(answer)) {
      const rest = new Promise<string>((resolve) =>
        socket.once('data', (d: Buffer) => resolve(d.toString('latin1'))),
      );
      socket.write(body);
      socket.destroy(new Error((await rest).split('\r\n')[0]));
    } else socket.destroy();
    return answer;
  };
  // Over the 16 MiB TTS body limit by its Content-Length: 413 at once, no 100 Continue first.
  assert.match(
    await exchange(
      `x-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${17 * 1024 * 1024}\r\n`,
    ),
    /^HTTP\/1\.1 413 /,
  );
  // An unknown key: 401 at once.
  assert.match(await exchange('x-api-key: not-a-key\r\ncontent-length: 10\r\n'), /^HTTP\/1\.1 401 /);
  // A body the operation reads: asked for with 100 Continue, then answered.
  const body = Buffer.from(JSON.stringify({ id: crypto.randomUUID(), text: 'hello' }));
  assert.match(
    await exchange(
      `x-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n`,
      body,
    ),
    /^HTTP\/1\.1 100 /,
  );
});

test('Expect: 100-continue: a body not asked for yet (the operation waits first) is not cut as a slow upload', async () => {
  const before = emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0;
  // The operation waits well past the upload window before it reads the body.
  const delay = emu.faults.add({ operation: 'tts.http', times: 1, action: { type: 'delay', ms: 1000 } });
  try {
    const socket = await open();
    const body = Buffer.from(JSON.stringify({ id: crypto.randomUUID(), text: 'hello' }));
    let received = '';
    socket.on('data', (d: Buffer) => {
      received += d.toString('latin1');
    });
    socket.write(
      `POST /http/tts HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${emu.apiKey}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`,
    );
    // The client waits for 100 Continue before it sends the body, as the header says.
    await Promise.race([
      until(() => /^HTTP\/1\.1 100 /.test(received), 'asked for the body'),
      closed(socket).then(() => assert.fail(`the connection closed: ${JSON.stringify(received)}`)),
    ]);
    socket.write(body);
    await until(() => /HTTP\/1\.1 200 /.test(received), 'the answer');
    socket.destroy();
  } finally {
    delay.remove();
  }
  assert.equal(emu.stats().rejections.UPLOAD_TOO_SLOW ?? 0, before, 'not cut as a slow upload');
});

test('connections beyond the cap are closed as they arrive; those before it still work', async () => {
  const held: Socket[] = [];
  for (let i = 0; i < 6; i++) held.push(await open());
  const extra = await open();
  await closed(extra);
  for (const s of held) s.destroy();
  const status = () =>
    call(`${emu.url}/v1/transcribe/x`, { key: emu.apiKey }).then(
      (r) => r.status,
      () => 0, // a connection the server closed as it came: still over the cap
    );
  await until(async () => (await status()) === 400, 'served again');
});
