import assert from 'node:assert/strict';
import type { Readable } from 'node:stream';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { HttpTransport } from '../src/client/http.ts';
import { Admission, DEFAULT_TIMEOUTS, RetryPolicy, type SpeechClient, TtsApi } from '../src/client/index.ts';
import type { Route, SocketTransport } from '../src/client/socket.ts';
import { DEFAULT_LIMITS, IncompleteStreamError, SpeechServiceError, TransportError } from '../src/index.ts';
import { resolveSocketEvents } from '../src/protocol/socket-events.ts';
import { startService } from './helpers/service.ts';
import { watchTimers } from './helpers/timers.ts';

const { emulator, client, newClient } = await startService();

/** The TTS admission stats, once the queue has caught up with a released slot. */
async function ttsStats(c: SpeechClient = client) {
  await new Promise((resolve) => setImmediate(resolve));
  return c.admissionStats().find((s) => s.workload === 'tts')!;
}

/** Read `audio` to its end; the error it ends with, if any. */
const drain = (audio: Readable) =>
  (async () => {
    for await (const _ of audio);
  })().then(
    () => undefined,
    (e: unknown) => e,
  );

/** Wait for a condition the client reaches on its own (no timing is asserted). */
async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await sleep(10);
}

test('TTS over HTTP gives 16 kHz PCM; longer text, longer audio', async () => {
  const short = await client.tts.synthesizeToBuffer({ text: 'Hello.' });
  const long = await client.tts.synthesizeToBuffer({
    text: 'Hello. This sentence is quite a bit longer than the first one.',
  });
  assert.equal(short.sampleRate, 16000);
  assert.ok(short.pcm.length > 0 && short.pcm.length % 2 === 0);
  assert.ok(long.pcm.length > short.pcm.length);
});

test('TTS over Socket.IO gives playable 24 kHz PCM', async () => {
  const out = await client.tts.synthesizeToBuffer({ text: 'Hello from the socket.', transport: 'socketio' });
  assert.equal(out.sampleRate, 24000);
  assert.ok(out.pcm.length > 0 && out.pcm.length % 2 === 0);
});

test('listVoices returns the seven voice profiles; a listed voice synthesizes', async () => {
  const voices = await client.tts.listVoices();
  assert.equal(voices.length, 7);
  const out = await client.tts.synthesizeToBuffer({ text: 'Hi', voiceId: voices[0]!.id });
  assert.ok(out.pcm.length > 0);
});

test('an unknown voice is 400 TTS_VOICE_NOT_FOUND, not retried', async () => {
  const before = emulator.stats().requests['tts.http'];
  await assert.rejects(
    client.tts.synthesize({ text: 'Hi', voiceId: '1b4e28ba-2fa1-41d2-883f-0016d3cca427' }),
    {
      status: 400,
      code: 'TTS_VOICE_NOT_FOUND',
    },
  );
  assert.equal(emulator.stats().requests['tts.http'] - before, 1);
});

test('pre-flight: text over the tier limit fails before anything is sent', async () => {
  const before = emulator.stats().requests['tts.http'];
  await assert.rejects(client.tts.synthesize({ text: 'a'.repeat(501) }), (err: unknown) => {
    return (
      err instanceof SpeechServiceError &&
      err.status === 422 &&
      err.code === 'CHARACTER_COUNT_EXCEEDED' &&
      err.origin === 'local'
    );
  });
  await assert.rejects(client.tts.synthesize({ text: '   ' }), { code: 'VALIDATION_REQUIRED_FIELD' });
  assert.equal(emulator.stats().requests['tts.http'], before);
});

test('a TTS body truncated before its final frame is an error on the audio stream', async () => {
  const fault = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'truncateTts', afterBytes: 3000 },
  });
  const synthesis = await client.tts.synthesize({ text: 'This audio will be cut short by the emulator.' });
  const err = await (async () => {
    for await (const _ of synthesis.audio);
  })().catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof IncompleteStreamError, String(err));
});

test('TTS over HTTP: the audio that came before a truncation is delivered, then the error', async () => {
  const fault = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'truncateTts', afterBytes: 3000 },
  });
  try {
    // 3000 bytes are less than the demuxer gathers before parsing: all of it is decoded at the
    // end of the body, where the missing final frame is found.
    const synthesis = await client.tts.synthesize({ text: 'This audio will be cut short by the emulator.' });
    let bytes = 0;
    const err = await (async () => {
      for await (const chunk of synthesis.audio) bytes += (chunk as Buffer).length;
    })().catch((e: unknown) => e);
    assert.ok(err instanceof IncompleteStreamError, String(err));
    assert.ok(bytes > 0 && bytes % 2 === 0, `${bytes} bytes of audio before the error`);
  } finally {
    fault.remove();
  }
});

