import assert from 'node:assert/strict';
import { open, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import { Agent } from 'undici';
import { HttpTransport } from '../src/client/http.ts';
import { createClient } from '../src/client/index.ts';
import { IncompleteStreamError, SpeechServiceError, TransportError } from '../src/index.ts';
import { resolveConfig } from '../src/protocol/config.ts';
import { startService } from './helpers/service.ts';
import { speechPcm, speechWav } from './helpers/speech.ts';

const wav = await speechWav('Timeouts and transports.', { pauseMs: 200 });
const pcm = await speechPcm('A live stream over a socket that drops.', { pauseMs: 300 });
const { emulator, client, newClient } = await startService();

test('a stalled lookup times out as ERR_TIMEOUT after its retries', async () => {
  const ack = await client.batch.submit(wav);
  const impatient = newClient({
    timeouts: { headersMs: 150 },
    retry: { maxAttempts: 2, baseMs: 1, maxMs: 5 },
  });
  const fault = emulator.faults.add({ operation: 'batch.get', action: { type: 'stall' } });
  const before = emulator.stats().requests['batch.get'];
  await assert.rejects(
    impatient.batch.get(ack.jobId),
    (err: unknown) => err instanceof TransportError && err.code === 'ERR_TIMEOUT',
  );
  fault.remove();
  assert.equal(emulator.stats().requests['batch.get'] - before, 2);
});

test('a submission whose response never comes is an ambiguous timeout, not replayed', async () => {
  const impatient = newClient({ timeouts: { uploadHeadersMs: 200 } });
  const fault = emulator.faults.add({ operation: 'batch.submit', action: { type: 'stall' } });
  const before = emulator.stats().requests['batch.submit'];
  await assert.rejects(
    impatient.batch.submit(wav),
    (err: unknown) => err instanceof TransportError && err.code === 'ERR_TIMEOUT' && err.ambiguous,
  );
  fault.remove();
  assert.equal(emulator.stats().requests['batch.submit'] - before, 1);
});

test('Socket.IO rejects a wrong key at connect with a typed 401', async () => {
  const wrong = newClient({ apiKey: 'wrong-key-for-socket' });
  await assert.rejects(
    wrong.tts.listVoices(),
    (err: unknown) =>
      err instanceof SpeechServiceError && err.status === 401 && err.code === 'AUTH_UNAUTHORIZED',
  );
});

test('Socket.IO paths: legacy /realtime/socket.io, and API_PATH', async () => {
  const legacy = newClient({ legacySocketPath: true });
  assert.equal((await legacy.tts.listVoices()).length, 7);
  const custom = await startService({ socketPaths: ['/custom/io'] });
  const viaApiPath = custom.newClient({ env: { API_PATH: '/custom/io' } });
  assert.equal(viaApiPath.config.socketPath, '/custom/io');
  assert.equal((await viaApiPath.tts.listVoices()).length, 7);
  await assert.rejects(
    custom.client.tts.listVoices({ timeoutMs: 2000 }),
    (err: unknown) => err instanceof TransportError && err.code === 'ERR_CONNECT',
  );
});

test('the realtime HTTP operations work under either prefix', async () => {
  const short = newClient({ realtimeHttpPrefix: '/http' });
  const session = short.live.stt();
  await session.send(pcm.subarray(0, 32000), { final: true });
  assert.equal((await session.done).is_final, true);
});

test('a socket that drops mid-stream fails the session as incomplete', async () => {
  const fault = emulator.faults.add({ operation: 'stt.socket', nth: 3, action: { type: 'reset' } });
  const session = client.live.stt({ transport: 'socketio' });
  const err = await (async () => {
    for (let at = 0; at < pcm.length; at += 6400)
      await session.send(pcm.subarray(at, Math.min(pcm.length, at + 6400)), {
        final: at + 6400 >= pcm.length,
      });
    await session.done;
  })().catch((e: unknown) => e);
  fault.remove();
  assert.ok(
    err instanceof IncompleteStreamError ||
      (err instanceof TransportError && err.code === 'ERR_SOCKET_DISCONNECTED'),
    String(err),
  );
  assert.equal(session.state, 'failed');
});

test('a live frame over the frame limit fails before it is sent', async () => {
  const small = newClient({ limits: { realtimeAsrFrameBytes: 1000 } });
  const before = emulator.stats().requests['stt.http'];
  const session = small.live.stt();
  await assert.rejects(session.send(pcm.subarray(0, 2000)), (err: unknown) => {
    return (
      err instanceof SpeechServiceError &&
      err.status === 413 &&
      err.limit?.bound === 'realtime_asr_frame_bytes' &&
      err.origin === 'local'
    );
  });
  assert.equal(session.state, 'idle', 'nothing was opened');
  assert.equal(emulator.stats().requests['stt.http'], before);
});

test('a 300 MiB upload streams from disk: client memory stays flat', async () => {
  let received = 0;
  const sink = createServer((req, res) => {
    req.on('data', (c: Buffer) => (received += c.length));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jobId: '0f8fad5b-d9cb-469f-a165-70867728950e', status: 'queued' }));
    });
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  const path = join(tmpdir(), `speechpipe-big-${process.pid}.wav`);
  const file = await open(path, 'w');
  await file.truncate(300 * 1024 * 1024); // sparse: no disk writes
  await file.close();
  const uploader = createClient({
    apiUrl: `http://127.0.0.1:${(sink.address() as AddressInfo).port}`,
    apiKey: 'test-key',
    env: {},
  });
  after(async () => {
    await uploader.close();
    await new Promise((resolve) => sink.close(resolve));
    await rm(path, { force: true });
  });
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
  try {
    const ack = await uploader.batch.submit(path);
    assert.equal(ack.status, 'queued');
  } finally {
    clearInterval(sampler);
  }
  assert.ok(received > 300 * 1024 * 1024, 'the whole file was sent');
  const growthMiB = (peak - baseline) / 1024 / 1024;
  // Buffering the file would add at least 300 MiB; RSS also holds freed-but-unreturned pages,
  // so the bound leaves room for that noise while still proving the upload streams.
  assert.ok(growthMiB < 128, `RSS grew ${growthMiB.toFixed(1)} MiB while uploading 300 MiB`);
});

