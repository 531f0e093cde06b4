import assert from 'node:assert/strict';
import { getEventListeners, once } from 'node:events';
import { test } from 'node:test';
import { LiveSession } from '../src/client/index.ts';
import type { LiveDeps } from '../src/client/live.ts';
import {
  type AsrRecord,
  DEFAULT_LIMITS,
  type DiarizationRecord,
  IncompleteStreamError,
  ProtocolError,
  SpeechServiceError,
  TransportError,
} from '../src/index.ts';
import { randomUuid } from '../src/protocol/uuid.ts';
import { until } from './helpers/emulator-fixtures.ts';
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

test('a reset in the middle of an NDJSON record is an IncompleteStreamError, not a raw reset', async () => {
  // 5 bytes into a response is inside its first record, after the 200 accepted the frame.
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
  assert.ok(err instanceof IncompleteStreamError, String(err));
  assert.equal(err.id, session.id);
  assert.equal(session.state, 'failed');
  await assert.rejects(session.done, (e: unknown) => e === err);
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

test("Socket.IO: the same 429 carries its Retry-After in the error payload's retry_after, which the session waits out", async () => {
  const fault = emulator.faults.add({
    operation: 'stt.socket',
    nth: 2,
    action: { type: 'status', status: 429, code: 'SESSION_BYTE_RATE_EXCEEDED', retryAfter: 0.05 },
  });
  const session = client.live.stt({ transport: 'socketio' });
  const waits: (number | undefined)[] = [];
  session.on('rate-limited', (err) => waits.push(err.retryAfterMs));
  await sendAll(session, pcm, 500);
  const final = await session.done;
  fault.remove();
  assert.equal(final.is_final, true);
  assert.deepEqual(waits, [50]);
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
  // The stream is ended at the service (a closing frame) before the slot is given back.
  await session.ended;
  assert.equal(emulator.stats().concurrent.realtime_asr, 0);
  const stats = client.admissionStats().find((s) => s.workload === 'realtime_asr')!;
  assert.equal(stats.running, 0);
});

const running = (c: typeof client, workload: 'realtime_asr' | 'diarization' = 'realtime_asr') =>
  c.admissionStats().find((s) => s.workload === workload)!.running;

test('a session aborted just as its slot is granted gives the slot back', async () => {
  const one = newClient({ concurrency: { realtime_asr: 1 } });
  const first = one.live.stt();
  await first.send(pcm.subarray(0, 3200));
  const second = one.live.stt();
  const sent = second.send(pcm.subarray(0, 3200)).catch(() => {});
  await until(() => one.admissionStats().find((s) => s.workload === 'realtime_asr')!.queued === 1);
  first.abort();
  // The first session's slot is free: the second one's wait ends in the same turn as this.
  await first.ended;
  second.abort();
  await sent;
  await second.ended;
  await new Promise((resolve) => setImmediate(resolve)); // a released slot leaves the queue
  assert.equal(running(one), 0, 'the slot granted to the aborted session is held for good');
});

test('invalid PCM is refused (typed) and leaves the session usable: first chunk, then final chunk', async () => {
  const own = newClient();
  const before = emulator.stats();
  const session = own.live.stt();
  await assert.rejects(
    session.send(pcm.subarray(0, 6401)),
    (err: unknown) =>
      err instanceof SpeechServiceError &&
      err.code === 'VALIDATION_INVALID_FORMAT' &&
      err.status === 400 &&
      err.origin === 'local',
  );
  assert.equal(session.state, 'idle', 'nothing was opened');
  await assert.rejects(session.send(Buffer.alloc(0), { final: true }), {
    code: 'VALIDATION_FILE_CORRUPT',
  });
  assert.equal(session.state, 'idle');
  // The next valid chunk opens the stream (it carries is_start).
  await session.send(pcm.subarray(0, 16000));
  await assert.rejects(session.send(pcm.subarray(16000, 22401), { final: true }), {
    code: 'VALIDATION_INVALID_FORMAT',
  });
  assert.equal(session.state, 'live', 'a refused final chunk does not finish the session');
  await session.send(pcm.subarray(16000, 22400), { final: true });
  assert.equal((await session.done).is_final, true);
  const now = emulator.stats();
  assert.equal(now.framesAccepted - before.framesAccepted, 2);
  assert.equal(now.rejections.SESSION_EXPIRED ?? 0, before.rejections.SESSION_EXPIRED ?? 0);
  await session.ended; // the slot is given back by then
  assert.equal(running(own), 0, 'the slot was released');
});

for (const kind of ['stt', 'diarization'] as const) {
  test(`${kind} over HTTP: concurrent send() calls go out one at a time, in call order`, async () => {
    const before = emulator.stats();
    const session = client.live.open(kind);
    const step = 16000; // 0.5 s
    const chunks = [0, 1, 2, 3].map((i) => pcm.subarray(i * step, (i + 1) * step));
    await Promise.all(chunks.map((c, i) => session.send(c, { final: i === chunks.length - 1 })));
    assert.equal((await session.done).is_final, true);
    const now = emulator.stats();
    assert.equal(now.framesAccepted - before.framesAccepted, 4);
    assert.equal(now.requests[`${kind}.http`] - before.requests[`${kind}.http`], 4);
    assert.deepEqual(now.rejections, before.rejections, 'no 409 for a frame ahead of the start frame');
  });
}

for (const code of ['RATE_LIMIT_EXCEEDED', 'CONCURRENCY_LIMIT_EXCEEDED', 'SESSION_SLOTS_EXHAUSTED']) {
  test(`a mid-session 429 ${code} is waited out and the same frame sent again; nothing lost`, async () => {
    const own = newClient();
    const session = own.live.stt();
    let rateLimited = 0;
    session.on('rate-limited', () => rateLimited++);
    await session.send(pcm.subarray(0, 16000));
    const before = emulator.stats();
    const fault = emulator.faults.add({
      operation: 'stt.http',
      times: 1,
      action: { type: 'status', status: 429, code, retryAfter: 0.05 },
    });
    await session.send(pcm.subarray(16000, 32000));
    fault.remove();
    await session.send(pcm.subarray(32000, 48000), { final: true });
    assert.equal((await session.done).is_final, true);
    const now = emulator.stats();
    assert.equal(now.requests['stt.http'] - before.requests['stt.http'], 3, 'the refused frame once more');
    assert.equal(now.framesAccepted - before.framesAccepted, 2);
    assert.equal(now.rejections[code]! - (before.rejections[code] ?? 0), 1);
    assert.equal(rateLimited, 0, "'rate-limited' is the byte-rate pacing signal only");
    assert.ok(own.admissionStats().find((s) => s.workload === 'realtime_asr')!.pauses >= 1);
  });
}

test('a 429 on the start frame is waited out in the queue; the session then completes', async () => {
  const before = emulator.stats();
  const fault = emulator.faults.add({
    operation: 'stt.http',
    times: 1,
    action: { type: 'status', status: 429, code: 'CONCURRENCY_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const session = client.live.stt();
  await sendAll(session, pcm.subarray(0, 48000), 500);
  fault.remove();
  assert.equal((await session.done).is_final, true);
  const now = emulator.stats();
  assert.equal(now.requests['stt.http'] - before.requests['stt.http'], 4, 'three frames, the first twice');
  assert.equal(now.framesAccepted - before.framesAccepted, 3);
});

test("the session's slot is held under its own signal: aborting the first send's signal later changes nothing", async () => {
  const own = newClient();
  const session = own.live.stt();
  const firstSend = new AbortController();
  await session.send(pcm.subarray(0, 16000), { signal: firstSend.signal });
  firstSend.abort(new Error('only that send'));
  await session.send(pcm.subarray(16000, 32000));
  assert.equal(running(own), 1, 'the slot is still held');
  await session.send(pcm.subarray(32000, 48000), { final: true });
  assert.equal((await session.done).is_final, true);
  await session.ended; // the slot is given back by then
  assert.equal(running(own), 0);
});

test("the session's abort listener on the caller's signal is removed when it ends", async () => {
  const controller = new AbortController();
  const session = client.live.stt({ signal: controller.signal });
  assert.equal(getEventListeners(controller.signal, 'abort').length, 1);
  await session.send(pcm.subarray(0, 16000), { final: true });
  await session.done;
  assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
  const failing = client.live.stt({ signal: controller.signal });
  failing.abort(new Error('stop'));
  await assert.rejects(failing.done);
  assert.equal(getEventListeners(controller.signal, 'abort').length, 0);
});

for (const transport of ['http', 'socketio'] as const) {
  // Before the fix the session never settled: the timeout turns that into a failure.
  test(`client.close() fails a live ${transport} session with ERR_CLIENT_CLOSED`, {
    timeout: 10_000,
  }, async () => {
    const own = newClient();
    const session = own.live.stt({ transport });
    await session.send(pcm.subarray(0, 16000));
    await own.close();
    const closed = (err: unknown) => err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED';
    await assert.rejects(session.done, closed);
    await assert.rejects(session.send(pcm.subarray(16000, 32000), { final: true }), closed);
    assert.equal(session.state, 'failed');
  });

  // A frame's attempt is not joined with the client's closing signal (a composite signal per
  // frame cost more than the frame): close() aborting the session is what ends it.
  test(`client.close() ends a live ${transport} frame the service holds, with ERR_CLIENT_CLOSED`, {
    timeout: 10_000,
  }, async () => {
    const own = newClient();
    const session = own.live.stt({ transport });
    await session.send(pcm.subarray(0, 16000));
    const operation = transport === 'http' ? 'stt.http' : 'stt.socket';
    const stalls = emulator.stats().faultsApplied.stall ?? 0;
    const fault = emulator.faults.add({ operation, times: 1, action: { type: 'stall' } });
    try {
      const held = session.send(pcm.subarray(16000, 32000)).catch((err: unknown) => err);
      await until(() => (emulator.stats().faultsApplied.stall ?? 0) > stalls, 'the frame is held');
      await own.close();
      const err = await held;
      assert.ok(err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED', String(err));
      assert.equal(session.state, 'failed');
    } finally {
      fault.remove();
    }
  });
}

// The emulator's refusal of a second POST in flight for one diarization stream (DECISIONS,
// "Overlapping POSTs"), sent as a fault so that it comes on a chosen frame.
const inFlightBody = JSON.stringify({
  error: 'Too Many Requests',
  code: 'CONCURRENCY_LIMIT_EXCEEDED',
  detail: 'another request for this stream is in flight',
  retryable: true,
  timestamp: new Date().toISOString(),
  data: { limit: 1, observed: 2, unit: 'requests', bound: 'stream_requests_in_flight' },
});

for (const [where, nth] of [
  ['start', 1],
  ['later', 2],
] as const) {
  test(`diarization: a ${where} frame refused as a second POST in flight is sent again; the workload is neither paused nor narrowed`, async () => {
    const own = newClient();
    const before = emulator.stats();
    const fault = emulator.faults.add({
      operation: 'diarization.http',
      nth,
      times: 1,
      action: {
        type: 'status',
        status: 429,
        retryAfter: 0.05,
        rawBody: inFlightBody,
        contentType: 'application/json',
      },
    });
    try {
      const session = own.live.diarization();
      await sendAll(session, pcm.subarray(0, 48000), 500);
      assert.equal((await session.done).is_final, true);
    } finally {
      fault.remove();
    }
    const now = emulator.stats();
    assert.equal(
      now.requests['diarization.http'] - before.requests['diarization.http'],
      4,
      'one frame twice',
    );
    assert.equal(now.framesAccepted - before.framesAccepted, 3);
    const lane = own.admissionStats().find((s) => s.workload === 'diarization')!;
    assert.equal(lane.pauses, 0);
    assert.equal(lane.retries, 0);
    assert.equal(lane.concurrency, lane.limit);
  });
}

test('live sessions add no listener to the client-wide signal; the client tracks only sessions in use', () => {
  const closing = new AbortController();
  const sessions = new Set<LiveSession>();
  // Nothing below sends: the channels are never used.
  const channel = () => ({
    send: async () => {},
    pause() {},
    resume() {},
    cancel: async () => {},
    close() {},
  });
  const deps = { closed: closing.signal, sessions, limits: DEFAULT_LIMITS, channel } as unknown as LiveDeps;
  const unused = Array.from({ length: 20 }, () => new LiveSession('stt', deps));
  assert.equal(getEventListeners(closing.signal, 'abort').length, 0);
  assert.equal(sessions.size, 0, 'a session not yet used is not kept by the client');
  const iterated = unused[0]!;
  iterated.records();
  assert.deepEqual([...sessions], [iterated]);
  iterated.abort(new Error('done with it'));
  assert.equal(sessions.size, 0, 'a session leaves when it ends');
});

test('client.close() fails the live sessions in use; one first used after it fails at once', async () => {
  const own = newClient();
  const unused = own.live.stt();
  const sending = Array.from({ length: 3 }, () => own.live.stt());
  await Promise.all(sending.map((s) => s.send(pcm.subarray(0, 16000))));
  const iterated = own.live.stt();
  const iteration = (async () => {
    for await (const _ of iterated);
  })().catch((e: unknown) => e);
  await own.close();
  const closed = (err: unknown) => err instanceof TransportError && err.code === 'ERR_CLIENT_CLOSED';
  for (const session of sending) {
    await assert.rejects(session.done, closed);
    assert.equal(session.state, 'failed');
  }
  assert.ok(closed(await iteration), 'an iterated session is failed too');
  await assert.rejects(unused.send(pcm.subarray(0, 16000)), closed);
  await assert.rejects(own.live.stt().send(pcm.subarray(0, 16000)), closed);
});

test('live over HTTP: records before a bad NDJSON line are delivered, then the session fails', async () => {
  const streamId = randomUuid();
  const record = {
    id: streamId,
    seq: 0,
    transcription: 'hi',
    words: [],
    is_speech_final: false,
    is_final: false,
  };
  const fault = emulator.faults.add({
    operation: 'stt.http',
    times: 1,
    action: {
      type: 'status',
      status: 200,
      rawBody: `${JSON.stringify(record)}\n{not json}\n`,
      contentType: 'application/x-ndjson',
    },
  });
  try {
    const session = client.live.stt({ streamId });
    const records: AsrRecord[] = [];
    session.on('record', (r: AsrRecord) => records.push(r));
    await session.send(pcm.subarray(0, 16000));
    const err = await session.done.catch((e: unknown) => e);
    assert.deepEqual(records, [record]);
    assert.ok(err instanceof ProtocolError && err.code === 'ERR_NDJSON_INVALID_JSON', String(err));
  } finally {
    fault.remove();
  }
});

for (const transport of ['http', 'socketio'] as const) {
  test(`${transport}: a session failed by a 503 is ended at the service even when its closing frame meets a 503 too`, async () => {
    const session = client.live.stt({ transport });
    await session.send(pcm.subarray(0, 3200));
    const live = emulator.stats().sessions.active;
    const fault = emulator.faults.add({
      operation: transport === 'http' ? 'stt.http' : 'stt.socket',
      times: 2, // the frame, then the first closing frame
      action: { type: 'status', status: 503, retryAfter: 0.05 },
    });
    try {
      await assert.rejects(session.send(pcm.subarray(0, 3200)), { status: 503 });
      await session.ended;
      assert.equal(emulator.stats().sessions.active, live - 1, 'the stream is still live at the service');
    } finally {
      fault.remove();
    }
  });
}

test("a send's signal ends its wait for a consumer that takes no more records", {
  timeout: 10_000,
}, async () => {
  const session = client.live.stt({ transport: 'http' });
  await session.send(pcm.subarray(0, 3200));
  session.pause(); // the consumer is full: sends wait for it
  const reason = new Error('gave up on this frame');
  const ctl = new AbortController();
  const sent = session.send(pcm.subarray(0, 3200), { signal: ctl.signal });
  ctl.abort(reason);
  await assert.rejects(sent, (err: unknown) => err === reason);
  await session.ended;
  assert.equal(running(client), 0);
});

test("a send's signal ends its wait for the previous answer, read slowly for a full consumer", {
  timeout: 10_000,
}, async () => {
  const slow = emulator.faults.add({
    operation: 'stt.http',
    action: { type: 'slowBody', bytesPerSecond: 2000 },
  });
  try {
    const session = client.live.stt({ transport: 'http', highWaterMark: 1, language: 'en' });
    session.records(); // never read: one record fills it
    await session.send(pcm.subarray(0, 32000)); // its answer's records still to come
    const ctl = new AbortController();
    const sent = session.send(pcm.subarray(32000, 64000), { signal: ctl.signal });
    await once(session, 'record'); // the consumer is full now; the answer waits for it
    const reason = new Error('gave up on this frame');
    ctl.abort(reason);
    await assert.rejects(sent, (err: unknown) => err === reason);
    await session.ended;
  } finally {
    slow.remove();
  }
});

test('Socket.IO: two live sessions with the same id run on connections of their own; each completes with its own records', async () => {
  const streamId = crypto.randomUUID();
  const sessions = [0, 1].map(() => client.live.stt({ transport: 'socketio', language: 'en', streamId }));
  const records: AsrRecord[][] = [[], []];
  sessions.forEach((s, i) => {
    s.on('record', (r: AsrRecord) => records[i]!.push(r));
  });
  // The second is half as long: had it taken the first's records (one connection, routed by
  // id), the two would end alike.
  await Promise.all([sendAll(sessions[0]!, pcm), sendAll(sessions[1]!, pcm.subarray(0, pcm.length / 2))]);
  const finals = await Promise.all(sessions.map((s) => s.done));
  for (const final of finals) assert.equal(final.is_final, true);
  const lastWord = (rs: AsrRecord[]) => Math.max(...rs.flatMap((r) => r.words.map((w) => w.end_time)));
  assert.ok(lastWord(records[0]!) > lastWord(records[1]!) + 1, 'each session heard its own audio');
  assert.equal(running(client), 0);
});