test('synthesizeToBuffer speaks a synthesis cut mid-audio again, over both transports; it gives up after retry.maxAttempts', {
  timeout: 30_000,
}, async () => {
  const text = 'This audio will be cut short by the emulator, then spoken again.';
  for (const transport of ['http', 'socketio'] as const) {
    const op = transport === 'http' ? 'tts.http' : 'tts.socket';
    const whole = await client.tts.synthesizeToBuffer({ text, transport });
    const before = emulator.stats().requests[op];
    const fault = emulator.faults.add({
      operation: op,
      times: 1,
      action: { type: 'truncateTts', afterBytes: 3000 },
    });
    const short = newClient({ timeouts: { bodyIdleMs: 300 } });
    try {
      const again = await short.tts.synthesizeToBuffer({ text, transport });
      assert.equal(emulator.stats().requests[op], before + 2, 'the cut synthesis and one more');
      assert.equal(again.pcm.length, whole.pcm.length, 'all of the audio, none of it twice');
      assert.notEqual(again.id, undefined);
    } finally {
      fault.remove();
    }
    // Cut every time: the error once the attempts are used up, and no slot held.
    const always = emulator.faults.add({
      operation: op,
      times: 100,
      action: { type: 'truncateTts', afterBytes: 3000 },
    });
    const twice = newClient({
      retry: { maxAttempts: 2, baseMs: 10, maxMs: 20 },
      timeouts: { bodyIdleMs: 300 },
    });
    try {
      const from = emulator.stats().requests[op];
      const err = await twice.tts.synthesizeToBuffer({ text, transport }).catch((e: unknown) => e);
      assert.ok(err instanceof IncompleteStreamError, String(err));
      assert.equal(emulator.stats().requests[op], from + 2);
      assert.equal((await ttsStats(twice)).running, 0);
    } finally {
      always.remove();
    }
  }
});

test('synthesizeToBuffer: every attempt counts toward retry.maxAttempts, those refused before output after a cut too', async () => {
  // The first synthesis is cut mid-audio; every one after it is refused with a retryable 503.
  const cut = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'truncateTts', afterBytes: 3000 },
  });
  const busy = emulator.faults.add({
    operation: 'tts.http',
    nth: 2,
    times: 100,
    action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE' },
  });
  const c = newClient({ retry: { maxAttempts: 3, baseMs: 1, maxMs: 2 }, timeouts: { bodyIdleMs: 300 } });
  try {
    const from = emulator.stats().requests['tts.http'];
    const err = await c.tts.synthesizeToBuffer({ text: 'Cut, then refused.' }).catch((e: unknown) => e);
    assert.ok(err instanceof SpeechServiceError && err.status === 503, String(err));
    assert.equal(emulator.stats().requests['tts.http'] - from, 3, 'three attempts in all, not 1 + 3');
    assert.equal((await ttsStats(c)).running, 0);
  } finally {
    cut.remove();
    busy.remove();
  }
});

test('synthesizeToBuffer: audio over maxBufferedBytes is not spoken again (the same burst passes it again)', async () => {
  const c = newClient({ retry: { maxAttempts: 4, baseMs: 1, maxMs: 2 } });
  const from = emulator.stats().requests['tts.socket'];
  const err = await c.tts
    .synthesizeToBuffer({
      text: 'A bound below one event of audio.',
      transport: 'socketio',
      maxBufferedBytes: 10,
    })
    .catch((e: unknown) => e);
  assert.ok(err instanceof IncompleteStreamError && /maxBufferedBytes/.test(err.message), String(err));
  assert.equal(emulator.stats().requests['tts.socket'] - from, 1);
  assert.equal((await ttsStats(c)).running, 0);
});

