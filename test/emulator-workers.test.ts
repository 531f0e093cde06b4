// An emulator served by several threads (`startEmulatorWorkers`, `speechpipe emulator
// --workers N`) is one emulator: account limits hold across threads, statistics and fault rules
// are the emulator's, jobs and live streams are reached whichever thread a connection lands on,
// a thread that dies gives back what it held, and SIGTERM stops everything.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Agent } from 'undici';
import { type EmulatorStats, type EmulatorWorkers, startEmulatorWorkers } from '../src/emulator/index.ts';
import { ownerOf } from '../src/emulator/threads.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import {
  type CallOptions,
  call,
  connectSocket,
  filePart,
  MULTIPART_TYPE,
  multipart,
  ndjson,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const LIMIT = 4;
let emu: EmulatorWorkers;

before(async () => {
  emu = await startEmulatorWorkers({
    workers: 2,
    limits: { accountConcurrency: { realtime_asr: LIMIT } },
    jobTiming: { queuedMs: 0, processingMs: 0 },
  });
});
after(() => emu.close());

/** One request on a connection of its own, so the kernel picks a thread for each. */
async function fresh(url: string, options: CallOptions = {}) {
  const dispatcher = new Agent();
  try {
    return await call(url, { key: emu.apiKey, ...options, dispatcher });
  } finally {
    await dispatcher.close();
  }
}

/** A stream id owned by thread `owner`. */
function idOwnedBy(owner: number): string {
  for (;;) {
    const id = uuid();
    if (ownerOf(id, 2) === owner) return id;
  }
}

const pcm = speechPcm([{ speech: 0.2 }]);
const frame = (streamId: string, flags: { isStart?: boolean; isFinal?: boolean }) =>
  encodeFrame({ streamId, isStart: !!flags.isStart, isFinal: !!flags.isFinal, language: 'en', pcm });
const postFrame = (streamId: string, flags: { isStart?: boolean; isFinal?: boolean }) =>
  fresh(`${emu.url}/http/stt-stream`, {
    body: frame(streamId, flags),
    headers: { 'content-type': 'application/octet-stream' },
  });

const adminStats = async () => (await fresh(`${emu.url}/_emulator/stats`)).json() as EmulatorStats;

test('the account limit holds across threads; stats are the sum of every thread', async () => {
  const before = await adminStats();
  // Streams held by both threads: each stream lives on the thread that owns its id.
  const held = [idOwnedBy(0), idOwnedBy(1), idOwnedBy(0), idOwnedBy(1)];
  for (const id of held) assert.equal((await postFrame(id, { isStart: true })).status, 200);
  // The next one is refused whichever thread owns it and whichever takes the connection.
  for (const owner of [0, 1, 0, 1]) {
    const reply = await postFrame(idOwnedBy(owner), { isStart: true });
    assert.equal(reply.status, 429, reply.text);
    assert.equal((reply.json() as { code: string }).code, 'CONCURRENCY_LIMIT_EXCEEDED');
  }
  const during = await adminStats();
  assert.equal(during.concurrent.realtime_asr, LIMIT);
  assert.equal(during.maxConcurrent.realtime_asr, LIMIT);
  assert.equal(during.sessions.opened - before.sessions.opened, LIMIT);
  assert.equal(during.requests['stt.http'] - before.requests['stt.http'], LIMIT + 4);
  assert.equal(
    (during.rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0) - (before.rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0),
    4,
  );
  // Frames of one stream on separate connections reach its thread; the final one releases.
  for (const id of held) {
    const middle = await postFrame(id, {});
    assert.equal(middle.status, 200, middle.text);
    const last = await postFrame(id, { isFinal: true });
    assert.equal(last.status, 200, last.text);
    assert.equal(ndjson(last.text).at(-1)?.is_final, true);
  }
  const afterwards = await adminStats();
  assert.equal(afterwards.concurrent.realtime_asr, 0);
  assert.equal(afterwards.sessions.finished - before.sessions.finished, LIMIT);
  assert.equal(afterwards.framesAccepted - before.framesAccepted, LIMIT * 3);
});

