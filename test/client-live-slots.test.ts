// A live session's admission slot is the service's too: held from the first frame until the
// stream is over there, whichever way the session ends. Against a channel scripted by the test.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Admission, RetryPolicy } from '../src/client/index.ts';
import { LiveSession } from '../src/client/live.ts';
import type { ChannelListener, LiveChannel } from '../src/client/live-channel.ts';
import { SpeechServiceError } from '../src/protocol/errors.ts';
import { DEFAULT_LIMITS } from '../src/protocol/limits.ts';

/** A channel whose frames and cancel the test settles by hand. */
function scripted() {
  const sends: { resolve(): void; reject(err: unknown): void }[] = [];
  let endCancel!: () => void;
  let cancels = 0;
  let listener!: ChannelListener;
  const channel: LiveChannel = {
    send: (_frame, signal) =>
      new Promise<void>((resolve, reject) => {
        sends.push({ resolve, reject });
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
    pause() {},
    resume() {},
    cancel: () => {
      cancels++;
      return new Promise<void>((resolve) => (endCancel = resolve));
    },
    close() {},
  };
  return {
    factory: (_k: unknown, _t: unknown, l: ChannelListener) => {
      listener = l;
      return channel;
    },
    sends,
    get cancels() {
      return cancels;
    },
    endCancel: () => endCancel(),
    get listener() {
      return listener;
    },
  };
}

const running = (admission: Admission) =>
  admission.stats().find((s) => s.workload === 'realtime_asr')!.running;
const settle = () => new Promise((resolve) => setImmediate(resolve));

function session(channel: ReturnType<typeof scripted>, admission: Admission) {
  const policy = new RetryPolicy({ admission, retry: { baseMs: 1, maxMs: 2 } });
  return new LiveSession('stt', {
    channel: channel.factory as never,
    policy,
    admission,
    limits: DEFAULT_LIMITS,
  });
}

test('aborted while the service holds its first frame: the slot is held until the stream is ended there', async () => {
  const admission = new Admission({ concurrency: { realtime_asr: 1 } });
  const channel = scripted();
  const s = session(channel, admission);
  const first = s.send(Buffer.alloc(3200)).catch((e: unknown) => e);
  await settle();
  assert.equal(channel.sends.length, 1, 'the frame went out');
  s.abort(new Error('stop'));
  await first;
  assert.equal(channel.cancels, 1, 'the stream is ended at the service');
  assert.equal(running(admission), 1, 'the slot is held while it is ended there');
  channel.endCancel();
  await s.ended;
  assert.equal(running(admission), 0);
  admission.close();
});

test('a 429 on the first frame that is retried gives its slot back before the next attempt: none is left held', async () => {
  const admission = new Admission({ concurrency: { realtime_asr: 2 } });
  const channel = scripted();
  const s = session(channel, admission);
  const sent = s.send(Buffer.alloc(3200));
  await settle();
  channel.sends[0]!.reject(
    new SpeechServiceError({
      status: 429,
      code: 'SESSION_BYTE_RATE_EXCEEDED',
      retryable: true,
      retryAfterMs: 1,
    }),
  );
  while (channel.sends.length < 2) await settle();
  assert.equal(running(admission), 1, 'one slot, for the attempt under way');
  channel.sends[1]!.resolve();
  await sent;
  channel.listener.record({
    id: s.id,
    seq: 0,
    transcription: '',
    words: [],
    is_speech_final: false,
    is_final: true,
  });
  await s.ended;
  assert.equal(running(admission), 0);
  admission.close();
});

test('a first frame refused for admission opens nothing: no cancel, the slot back at once', async () => {
  const admission = new Admission({ concurrency: { realtime_asr: 1 }, backoff: { baseMs: 1, maxMs: 2 } });
  const channel = scripted();
  const policy = new RetryPolicy({ admission, maxAdmissionRetries: 0 });
  const s = new LiveSession('stt', { channel: channel.factory as never, policy, limits: DEFAULT_LIMITS });
  const sent = s.send(Buffer.alloc(3200)).catch((e: unknown) => e);
  await settle();
  channel.sends[0]!.reject(
    new SpeechServiceError({
      status: 429,
      code: 'CONCURRENCY_LIMIT_EXCEEDED',
      retryable: true,
      retryAfterMs: 1,
    }),
  );
  assert.ok((await sent) instanceof SpeechServiceError);
  await s.ended;
  assert.equal(channel.cancels, 0);
  assert.equal(running(admission), 0);
  admission.close();
});

// A later frame's 429 that cannot be waited out fails the session at once, without a resend.
const unwaitable = [
  {
    why: 'the service marks it not retryable (a quota spent)',
    refusal: () =>
      new SpeechServiceError({
        status: 429,
        code: 'QUOTA_EXCEEDED',
        retryable: false,
        detail: 'the monthly quota is spent',
      }),
  },
  {
    // Waited out, the session would have taken no audio for longer than the service keeps it.
    why: "its Retry-After outlasts the service's stream expiry",
    refusal: () =>
      new SpeechServiceError({
        status: 429,
        code: 'SESSION_BYTE_RATE_EXCEEDED',
        retryable: true,
        detail: 'slow down',
        retryAfterMs: (DEFAULT_LIMITS.sessionExpirySec + 1) * 1000,
      }),
  },
];
for (const { why, refusal } of unwaitable) {
  test(`a later frame refused with a 429 that cannot be waited out, as ${why}, fails the session at once: it is not resent`, {
    timeout: 10_000,
  }, async () => {
    const admission = new Admission();
    const channel = scripted();
    const live = session(channel, admission);
    const first = live.send(Buffer.alloc(3200));
    await settle();
    channel.sends[0]!.resolve();
    await first;
    const second = live.send(Buffer.alloc(3200));
    await settle();
    const refused = refusal();
    channel.sends[1]!.reject(refused);
    second.catch(() => {});
    while (live.state !== 'failed' && channel.sends.length === 2) await settle();
    assert.equal(channel.sends.length, 2, 'the refused frame was sent again');
    await assert.rejects(second, (err) => err === refused);
    channel.endCancel();
    await live.ended;
    assert.equal(running(admission), 0);
  });
}

test('a session aborted just as its first frame is granted the slot: the slot is back by the time it has ended', async () => {
  const admission = new Admission({ concurrency: { realtime_asr: 1 } });
  const a = scripted();
  const first = session(a, admission);
  const opened = first.send(Buffer.alloc(3200));
  await settle();
  a.sends[0]!.resolve();
  await opened;
  const second = session(scripted(), admission);
  const waiting = second.send(Buffer.alloc(3200)).catch(() => {});
  await settle();
  first.abort();
  a.endCancel();
  // The first session's slot goes to the second's first frame; the second is aborted in the
  // same turn, before its attempt began.
  await first.ended;
  second.abort();
  await second.ended;
  assert.equal(running(admission), 0, 'the slot granted to the aborted session is still held');
  await waiting;
});
