// sttStream through the emulator, over both transports: what only the wire shows. Frames reach
// the service (one POST per joined frame over HTTP, every frame over Socket.IO) and records come
// back; a Socket.IO connection reset restarts the session; a stream that fails or is destroyed
// has ended its sessions at the service when it closes; client.close() ends a restart's pause.
// The stream's own logic runs against the fake live service in transforms-live-stream.test.ts.

import assert from 'node:assert/strict';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { type AsrRecord, type AudioFrame, toFrames } from '../src/index.ts';
import { type SessionChange, sttStream } from '../src/transforms/live-stream.ts';
import { assertMonotonic, bulletin, collect, source } from './helpers/live-audio.ts';
import { startService } from './helpers/service.ts';

const pcm = await bulletin();
const { emulator, newClient } = await startService();

const frameOf = (audio: Buffer): AudioFrame => ({ pcm: audio, isFinal: false, language: 'en' });

for (const transport of ['http', 'socketio'] as const) {
  test(`file → toFrames → sttStream over ${transport}, by default: every frame reaches the service, complete on is_final`, async () => {
    const client = newClient();
    const before = emulator.stats();
    const records: AsrRecord[] = [];
    await pipeline(
      source(pcm),
      toFrames({ language: 'en' }),
      sttStream({ client, transport }),
      collect(records),
    );
    assert.equal(records.at(-1)!.is_final, true);
    assert.ok(records.filter((r) => r.is_speech_final).length >= 2);
    assertMonotonic(records);
    const now = emulator.stats();
    // toFrames' 100 ms frames: joined to a second per POST over HTTP, each its own over Socket.IO.
    const frames = Math.ceil(pcm.length / (transport === 'http' ? 32000 : 3200));
    assert.equal(now.framesAccepted - before.framesAccepted, frames);
    if (transport === 'http') assert.equal(now.requests['stt.http'] - before.requests['stt.http'], frames);
  });
}

test('a Socket.IO connection reset mid-stream restarts the session', async () => {
  const client = newClient();
  const fault = emulator.faults.add({ operation: 'stt.socket', nth: 3, action: { type: 'reset' } });
  const records: AsrRecord[] = [];
  const changes: SessionChange[] = [];
  const stt = sttStream({ coalesceMs: 0, client, transport: 'socketio' });
  stt.on('session', (c: SessionChange) => changes.push(c));
  await pipeline(source(pcm), toFrames({ frameMs: 500 }), stt, collect(records));
  fault.remove();
  assert.equal(changes.length, 1);
  assert.equal(changes[0]!.reason, 'restart');
  assert.notEqual(changes[0]!.id, changes[0]!.previousId);
  assert.equal(records.at(-1)!.is_final, true);
  assertMonotonic(records);
});

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: a stream that fails or is destroyed closes only once its sessions are over at the service`, async () => {
    const own = newClient();
    const running = () => own.admissionStats().find((s) => s.workload === 'realtime_asr')!.running;
    for (const how of ['destroy', 'pipeline error'] as const) {
      const before = emulator.stats().sessions.active;
      const stt = sttStream({ coalesceMs: 0, client: own, transport });
      stt.on('error', () => {});
      await new Promise<void>((resolve, reject) =>
        stt.write(frameOf(pcm.subarray(0, 32000)), (e) => (e ? reject(e) : resolve())),
      );
      assert.equal(emulator.stats().sessions.active, before + 1);
      const closed = new Promise((resolve) => stt.once('close', resolve));
      if (how === 'destroy') stt.destroy();
      else stt.destroy(new Error('a later stage failed'));
      await closed;
      // Nothing to wait for after 'close' (a pipeline settles then): no slot, nothing live there.
      assert.equal(running(), 0, `${how}: the client still holds the session's slot`);
      assert.equal(
        emulator.stats().sessions.active,
        before,
        `${how}: the stream is still live at the service`,
      );
    }
  });
}

test('client.close() during the pause before a restart fails the stream at once with ERR_CLIENT_CLOSED', {
  timeout: 20_000,
}, async () => {
  const own = newClient();
  // 30 s: within the restart bound (60 s), and a stream that sleeps it out after close() would
  // outlast the test.
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    times: 1,
    action: { type: 'status', status: 503, retryAfter: 30 },
  });
  try {
    const stt = sttStream({ coalesceMs: 0, client: own });
    stt.once('session-error', () => void own.close());
    await assert.rejects(
      pipeline(source(pcm), toFrames({ language: 'en', frameMs: 500 }), stt, collect([])),
      { name: 'TransportError', code: 'ERR_CLIENT_CLOSED' },
    );
  } finally {
    fault.remove();
  }
});