test('a frame sent with Expect: 100-continue (as curl sends one) reaches its thread', async () => {
  const send = (id: string, flags: { isStart?: boolean; isFinal?: boolean }) =>
    new Promise<{ status: number; text: string }>((resolve, reject) => {
      const body = frame(id, flags);
      const req = httpRequest(`${emu.url}/http/stt-stream`, {
        method: 'POST',
        agent: false,
        headers: {
          'x-api-key': emu.apiKey,
          'content-type': 'application/octet-stream',
          'content-length': body.length,
          expect: '100-continue',
        },
      });
      req.on('continue', () => req.end(body));
      req.on('error', reject);
      req.on('response', (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      });
    });
  for (const owner of [0, 1, 0, 1]) {
    const id = idOwnedBy(owner);
    assert.equal((await send(id, { isStart: true })).status, 200);
    const last = await send(id, { isFinal: true });
    assert.equal(last.status, 200, last.text);
    assert.equal(ndjson(last.text).at(-1)?.is_final, true);
  }
});

test('a batch job submitted through one thread is read through any', async () => {
  const submitted = await fresh(`${emu.url}/v1/transcribe/en`, {
    body: multipart([filePart(wavOf(speechPcm([{ speech: 1 }])))]),
    headers: { 'content-type': MULTIPART_TYPE },
  });
  assert.equal(submitted.status, 200, submitted.text);
  const { jobId } = submitted.json() as { jobId: string };
  // Sixteen reads on fresh connections: about half land on the thread that does not hold it.
  for (let i = 0; i < 16; i++) {
    const read = await fresh(`${emu.url}/v1/transcribe/${jobId}?save_result=true`);
    assert.equal(read.status, 200, read.text);
    const { data } = read.json() as { data: { id: string; status: string } };
    assert.equal(data.id, jobId);
  }
  const legacy = await fresh(`${emu.url}/v1/transcribe/${jobId}/en`);
  assert.equal(legacy.status, 200, legacy.text);
  // Read without save_result: cleared for every later read, through any thread.
  for (let i = 0; i < 4; i++) {
    const read = await fresh(`${emu.url}/v1/transcribe/${jobId}`);
    assert.equal((read.json() as { data: { status: string } }).data.status, 'cleared');
  }
  assert.equal((await fresh(`${emu.url}/v1/transcribe/${uuid()}`)).status, 404);
});

