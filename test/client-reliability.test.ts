// The client under faults and hostile servers (issue 13): ids compared as UUIDs, every wait
// bounded (also a Socket.IO server that never completes login), completion bounded when the
// final record never comes, slots given back to the service on abort and before a restart,
// and records read only as fast as the consumer takes them.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import {
  createClient,
  IncompleteStreamError,
  type SpeechClient,
  SpeechServiceError,
  sttStream,
  TransportError,
  toFrames,
} from '../src/index.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { speechPcm, until, wavOf } from './helpers/emulator-fixtures.ts';
import { socketServer } from './helpers/hostile-servers.ts';
import { startService } from './helpers/service.ts';

const { emulator, client } = await startService();

test('fast transcription over Socket.IO matches its request id as a UUID, whatever its case', {
  timeout: 20_000,
}, async () => {
  const id = globalThis.crypto.randomUUID().toUpperCase();
  const wav = wavOf(speechPcm([{ speech: 0.8 }, { silence: 0.5 }, { speech: 0.8 }]));
  const records = [];
  for await (const record of client.fast.transcribe(wav, {
    transport: 'socketio',
    id,
    recordTimeoutMs: 5_000,
  })) {
    records.push(record);
  }
  assert.ok(records.length > 0);
  assert.equal(records.at(-1)?.is_final, true);
  assert.equal(records[0]!.id.toLowerCase(), id.toLowerCase());
});

test('a Socket.IO server that never completes login: send(), listVoices() and TTS fail with a typed timeout', {
  timeout: 20_000,
}, async (t) => {
  // It accepts the websocket and never completes the namespace login (never calls next()).
  const url = await socketServer(t, (io) => io.use(() => {}));
  const c = createClient({
    apiUrl: url,
    apiKey: 'test-key',
    env: {},
    retry: { baseMs: 10, maxMs: 20, maxAttempts: 1 },
    timeouts: { socketConnectMs: 300, socketAckMs: 400 },
  });
  t.after(() => c.close());
  const session = c.live.stt({ transport: 'socketio' });
  const outcomes = await Promise.allSettled([
    c.tts.listVoices(),
    c.tts.synthesize({ text: 'Hello there', transport: 'socketio' }),
    session.send(Buffer.alloc(3200), { final: true }),
  ]);
  for (const outcome of outcomes) {
    assert.equal(outcome.status, 'rejected');
    const err = (outcome as PromiseRejectedResult).reason;
    assert.ok(err instanceof TransportError, String(err));
    assert.equal(err.code, 'ERR_TIMEOUT', String(err));
  }
});

const errorBody = (code: string, id?: string) => ({
  ...(id === undefined ? {} : { id }),
  code,
  detail: 'refused',
  retryable: false,
  timestamp: new Date().toISOString(),
});

test('a fast upload over Socket.IO refused by an `error` event, not an acknowledgement, fails with that error at once', {
  timeout: 10_000,
}, async (t) => {
  let uploads = 0;
  const url = await socketServer(t, (io) =>
    io.on('connection', (socket) => {
      socket.on('audio_file', (payload: { id: string }) => {
        uploads++;
        socket.emit('error', errorBody('VALIDATION_FILE_CORRUPT', payload.id));
      });
    }),
  );
  const c = createClient({
    apiUrl: url,
    apiKey: 'test-key',
    env: {},
    timeouts: { uploadHeadersMs: 600_000 },
  });
  t.after(() => c.close());
  const ctl = new AbortController(); // ends the upload's wait if this test fails
  t.after(() => ctl.abort());
  const records = c.fast.transcribe(Buffer.alloc(3200), { transport: 'socketio', signal: ctl.signal });
  await assert.rejects(records.next(), (err: unknown) => {
    assert.ok(err instanceof SpeechServiceError, String(err));
    assert.equal(err.code, 'VALIDATION_FILE_CORRUPT');
    return true;
  });
  assert.equal(uploads, 1, 'a refusal is not retried');
});