test('401, 403, 413 and 422 are never retried, even when the body says retryable: true', async () => {
  const ack = await client.batch.submit(wav);
  for (const [status, code] of [
    [401, 'AUTH_UNAUTHORIZED'],
    [403, 'AUTH_FORBIDDEN'],
    [413, 'PAYLOAD_TOO_LARGE'],
    [422, 'AUDIO_DURATION_EXCEEDED'],
  ] as const) {
    const fault = emulator.faults.add({
      operation: 'batch.get',
      times: 3,
      action: {
        type: 'status',
        status,
        contentType: 'application/json',
        rawBody: JSON.stringify({ error: 'refused', code, detail: 'try again?', retryable: true }),
      },
    });
    const before = emulator.stats().requests['batch.get'];
    await assert.rejects(
      client.batch.get(ack.jobId, { saveResult: true }),
      (err: unknown) => err instanceof SpeechServiceError && err.status === status && err.code === code,
    );
    fault.remove();
    assert.equal(emulator.stats().requests['batch.get'] - before, 1, `${status} sent once`);
  }
});

test("createClient reads the limits' environment overrides from the same env as its configuration", async () => {
  const scoped = newClient({
    env: { TTS_MAX_INPUT_CHARACTERS_FREE: '5', TTS_MAX_INPUT_CHARACTERS_ENTERPRISE: '7' },
  });
  assert.equal(scoped.limits.ttsInputCharacters.free, 5);
  assert.equal(scoped.limits.ttsInputCharacters.enterprise, 7);
  const before = emulator.stats().requests['tts.http'];
  await assert.rejects(
    scoped.tts.synthesize({ text: 'longer than five' }),
    (err: unknown) =>
      err instanceof SpeechServiceError && err.origin === 'local' && err.code === 'CHARACTER_COUNT_EXCEEDED',
  );
  assert.equal(emulator.stats().requests['tts.http'], before, 'refused before sending');
});

test('timeouts.socketAckMs bounds a Socket.IO TTS acknowledgement too', { timeout: 10_000 }, async () => {
  const impatient = newClient({ timeouts: { socketAckMs: 200 }, retry: { maxAttempts: 1 } });
  const fault = emulator.faults.add({ operation: 'tts.socket', times: 1, action: { type: 'stall' } });
  await assert.rejects(
    impatient.tts.synthesize({ text: 'Hello there.', transport: 'socketio' }),
    (err: unknown) => err instanceof TransportError && err.code === 'ERR_TIMEOUT',
  );
  fault.remove();
});

test('createClient refuses timeouts and retry options that would hang or retry forever', () => {
  const apiKey = 'k'.repeat(32);
  const apiUrl = 'http://127.0.0.1:1';
  // undici takes 0 as "no timeout" (a stalled service hung the caller), refused NaN and negative
  // values only at the first request, as a retried "connection lost"; NaN maxAttempts never ended.
  for (const timeouts of [
    { headersMs: 0 },
    { headersMs: Number.NaN },
    { bodyIdleMs: -1 },
    { connectMs: Number.POSITIVE_INFINITY },
    { uploadHeadersMs: 2 ** 31 },
    { socketAckMs: Number.NaN },
    { liveFinalMs: 0 },
  ]) {
    assert.throws(() => createClient({ apiKey, apiUrl, timeouts }), RangeError, JSON.stringify(timeouts));
  }
  for (const retry of [
    { maxAttempts: Number.NaN },
    { maxAttempts: 0 },
    { baseMs: -1 },
    { factor: Number.NaN },
  ]) {
    assert.throws(() => createClient({ apiKey, apiUrl, retry }), RangeError, JSON.stringify(retry));
  }
});

test('a timeout given as undefined keeps its default', async () => {
  const seen: (number | undefined)[] = [];
  const server = createServer((_req, res) => res.end('{}'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const dispatcher = new Agent();
  const recording = dispatcher.compose((dispatch) => (opts, handler) => {
    seen.push(opts.headersTimeout ?? undefined);
    return dispatch(opts, handler);
  });
  const own = createClient({
    apiKey: 'k'.repeat(32),
    apiUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    timeouts: { headersMs: undefined },
    retry: { maxAttempts: 1 },
    dispatcher: recording,
  });
  await own.batch.get('00000000-0000-4000-8000-000000000000').catch(() => {});
  await own.close();
  await dispatcher.close();
  server.close();
  assert.deepEqual(seen, [60_000]);
});

test('a request whose signal is already aborted destroys its stream body (its file is closed)', async () => {
  const transport = new HttpTransport(
    resolveConfig({ apiKey: 'k'.repeat(32), apiUrl: 'http://127.0.0.1:1', env: {} }),
  );
  const body = Readable.from([Buffer.from('audio')]);
  const ctl = new AbortController();
  const reason = new Error('stopped');
  ctl.abort(reason);
  await assert.rejects(
    transport.send({
      operation: 'batch.submit',
      method: 'POST',
      path: '/v1/transcribe/auto',
      body,
      signal: ctl.signal,
    }),
    (err: unknown) => err === reason,
  );
  await transport.close();
  assert.equal(body.destroyed, true);
});