test('fault rules from the admin endpoint apply once across threads', async () => {
  const rule = { operation: 'batch.get', times: 1, action: { type: 'status', status: 503 } };
  const added = await fresh(`${emu.url}/_emulator/faults`, {
    body: JSON.stringify(rule),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(added.status, 201, added.text);
  const statuses: number[] = [];
  for (let i = 0; i < 8; i++) statuses.push((await fresh(`${emu.url}/v1/transcribe/${uuid()}`)).status);
  assert.deepEqual(statuses, [503, 404, 404, 404, 404, 404, 404, 404]);
  const listed = (await fresh(`${emu.url}/_emulator/faults`)).json() as {
    faults: { matched: number; applied: number }[];
  };
  assert.equal(listed.faults.length, 1);
  assert.equal(listed.faults[0]!.applied, 1);
  assert.equal(listed.faults[0]!.matched, 8);
  assert.deepEqual((await fresh(`${emu.url}/_emulator/faults`, { method: 'DELETE' })).json(), { cleared: 1 });
  assert.equal((await adminStats()).faultsApplied.status, 1);
});

test('an aborted frame cancels its stream, and a reset fault resets, whichever thread takes the connection', async () => {
  const slow = await startEmulatorWorkers({ workers: 2, latency: { perRequestMs: 10_000 } });
  try {
    const post = async (id: string, flags: { isStart?: boolean }, signal?: AbortSignal) => {
      const dispatcher = new Agent();
      try {
        return await call(`${slow.url}/http/stt-stream`, {
          key: slow.apiKey,
          body: frame(id, flags),
          headers: { 'content-type': 'application/octet-stream' },
          dispatcher,
          ...(signal ? { signal } : {}),
        });
      } finally {
        await dispatcher.destroy();
      }
    };
    // Streams owned by either thread, each frame on a fresh connection: some are passed on.
    for (const owner of [0, 1, 0, 1, 0, 1]) {
      const id = idOwnedBy(owner);
      await assert.rejects(post(id, { isStart: true }, AbortSignal.timeout(150)));
      // The owner saw the aborted POST and cancelled the stream: its next frame is refused.
      let reply = await post(id, {});
      for (let i = 0; i < 20 && reply.status !== 409; i++) reply = await post(id, {});
      assert.equal(reply.status, 409, reply.text);
    }
    const stats = await slow.stats();
    assert.equal(stats.sessions.cancelled, 6);
    assert.equal(stats.concurrent.realtime_asr, 0);
    await slow.faults.add({ operation: 'stt.http', action: { type: 'reset' } });
    for (const owner of [0, 1, 0, 1]) await assert.rejects(post(idOwnedBy(owner), { isStart: true }));
  } finally {
    await slow.close();
  }
});

test('a frame whose body stops before its stream id is cut at the minimum upload rate, as with one thread', async () => {
  const slow = await startEmulatorWorkers({
    workers: 2,
    server: { minUploadBytesPerSecond: 50_000, uploadRateWindowMs: 300 },
  });
  const { port } = new URL(slow.url);
  const sockets = Array.from({ length: 4 }, () => connect(Number(port), '127.0.0.1'));
  let closed = 0;
  try {
    for (const socket of sockets) {
      socket.on('error', () => {});
      socket.on('close', () => closed++);
      socket.resume();
      // Five bytes of a frame, then nothing: the thread waits for its stream id (16 bytes).
      socket.write(
        `POST /http/stt-stream HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${slow.apiKey}\r\ncontent-length: 1000\r\n\r\nabcde`,
      );
    }
    await until(() => closed === sockets.length, 'every stalled frame cut');
    const stats = await slow.stats();
    assert.equal(stats.rejections.UPLOAD_TOO_SLOW, 4);
  } finally {
    for (const socket of sockets) socket.destroy();
    await slow.close();
  }
});

test('a frame passed to the thread owning its stream, then stalling, is cut once and counted once', async () => {
  const slow = await startEmulatorWorkers({
    workers: 2,
    server: { minUploadBytesPerSecond: 50_000, uploadRateWindowMs: 300 },
  });
  const { port } = new URL(slow.url);
  // Streams of both threads: whichever thread a connection lands on, half are passed on.
  const ids = [idOwnedBy(0), idOwnedBy(1), idOwnedBy(0), idOwnedBy(1), idOwnedBy(0), idOwnedBy(1)];
  const sockets = ids.map(() => connect(Number(port), '127.0.0.1'));
  let closed = 0;
  try {
    for (const [i, socket] of sockets.entries()) {
      socket.on('error', () => {});
      socket.on('close', () => closed++);
      socket.resume();
      const head = frame(ids[i]!, { isStart: true }).subarray(0, 24);
      socket.write(
        `POST /http/stt-stream HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nx-api-key: ${slow.apiKey}\r\ncontent-length: 3218\r\n\r\n`,
      );
      // The stream id and a little audio, then nothing.
      socket.write(head);
    }
    await until(() => closed === sockets.length, 'every stalled frame cut');
    // Counted by the thread the client sent to, not again by the owner it was passed to.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal((await slow.stats()).rejections.UPLOAD_TOO_SLOW, sockets.length);
  } finally {
    for (const socket of sockets) socket.destroy();
    await slow.close();
  }
});

test('Socket.IO: each socket stays on one thread; the account limit holds across sockets on any thread', async () => {
  const sockets = await Promise.all(Array.from({ length: 6 }, () => connectSocket(emu.url, emu.apiKey)));
  try {
    const start = async (socket: (typeof sockets)[number], id: string) => {
      const ack = (await socket.emitWithAck('audio_stream', frame(id, { isStart: true }))) as {
        ok: boolean;
        error?: { code: string };
      };
      return ack.ok ? 'ok' : ack.error!.code;
    };
    const ids = sockets.slice(0, LIMIT).map(() => uuid());
    for (let i = 0; i < LIMIT; i++) assert.equal(await start(sockets[i]!, ids[i]!), 'ok');
    for (const socket of sockets) assert.equal(await start(socket, uuid()), 'CONCURRENCY_LIMIT_EXCEEDED');
    // A stream's frames and records stay with its socket; the final record releases its operation.
    const finals = ids.map(
      (id, i) =>
        new Promise<void>((resolve) =>
          sockets[i]!.on('transcription_result', (r: { id: string; is_final: boolean }) => {
            if (r.id === id && r.is_final) resolve();
          }),
        ),
    );
    for (let i = 0; i < LIMIT; i++) sockets[i]!.emit('audio_stream', frame(ids[i]!, { isFinal: true }));
    await Promise.all(finals);
    await until(async () => (await adminStats()).concurrent.realtime_asr === 0, 'every stream released');
    assert.equal((await adminStats()).socketConnections.active, 6);
  } finally {
    for (const socket of sockets) socket.close();
  }
});

test('a thread that dies gives back its slots; a fresh one takes its place', async () => {
  const held = Array.from({ length: LIMIT }, () => idOwnedBy(1));
  for (const id of held) assert.equal((await postFrame(id, { isStart: true })).status, 200);
  assert.equal((await postFrame(idOwnedBy(0), { isStart: true })).status, 429);
  await emu.terminateWorker(1);
  assert.equal((await adminStats()).concurrent.realtime_asr, 0);
  // The dead thread's streams are gone; the account's whole limit is free again, on both threads.
  assert.equal((await postFrame(held[0]!, {})).status, 409);
  const fresh4 = [idOwnedBy(0), idOwnedBy(1), idOwnedBy(0), idOwnedBy(1)];
  for (const id of fresh4) assert.equal((await postFrame(id, { isStart: true })).status, 200);
  assert.equal((await postFrame(idOwnedBy(1), { isStart: true })).status, 429);
  for (const id of fresh4) assert.equal((await postFrame(id, { isFinal: true })).status, 200);
});

test('speechpipe emulator --workers 2: one port, SIGTERM stops every thread and exits 0', async () => {
  const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
  const child = spawn(process.execPath, [main, 'emulator', '--workers', '2', '--key', 'k-workers'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exit = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  const lines = createInterface({ input: child.stdout });
  const [first] = (await once(lines, 'line')) as [string];
  lines.close();
  const { url, apiKey, admin } = JSON.parse(first) as { url: string; apiKey: string; admin: string };
  assert.equal(apiKey, 'k-workers');
  for (let i = 0; i < 4; i++) {
    const dispatcher = new Agent();
    const reply = await call(`${url}/v1/transcribe/${uuid()}`, { key: apiKey, dispatcher });
    await dispatcher.close();
    assert.equal(reply.status, 404);
  }
  const stats = (await call(`${admin}/stats`)).json() as EmulatorStats;
  assert.equal(stats.requests['batch.get'], 4);
  child.kill('SIGTERM');
  assert.deepEqual(await exit, [0, null], stderr);
  assert.match(stderr, /closed on SIGTERM/);
  // Nothing listens on the port any more.
  const { port } = new URL(url);
  const socket = connect(Number(port), '127.0.0.1');
  const [err] = (await once(socket, 'error')) as [NodeJS.ErrnoException];
  assert.equal(err.code, 'ECONNREFUSED');
  assert.throws(() => process.kill(child.pid!, 0), { code: 'ESRCH' });
});

test('--workers must be a positive integer or auto', async () => {
  const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
  for (const value of ['0', 'x', '1.5']) {
    const child = spawn(process.execPath, [main, 'emulator', '--workers', value], { stdio: 'ignore' });
    const [code] = (await once(child, 'exit')) as [number | null];
    assert.equal(code, 2, value);
  }
});

test('a key no request could carry is refused (RangeError) before any thread starts', async () => {
  const key = { key: 'padded ', account: 'a', tier: 'standard' as const, capabilities: ['batch' as const] };
  await assert.rejects(startEmulatorWorkers({ workers: 2, keys: [key] }), RangeError);
});
