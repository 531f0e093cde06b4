import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { SpeechServiceError, TransportError } from '../src/index.ts';
import { startService } from './helpers/service.ts';

const { emulator, client, newClient } = await startService();

const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
const activeTimers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;

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

test('an aborted Socket.IO operation leaves no acknowledgement timer running', async () => {
  await client.tts.listVoices(); // connected: the timers counted below are the operation's own
  const stall = emulator.faults.add({ operation: 'voices.socket', action: { type: 'stall' } });
  try {
    const before = activeTimers();
    const ctl = new AbortController();
    const pending = client.tts.listVoices({ signal: ctl.signal, timeoutMs: 600_000 });
    await nextTurn(); // the event is out, waiting for its acknowledgement
    assert.equal(activeTimers(), before + 1);
    ctl.abort(new Error('no longer needed'));
    await assert.rejects(pending, /no longer needed/);
    assert.equal(activeTimers(), before);
  } finally {
    stall.remove();
  }
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
