import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { errorFromSocketPayload, SocketTransport } from '../src/client/socket.ts';
import { SpeechServiceError, TransportError } from '../src/index.ts';
import { resolveConfig } from '../src/protocol/config.ts';
import { errorFromResponse, MAX_RETRY_AFTER_MS } from '../src/protocol/errors.ts';
import { resolveSocketEvents } from '../src/protocol/socket-events.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { startService } from './helpers/service.ts';
import { watchTimers } from './helpers/timers.ts';

const { emulator, client, newClient } = await startService();

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

/** Every way an error can be shown or logged. */
const shown = (err: unknown) =>
  [String(err), (err as Error).message, inspect(err, { depth: 5 }), JSON.stringify(err)].join('\n');

test('close() while the Socket.IO connection is opening fails its operations with ERR_CLIENT_CLOSED', {
  timeout: 10_000,
}, async () => {
  const c = newClient();
  const voices = c.tts.listVoices();
  const synthesis = c.tts.synthesize({ text: 'Hi', transport: 'socketio' });
  await nextTurn(); // the TTS operation is admitted and waits for the connection too
  await c.close();
  for (const pending of [voices, synthesis]) {
    await assert.rejects(pending, (err: unknown) => {
      assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', String(err));
      return true;
    });
  }
});

test('close() while an acknowledgement is awaited on an open connection fails it with ERR_CLIENT_CLOSED', {
  timeout: 10_000,
}, async () => {
  const c = newClient();
  await c.tts.listVoices(); // connected
  const stall = emulator.faults.add({ operation: 'voices.socket', action: { type: 'stall' } });
  try {
    const voices = c.tts.listVoices();
    await nextTurn();
    await c.close();
    await assert.rejects(voices, (err: unknown) => {
      assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', String(err));
      return true;
    });
  } finally {
    stall.remove();
  }
});

test('a Socket.IO error whose code is not in the catalog keeps the status its code names', async () => {
  const fault = emulator.faults.add({
    operation: 'voices.socket',
    times: 1,
    action: { type: 'status', status: 429, retryAfter: 0.05 },
  });
  try {
    const err = await client.tts.listVoices().catch((e: unknown) => e);
    assert.ok(err instanceof SpeechServiceError, String(err));
    assert.equal(err.code, 'HTTP_429');
    assert.equal(err.status, 429);
    assert.equal(err.operation, 'voices.socket');
  } finally {
    fault.remove();
  }
});

test('a Socket.IO error event is labelled with the operation of its stream', async () => {
  const fault = emulator.faults.add({
    operation: 'diarization.socket',
    times: 1,
    action: { type: 'status', status: 500, code: 'DIARIZATION_FAILED' },
  });
  try {
    const session = client.live.diarization({ transport: 'socketio', socketAcks: false });
    session.on('error', () => {}); // the failure is read from `done`
    await session.send(Buffer.alloc(3200), { final: true });
    const err = await session.done.catch((e: unknown) => e);
    assert.ok(err instanceof SpeechServiceError, String(err));
    assert.equal(err.code, 'DIARIZATION_FAILED');
    assert.equal(err.operation, 'diarization.socket');
  } finally {
    fault.remove();
  }
});

test('Socket.IO operations leave no listener on the caller signal once they settle', async () => {
  const c = newClient();
  const ctl = new AbortController();
  await c.tts.listVoices({ signal: ctl.signal }); // opens the connection with this signal
  await c.tts.synthesizeToBuffer({ text: 'Hi', transport: 'socketio', signal: ctl.signal });
  await c.tts.listVoices({ signal: ctl.signal });
  assert.equal(getEventListeners(ctl.signal, 'abort').length, 0);
});

test('an aborted Socket.IO operation leaves no acknowledgement timer running', async (t) => {
  await client.tts.listVoices(); // connected
  const stall = emulator.faults.add({ operation: 'voices.socket', action: { type: 'stall' } });
  try {
    const timers = watchTimers(t, 600_000);
    const ctl = new AbortController();
    const pending = client.tts.listVoices({ signal: ctl.signal, timeoutMs: 600_000 });
    await nextTurn(); // the event is out, waiting for its acknowledgement
    assert.equal(timers.pending(), 1);
    ctl.abort(new Error('no longer needed'));
    await assert.rejects(pending, /no longer needed/);
    assert.equal(timers.started(), 1);
    assert.equal(timers.pending(), 0);
  } finally {
    stall.remove();
  }
});

test('a timed-out or aborted acknowledgement leaves nothing in socket.io holding its payload', async () => {
  const events = resolveSocketEvents();
  const transport = new SocketTransport(
    resolveConfig({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} }),
    events,
  );
  const stall = emulator.faults.add({ operation: 'fast.socket', action: { type: 'stall' } });
  try {
    const socket = await transport.connect('fast.socket');
    // socket.io-client keeps each acknowledgement callback here until its ack or a disconnect.
    const acks = () => Object.keys((socket as unknown as { acks: object }).acks).length;
    const payload = { id: randomUuid(), language: 'en', audio: Buffer.alloc(1024 * 1024) };
    await assert.rejects(
      transport.emitWithAck('fast.socket', events.audioFile, payload, { timeoutMs: 20 }),
      (err: unknown) => err instanceof TransportError && err.code === 'ERR_TIMEOUT',
    );
    assert.equal(acks(), 0, 'the timed-out callback is gone');

    const ctl = new AbortController();
    const aborted = transport.emitWithAck('fast.socket', events.audioFile, payload, {
      timeoutMs: 600_000,
      signal: ctl.signal,
    });
    await nextTurn();
    assert.equal(acks(), 1, 'waiting for its acknowledgement');
    ctl.abort(new Error('stop'));
    await assert.rejects(aborted, /stop/);
    assert.equal(acks(), 0, 'the aborted callback is gone');
  } finally {
    stall.remove();
    transport.close();
  }
});