test('synthesizeToBuffer: an abort during the pause before speaking again ends it with the abort', {
  timeout: 10_000,
}, async () => {
  const fault = emulator.faults.add({
    operation: 'tts.http',
    times: 100,
    action: { type: 'truncateTts', afterBytes: 3000 },
  });
  // A minute's pause between attempts: only the abort ends it within the test's time.
  const slow = newClient({ retry: { baseMs: 60_000, maxMs: 60_000 } });
  try {
    const ctl = new AbortController();
    const before = emulator.stats().requests['tts.http'];
    const pending = slow.tts.synthesizeToBuffer({ text: 'Cut, then a long pause.', signal: ctl.signal });
    pending.catch(() => {});
    // The first attempt was made and cut (its slot given back): the pause has begun.
    await until(
      async () =>
        emulator.stats().requests['tts.http'] === before + 1 && (await ttsStats(slow)).running === 0,
    );
    ctl.abort(new Error('stopped while pausing'));
    await assert.rejects(pending, /stopped while pausing/);
    assert.equal(emulator.stats().requests['tts.http'], before + 1, 'not spoken again');
  } finally {
    fault.remove();
  }
});

test('429 concurrency is waited out; a 503 before output is retried with a fresh id', async () => {
  const f1 = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'status', status: 429, code: 'CONCURRENCY_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const f2 = emulator.faults.add({
    operation: 'tts.http',
    nth: 2,
    action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE' },
  });
  const out = await client.tts.synthesizeToBuffer({ text: 'Eventually this works.' });
  f1.remove();
  f2.remove();
  assert.ok(out.pcm.length > 0);
});

test('Socket.IO TTS: a connection lost before the acknowledgement rejects typed, and is retried', async () => {
  const once = newClient({ retry: { maxAttempts: 1 } });
  const reset = emulator.faults.add({ operation: 'tts.socket', times: 1, action: { type: 'reset' } });
  try {
    const err = await once.tts
      .synthesize({ text: 'Hello there.', transport: 'socketio' })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TransportError && err.code === 'ERR_SOCKET_DISCONNECTED', String(err));
  } finally {
    reset.remove();
  }
  assert.equal((await ttsStats(once)).running, 0);

  const again = emulator.faults.add({ operation: 'tts.socket', times: 1, action: { type: 'reset' } });
  const before = emulator.stats().requests['tts.socket'];
  try {
    const out = await client.tts.synthesizeToBuffer({ text: 'Hello there.', transport: 'socketio' });
    assert.ok(out.pcm.length > 0);
  } finally {
    again.remove();
  }
  assert.equal(emulator.stats().requests['tts.socket'] - before, 2);
});

test('Socket.IO TTS: a failure before the caller reads waits for the reader, never crashes', async () => {
  const c = newClient();
  const synthesis = await c.tts.synthesize({
    text: 'Hello there, a somewhat longer sentence to synthesize.',
    transport: 'socketio',
  });
  await c.close();
  // An error destroyed into a stream no one listens to would be thrown (uncaught) on the next
  // tick, failing the file: by the next turn of the event loop it would have been.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(synthesis.audio.destroyed, false, 'the failure waits for a reader');
  const err = await drain(synthesis.audio);
  assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', String(err));
});

test('Socket.IO TTS truncated before its final event is an IncompleteStreamError; the slot is released', {
  timeout: 20_000,
}, async () => {
  const fault = emulator.faults.add({
    operation: 'tts.socket',
    times: 2,
    action: { type: 'truncateTts', afterBytes: 20_000 },
  });
  try {
    const text = 'This audio will be cut short by the emulator.';
    // synthesize(), not synthesizeToBuffer(): that one speaks a cut synthesis again.
    const perCall = await drain(
      (await client.tts.synthesize({ text, transport: 'socketio', idleTimeoutMs: 200 })).audio,
    );
    assert.ok(perCall instanceof IncompleteStreamError, String(perCall));
    assert.equal(perCall.operation, 'tts.socket');
    assert.ok(perCall.received > 0);
    assert.equal((await ttsStats()).running, 0);

    // Without the option, the client's body-idle timeout applies, as over HTTP.
    const short = newClient({ timeouts: { bodyIdleMs: 200 } });
    const viaClient = await drain((await short.tts.synthesize({ text, transport: 'socketio' })).audio);
    assert.ok(viaClient instanceof IncompleteStreamError, String(viaClient));
    assert.equal((await ttsStats(short)).running, 0);
  } finally {
    fault.remove();
  }
});