test('an acknowledgement awaited when a connection-level `error` event (no id) comes fails with that error', {
  timeout: 10_000,
}, async (t) => {
  const url = await socketServer(t, (io) =>
    io.on('connection', (socket) => {
      socket.on('list_voices', () => socket.emit('error', errorBody('AUTH_FORBIDDEN')));
    }),
  );
  const c = createClient({ apiUrl: url, apiKey: 'test-key', env: {} });
  t.after(() => c.close());
  const ctl = new AbortController(); // ends the wait if this test fails
  t.after(() => ctl.abort());
  await assert.rejects(c.tts.listVoices({ signal: ctl.signal, timeoutMs: 600_000 }), (err: unknown) => {
    assert.ok(err instanceof SpeechServiceError, String(err));
    assert.equal(err.code, 'AUTH_FORBIDDEN');
    assert.equal(err.status, 403);
    return true;
  });
});

for (const transport of ['socketio', 'http'] as const) {
  test(`${transport}: a lost final record ends the session with a typed error within finalTimeoutMs`, {
    timeout: 20_000,
  }, async (t) => {
    const operation = transport === 'http' ? 'stt.http' : 'stt.socket';
    const fault = emulator.faults.add({ operation, action: { type: 'endWithoutFinal' } });
    t.after(() => fault.remove());
    const session = client.live.stt({ transport, finalTimeoutMs: 300 });
    await session.send(speechPcm([{ speech: 0.5 }, { silence: 0.3 }]), { final: true });
    await assert.rejects(session.done, (err: unknown) => {
      assert.ok(err instanceof IncompleteStreamError, String(err));
      return true;
    });
  });
}

test('http: records are read only as fast as the consumer takes them (the service is held by TCP)', {
  timeout: 30_000,
}, async (t) => {
  const CAP = 100_000;
  let written = 0;
  let lastDrainWait = 0;
  let waiting = false;
  let response: import('node:http').ServerResponse | undefined;
  const server = createServer((req, res) => {
    req.resume();
    response = res;
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    const pump = () => {
      waiting = false;
      while (written < CAP) {
        written++;
        const line = `${JSON.stringify({ id: streamId, seq: written, transcription: 'word '.repeat(20), words: [], is_speech_final: false, is_final: false })}\n`;
        if (!res.write(line)) {
          waiting = true;
          lastDrainWait = performance.now();
          res.once('drain', pump);
          return;
        }
      }
    };
    pump();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    response?.destroy();
    server.closeAllConnections();
    server.close();
  });
  const c = createClient({
    apiUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    apiKey: 'test-key',
    env: {},
  });
  t.after(() => c.close());
  const session = c.live.stt({ transport: 'http', highWaterMark: 8, endTimeoutMs: 200 });
  const streamId = session.id;
  const records = session.records();
  await session.send(Buffer.alloc(3200));
  const first = await records.next();
  assert.equal(first.done, false);
  // Wait until the server has been held for a while, or has written everything it would.
  while (written < CAP && !(waiting && performance.now() - lastDrainWait > 500)) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(written < CAP, `the client read all ${CAP} records without the consumer taking them`);
  session.abort();
});

/** An emulator whose account allows 2 live ASR streams, and a client that knows its plan. */
async function twoSlotService() {
  const service = await startService(
    { limits: { accountConcurrency: { realtime_asr: 2 } } },
    { concurrency: { realtime_asr: 2 } },
  );
  return service;
}

