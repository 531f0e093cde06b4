import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LiveSession } from '../src/client/index.ts';
import type { AsrRecord, DiarizationRecord } from '../src/index.ts';
import { IncompleteStreamError, SpeechServiceError } from '../src/index.ts';
import { startService } from './helpers/service.ts';
import { speechWithPauses } from './helpers/speech.ts';

const pcm = await speechWithPauses(
  ['Hello there, this is a live test.', 'Here comes a second sentence after a pause.'],
  900,
);
const { emulator, client, newClient } = await startService();

/** Send `audio` in `frameMs` chunks, the last one final. */
async function sendAll(session: LiveSession, audio: Buffer, frameMs = 200): Promise<void> {
  const step = (16000 * 2 * frameMs) / 1000;
  for (let at = 0; at < audio.length; at += step) {
    const end = Math.min(audio.length, at + step);
    await session.send(audio.subarray(at, end), { final: end >= audio.length });
  }
}

for (const transport of ['http', 'socketio'] as const) {
  test(`realtime ASR over ${transport}: records in order, is_speech_final at pauses, completion on is_final`, async () => {
    const session = client.live.stt({ transport, language: 'en' });
    const records: AsrRecord[] = [];
    const iterate = (async () => {
      for await (const r of session) records.push(r);
    })();
    await sendAll(session, pcm);
    const final = await session.done;
    await iterate;
    assert.equal(final.is_final, true);
    assert.equal(records.at(-1), final);
    assert.ok(
      records.some((r) => r.is_speech_final),
      'an utterance boundary at the pause',
    );
    assert.equal(session.state, 'finished');
  });

  test(`realtime diarization over ${transport}: final record completes, segments well-formed`, async () => {
    const session = client.live.diarization({ transport });
    const records: DiarizationRecord[] = [];
    session.on('record', (r: DiarizationRecord) => records.push(r));
    await sendAll(session, pcm, 500);
    const final = await session.done;
    assert.equal(final.is_final, true);
    const closed = records.flatMap((r) => r.final_segments);
    assert.ok(closed.length + final.active_segments.length > 0);
  });
}

test('the final request bit is not completion: a final response without is_final is incomplete', async () => {
  const fault = emulator.faults.add({ operation: 'stt.http', action: { type: 'endWithoutFinal' } });
  const session = client.live.stt();
  const err = await sendAll(session, pcm.subarray(0, 32000), 500)
    .then(() => session.done)
    .catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof IncompleteStreamError, String(err));
});

test('a reset in the middle of an NDJSON response is an IncompleteStreamError', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'reset', afterBytes: 5 },
  });
  const session = client.live.stt();
  const err = await sendAll(session, pcm, 500)
    .then(() => session.done)
    .catch((e: unknown) => e);
  fault.remove();
  assert.ok(
    err instanceof IncompleteStreamError || (err as { code?: string }).code === 'ERR_CONNECTION_RESET',
    String(err),
  );
  assert.equal(session.state, 'failed');
});

test('409 SESSION_EXPIRED fails the session with a typed error (the caller restarts with a new id)', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' },
  });
  const session = client.live.stt();
  const err = await sendAll(session, pcm, 500).catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof SpeechServiceError && err.status === 409 && err.code === 'SESSION_EXPIRED');
  await assert.rejects(session.done);
});

test('429 SESSION_BYTE_RATE_EXCEEDED resends the same frame after Retry-After; the session completes', async () => {
  const fault = emulator.faults.add({
    operation: 'stt.http',
    nth: 2,
    action: { type: 'status', status: 429, code: 'SESSION_BYTE_RATE_EXCEEDED', retryAfter: 0.05 },
  });
  const session = client.live.stt();
  let limited = 0;
  session.on('rate-limited', () => limited++);
  await sendAll(session, pcm, 500);
  const final = await session.done;
  fault.remove();
  assert.equal(final.is_final, true);
  assert.equal(limited, 1);
});

test('admission: sessions beyond the plan limit wait for a slot instead of failing', async () => {
  const limited = newClient({ concurrency: { realtime_asr: 2 } });
  const sessions = Array.from({ length: 5 }, () => limited.live.stt());
  const chunk = pcm.subarray(0, 16000);
  await Promise.all(sessions.map((s) => s.send(chunk, { final: true }).then(() => s.done)));
  assert.ok(emulator.stats().sessions.finished >= 5);
});

test('abort cancels what is in flight and releases the slot', async () => {
  const session = client.live.stt();
  await session.send(pcm.subarray(0, 16000));
  const reason = new Error('user stopped');
  session.abort(reason);
  await assert.rejects(session.done, (err: unknown) => err === reason);
  await assert.rejects(session.send(pcm.subarray(0, 16000)), (err: unknown) => err === reason);
  assert.equal(session.state, 'failed');
  const stats = client.admissionStats().find((s) => s.workload === 'realtime_asr')!;
  assert.equal(stats.running, 0);
});