test('Socket.IO TTS: the acknowledgement timeout is configurable per call', { timeout: 20_000 }, async () => {
  const once = newClient({ retry: { maxAttempts: 1 } });
  const stall = emulator.faults.add({ operation: 'tts.socket', action: { type: 'stall' } });
  try {
    const err = await once.tts
      .synthesize({ text: 'Hi', transport: 'socketio', ackTimeoutMs: 100 })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TransportError && err.code === 'ERR_TIMEOUT', String(err));
    assert.match(err.message, /within 100 ms/);
  } finally {
    stall.remove();
  }
  assert.equal((await ttsStats(once)).running, 0);
});

test('abort of a Socket.IO TTS releases the admission slot, before and after output began', async () => {
  const stall = emulator.faults.add({ operation: 'tts.socket', action: { type: 'stall' } });
  try {
    const ctl = new AbortController();
    const pending = client.tts.synthesize({ text: 'Hi', transport: 'socketio', signal: ctl.signal });
    await until(async () => (await ttsStats()).running === 1);
    ctl.abort(new Error('stop before the acknowledgement'));
    await assert.rejects(pending, /stop before the acknowledgement/);
    assert.equal((await ttsStats()).running, 0);
  } finally {
    stall.remove();
  }

  const ctl = new AbortController();
  const synthesis = await client.tts.synthesize({
    text: 'A long enough sentence that it is still playing when the caller aborts it.',
    transport: 'socketio',
    signal: ctl.signal,
  });
  const err = await (async () => {
    for await (const _ of synthesis.audio) ctl.abort(new Error('stop during the audio'));
  })().catch((e: unknown) => e);
  assert.match(String(err), /stop during the audio/);
  assert.equal((await ttsStats()).running, 0);
});

test('Socket.IO TTS: audio no one reads is buffered up to maxBufferedBytes, then fails typed', async () => {
  const synthesis = await client.tts.synthesize({
    text: 'Nobody reads this audio while it arrives, so the client stops buffering it.',
    transport: 'socketio',
    maxBufferedBytes: 8192,
  });
  await until(async () => (await ttsStats()).running === 0);
  const err = await drain(synthesis.audio);
  assert.ok(err instanceof IncompleteStreamError, String(err));
  assert.match(err.message, /maxBufferedBytes 8192/);
});

test('Socket.IO TTS whose final audio event comes before the acknowledgement leaves no idle timer', async (t) => {
  const events = resolveSocketEvents();
  const routes = new Map<string, Route>();
  // A transport on which the whole synthesis arrives before its acknowledgement.
  const socket = {
    events,
    route(id: string, route: Route) {
      routes.set(id, route);
      return () => routes.delete(id);
    },
    async emitWithAck(_operation: string, _event: string, payload: { id: string }) {
      const route = routes.get(payload.id)!;
      route.onResult(events.ttsAudio, { id: payload.id, audio: Buffer.alloc(4800), is_final: false });
      route.onResult(events.ttsAudio, { id: payload.id, audio: Buffer.alloc(0), is_final: true });
      return { ok: true };
    },
    ackError: () => undefined,
  } as unknown as SocketTransport;
  const idleMs = 987_654;
  const admission = new Admission();
  t.after(() => admission.close());
  const tts = new TtsApi({
    http: { timeouts: { ...DEFAULT_TIMEOUTS, bodyIdleMs: idleMs } } as HttpTransport,
    socket,
    policy: new RetryPolicy({ admission }),
    limits: DEFAULT_LIMITS,
    tier: undefined,
    realtimePrefix: '',
  });
  const timers = watchTimers(t, idleMs);
  const out = await tts.synthesizeToBuffer({ text: 'Hi', transport: 'socketio' });
  assert.equal(out.pcm.length, 4800);
  assert.equal(timers.pending(), 0, 'no idle timer outlives the synthesis');
  assert.equal(admission.stats().find((s) => s.workload === 'tts')!.running, 0);
});

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport} TTS aborted after output began and never read: the slot is released at once`, async () => {
    const own = newClient({ concurrency: { tts: 1 } });
    const ctl = new AbortController();
    const synthesis = await own.tts.synthesize({
      text: 'A sentence nobody listens to.',
      transport,
      signal: ctl.signal,
    });
    const reason = new Error('the caller gave up');
    ctl.abort(reason);
    // No read, no destroy: the abort alone gives the slot back, and the next synthesis runs.
    assert.equal((await ttsStats(own)).running, 0);
    const next = await own.tts.synthesizeToBuffer({ text: 'Next one.', transport });
    assert.ok(next.pcm.length > 0);
    // Read later, the audio says why it ended.
    assert.equal(await drain(synthesis.audio), reason);
  });
}