const limited = await twoSlotService();
const concurrencyRejections = () => limited.emulator.stats().rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0;

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: aborted sessions give their slots back to the service; after 2x the limit of aborts a new session starts at once`, {
    timeout: 30_000,
  }, async () => {
    const c = limited.client;
    const before = concurrencyRejections();
    const chunk = speechPcm([{ speech: 0.3 }]);
    for (let i = 0; i < 4; i++) {
      const ctl = new AbortController();
      const session = c.live.stt({ transport, signal: ctl.signal });
      await session.send(chunk); // live at the service, no exchange under way
      if (i % 2 === 0) ctl.abort(new Error('caller gave up'));
      else session.abort();
      await session.ended;
    }
    assert.equal(limited.emulator.stats().concurrent.realtime_asr, 0, 'slots held after the aborts');
    const next = c.live.stt({ transport });
    await next.send(chunk, { final: true });
    await next.done;
    assert.equal(concurrencyRejections(), before, 'a session was refused for a slot an aborted one held');
  });
}

test('sttStream over HTTP: eight transient 500s restart the session without a concurrency refusal or a held slot', {
  timeout: 30_000,
}, async (t) => {
  const before = concurrencyRejections();
  const fault = limited.emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    times: 8,
    action: { type: 'status', status: 500, code: 'ASR_TRANSCRIPTION_FAILED' },
  });
  t.after(() => fault.remove());
  const restarts: unknown[] = [];
  const stt = sttStream({
    client: limited.client,
    transport: 'http',
    restartBackoff: { baseMs: 1, maxMs: 5 },
  });
  stt.on('session-error', (err) => restarts.push(err));
  const records: unknown[] = [];
  await pipeline(
    Readable.from([speechPcm([{ speech: 1 }, { silence: 0.5 }, { speech: 1 }, { silence: 0.5 }])]),
    toFrames({ frameMs: 250, language: 'en' }),
    stt,
    new Writable({
      objectMode: true,
      write(record, _e, cb) {
        records.push(record);
        cb();
      },
    }),
  );
  assert.ok(restarts.length >= 1);
  assert.equal((records.at(-1) as { is_final: boolean }).is_final, true);
  assert.equal(
    concurrencyRejections(),
    before,
    'a restarted session was refused for a slot a failed one held',
  );
  // Failed sessions are ended in the background; the client holds each slot until then.
  await until(() => limited.client.admissionStats().every((s) => s.running === 0), 'client slots released');
  assert.equal(limited.emulator.stats().concurrent.realtime_asr, 0);
});

test('client.close() ends a pause before a retry at once: every operation that waits out a Retry-After', {
  timeout: 30_000,
}, async () => {
  const wav = wavOf(speechPcm([{ speech: 1 }]));
  const operations = {
    'tts.http': (c: SpeechClient) => c.tts.synthesize({ text: 'Hello.' }),
    'fast.http': (c: SpeechClient) => c.fast.transcribeFinal(wav),
    'batch.submit': (c: SpeechClient) => c.batch.submit(wav, { onAmbiguousSubmit: 'resubmit' }),
    'batch.get': (c: SpeechClient) => c.batch.get(randomUuid()),
  } as const;
  for (const [operation, run] of Object.entries(operations)) {
    // Deadlines past the pause: with the defaults a Retry-After of ten minutes is beyond them,
    // and the operation fails at once without pausing.
    const hour = 3_600_000;
    const own = createClient({
      apiUrl: emulator.url,
      apiKey: emulator.apiKey,
      env: {},
      deadlines: { ttsStart: hour, fast: hour, batchSubmit: hour, batchGet: hour },
    });
    // Ten minutes: a client that sleeps it out after close() would hold the test past its timeout.
    const rule = emulator.faults.add({
      operation: operation as keyof typeof operations,
      action: { type: 'status', status: 503, retryAfter: 600 },
    });
    try {
      const applied = emulator.stats().faultsApplied.status ?? 0;
      const pending = run(own).catch((e: unknown) => e);
      await until(() => (emulator.stats().faultsApplied.status ?? 0) > applied, `${operation} answered 503`);
      await new Promise((resolve) => setTimeout(resolve, 50)); // the answer read, the pause begun
      await own.close();
      const err = await pending;
      assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', `${operation}: ${err}`);
    } finally {
      rule.remove();
      await own.close();
    }
  }
  // And the pause between polls of a job still queued.
  const queued = await startService({ jobTiming: { queuedMs: 600_000 } });
  const { jobId } = await queued.client.batch.submit(wav);
  const err = await queued.client.batch
    .wait(jobId, { initialIntervalMs: 600_000, onStatus: () => void queued.client.close() })
    .catch((e: unknown) => e);
  assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', `batch.wait: ${err}`);
});