test('Socket.IO error payloads: retry_after is capped, an HTTP_<status> code is retryable as over HTTP', () => {
  const err = errorFromSocketPayload({ code: 'HTTP_429', retry_after: 10_000_000 }, 'voices.socket', []);
  assert.equal(err.status, 429);
  assert.equal(err.retryable, true);
  // Past 2^31-1 ms a timer fires at once: the wait would become a retry storm.
  assert.equal(err.retryAfterMs, MAX_RETRY_AFTER_MS);
  assert.equal(errorFromSocketPayload({ code: 'HTTP_503' }, 'tts.socket', []).retryable, true);
  assert.equal(errorFromSocketPayload({ code: 'HTTP_501' }, 'tts.socket', []).retryable, false);
  assert.equal(
    errorFromSocketPayload({ code: 'HTTP_503', retryable: false }, 'tts.socket', []).retryable,
    false,
  );
  assert.equal(
    errorFromSocketPayload({ code: 'TTS_VOICE_RESOLUTION_FAILED' }, 'tts.socket', []).retryable,
    false,
  );
  // The same reading as an HTTP body, whichever transport it came over.
  const body = { code: 'HTTP_502', detail: 'upstream', request_id: 'r1', data: { capacity: 3 } };
  const overHttp = errorFromResponse({ status: 502, body: JSON.stringify(body), operation: 'tts.http' });
  const overSocket = errorFromSocketPayload(body, 'tts.http', []);
  assert.deepEqual(overSocket.toJSON(), overHttp.toJSON());
  // The cap holds for any source of the value.
  const huge = new SpeechServiceError({ status: 429, code: 'X', retryable: true, retryAfterMs: 2 ** 40 });
  assert.equal(huge.retryAfterMs, MAX_RETRY_AFTER_MS);
});

test('the API key never appears in Socket.IO errors', async () => {
  const key = emulator.apiKey;
  const echo = emulator.faults.add({
    operation: 'tts.socket',
    times: 1,
    action: { type: 'status', status: 400, code: 'VALIDATION_INVALID_PARAM', detail: `bad key ${key}` },
  });
  try {
    // A negative acknowledgement whose detail echoes the key.
    const nack = await client.tts.synthesize({ text: 'Hi', transport: 'socketio' }).catch((e: unknown) => e);
    assert.ok(nack instanceof SpeechServiceError && nack.code === 'VALIDATION_INVALID_PARAM', String(nack));
    assert.ok(!shown(nack).includes(key));
    assert.match(nack.message, /\[redacted\]/);
  } finally {
    echo.remove();
  }

  const event = emulator.faults.add({
    operation: 'stt.socket',
    times: 1,
    action: { type: 'status', status: 400, code: 'VALIDATION_INVALID_PARAM', detail: `bad key ${key}` },
  });
  try {
    // The same as an `error` event (frames sent without acknowledgements).
    const session = client.live.stt({ transport: 'socketio', socketAcks: false });
    session.on('error', () => {});
    await session.send(Buffer.alloc(3200), { final: true });
    const err = await session.done.catch((e: unknown) => e);
    assert.ok(err instanceof SpeechServiceError && err.code === 'VALIDATION_INVALID_PARAM', String(err));
    assert.ok(!shown(err).includes(key));
  } finally {
    event.remove();
  }

  // A refused handshake with a wrong key: that key is the secret here.
  const wrongKey = 'sk-wrong-0123456789abcdef-socket';
  const wrong = newClient({ apiKey: wrongKey });
  const refused = await wrong.tts.listVoices().catch((e: unknown) => e);
  assert.ok(refused instanceof SpeechServiceError && refused.status === 401, String(refused));
  assert.ok(!shown(refused).includes(wrongKey));

  // A connection that cannot be made at all.
  const nowhere = newClient({ apiUrl: 'http://127.0.0.1:9', timeouts: { socketConnectMs: 2_000 } });
  const unreachable = await nowhere.tts.listVoices().catch((e: unknown) => e);
  assert.ok(unreachable instanceof TransportError && unreachable.code === 'ERR_CONNECT', String(unreachable));
  assert.ok(!shown(unreachable).includes(key));
});

test('an operation started in the turn that close() disconnects in fails at once with ERR_CLIENT_CLOSED', async () => {
  const events = resolveSocketEvents();
  const transport = new SocketTransport(
    resolveConfig({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} }),
    events,
  );
  await transport.connect('voices.socket');
  const ctl = new AbortController(); // ends the wait if the test fails
  try {
    // The operation waits one turn for the (already connected) socket; close() comes first.
    const withAck = transport.emitWithAck(
      'voices.socket',
      events.listVoices,
      {},
      {
        timeoutMs: 600_000,
        signal: ctl.signal,
      },
    );
    const withoutAck = transport.emit('stt.socket', events.audioStream, Buffer.alloc(64));
    const outcomes = [withAck, withoutAck].map((p) =>
      p.then(
        () => 'sent',
        (err: unknown) => err,
      ),
    );
    transport.close();
    await nextTurn();
    for (const outcome of outcomes) {
      const settled = await Promise.race([outcome, 'still waiting']);
      assert.ok(settled instanceof TransportError && settled.code === 'ERR_CLIENT_CLOSED', String(settled));
    }
  } finally {
    ctl.abort(new Error('test over'));
  }
});
