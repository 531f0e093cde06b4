// pace() and Pacer: the token bucket over PCM bytes (burst, sustained rate, penalties after a
// 429), frames counted by their PCM, live sources not delayed, timers cleared on destroy. The
// clock is mocked: nothing here measures time.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { Pacer, pace } from '../src/transforms/pace.ts';
import type { AudioFrame } from '../src/transforms/to-frames.ts';

function clock(start = 0) {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

const frame = (pcmBytes: number): AudioFrame => ({
  language: 'en',
  pcm: Buffer.alloc(pcmBytes),
  isFinal: false,
});

/** The wall clock, which `t.mock.timers` can move (the default clock, performance.now, it cannot). */
const mockedNow = () => Date.now();

test('defaults are the session limit: 4x real time sustained (128000 B/s), 16 MiB burst', () => {
  const c = clock();
  const pacer = new Pacer({ now: c.now });
  assert.equal(pacer.rate, 128);
  assert.equal(pacer.burstBytes, 16 * 1024 * 1024);
  // A full bucket lets the burst go at once ...
  assert.equal(pacer.delayFor(16 * 1024 * 1024), 0);
  pacer.take(16 * 1024 * 1024);
  // ... then bytes flow at the sustained rate: 3200 bytes (100 ms of audio) per 25 ms.
  assert.equal(pacer.delayFor(3200), 25);
  c.advance(25);
  assert.equal(pacer.delayFor(3200), 0);
  pacer.take(3200);
  assert.equal(pacer.sentBytes, 16 * 1024 * 1024 + 3200);
});

test('sustained throughput over a long file is the configured speed', () => {
  const c = clock();
  const pacer = new Pacer({ now: c.now, speed: 2, burstBytes: 64_000 });
  let sent = 0;
  // 10 minutes of audio in 3200-byte frames, advancing the clock only as the pacer asks.
  while (sent < 600 * 32_000) {
    const wait = pacer.delayFor(3200);
    c.advance(wait);
    pacer.take(3200);
    sent += 3200;
  }
  const audioMs = (sent / 32_000) * 1000;
  const speed = audioMs / c.now();
  assert.ok(speed <= 2.01 && speed > 1.95, `speed ${speed}`);
});

test('a chosen speed holds when each wait ends late (timers, a slow consumer): the lateness is made up, within a second', () => {
  for (const speed of [1, 4]) {
    const c = clock();
    const pacer = new Pacer({ now: c.now, speed });
    // The first frame goes at once: the speed holds from the first byte, with no burst.
    assert.equal(pacer.delayFor(3200), 0);
    let sent = 0;
    // 10 minutes of audio in 100 ms frames; every wait ends 10 ms late (and costs 10 ms when
    // there is none), less than a frame's time at either speed.
    while (sent < 600 * 32_000) {
      c.advance(pacer.delayFor(3200) + 10);
      pacer.take(3200);
      sent += 3200;
    }
    const achieved = ((sent / 32_000) * 1000) / c.now();
    assert.ok(achieved > speed * 0.99 && achieved <= speed * 1.01, `speed ${speed}: achieved ${achieved}`);
  }
  // After a long stall at most a second of audio (at that speed) goes at once, then the speed.
  const c = clock();
  const pacer = new Pacer({ now: c.now, speed: 1 });
  pacer.take(3200);
  c.advance(60_000);
  let atOnce = 0;
  while (pacer.delayFor(3200) === 0) {
    pacer.take(3200);
    atOnce += 3200;
  }
  assert.ok(atOnce >= 32_000 - 3200 && atOnce <= 32_000 + 3200, `${atOnce} bytes at once`);
});

test('penalize(retryAfterMs): nothing for that long, then the sustained rate without a burst', () => {
  const c = clock();
  const pacer = new Pacer({ now: c.now });
  pacer.penalize(2000);
  assert.equal(pacer.penalties, 1);
  assert.equal(pacer.pausedFor(), 2000);
  assert.ok(pacer.delayFor(3200) >= 2000);
  c.advance(2000);
  assert.equal(pacer.pausedFor(), 0);
  // The bucket restarted empty: 3200 bytes take 25 ms, not a burst.
  assert.equal(pacer.delayFor(3200), 25);
  c.advance(25);
  assert.equal(pacer.delayFor(3200), 0);
});

test('pace() holds a frame until its PCM bytes (length - 18) are in the bucket', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  const stream = pace({ burstBytes: 3200, now: mockedNow });
  const out: Buffer[] = [];
  stream.on('data', (f: Buffer) => out.push(f));
  stream.write(frame(3200)); // the burst
  stream.write(frame(3200)); // needs 25 ms of refill
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 1);
  t.mock.timers.tick(24);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 1);
  t.mock.timers.tick(1);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 2);
  assert.equal(stream.pacer.sentBytes, 6400);
  stream.pacer.penalize(1000);
  stream.end(frame(320));
  t.mock.timers.tick(999);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 2, 'held for the penalty');
  t.mock.timers.tick(1 + 3);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 3);
});

test('byte streams are paced by their length; live sources are not delayed (a penalty still holds)', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  const bytes = pace({ input: 'pcm', burstBytes: 1000, now: mockedNow });
  const got: number[] = [];
  bytes.on('data', (c: Buffer) => got.push(c.length));
  bytes.write(Buffer.alloc(1000));
  bytes.write(Buffer.alloc(1280)); // 10 ms at 128 B/ms
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(got, [1000]);
  t.mock.timers.tick(10);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(got, [1000, 1280]);

  const live = pace({ live: true, burstBytes: 0, now: mockedNow });
  const liveOut: Buffer[] = [];
  live.on('data', (f: Buffer) => liveOut.push(f));
  for (let i = 0; i < 5; i++) live.write(frame(32_000));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(liveOut.length, 5, 'a live source is already real time');
  live.pacer.penalize(500);
  live.write(frame(3200));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(liveOut.length, 5);
  t.mock.timers.tick(500);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(liveOut.length, 6);
  bytes.destroy();
  live.destroy();
});

test('a shared Pacer lets another stage slow the stream down', async (t) => {
  t.mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 });
  const pacer = new Pacer({ now: mockedNow });
  const stream = pace({ pacer });
  assert.equal(stream.pacer, pacer);
  const out: Buffer[] = [];
  stream.on('data', (f: Buffer) => out.push(f));
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  const advanceTo = (ms: number) => t.mock.timers.tick(ms - Date.now());
  stream.write(frame(3200));
  await settle();
  assert.equal(out.length, 1, 'a full bucket: the first frame goes at once');
  // Another stage (the one that got the 429) penalizes the shared bucket, not the stream.
  pacer.penalize(2000);
  stream.write(frame(3200));
  for (const at of [1, 500, 1999]) {
    advanceTo(at);
    await settle();
    assert.equal(out.length, 1, `still held ${at} ms into the 2000 ms penalty`);
  }
  // At least the penalty, then the sustained rate from an empty bucket: it goes, eventually.
  t.mock.timers.tick(60_000);
  await settle();
  assert.equal(out.length, 2, 'released after the penalty');
  assert.equal(pacer.sentBytes, 6400);
  stream.destroy();
});

test('destroy clears the pending timer (no handle left open)', async () => {
  const stream = pace({ speed: 0.0001, burstBytes: 0 });
  stream.on('data', () => {});
  stream.write(frame(3200)); // would wait for hours
  await new Promise((resolve) => setImmediate(resolve));
  stream.destroy();
  await new Promise((resolve) => stream.once('close', resolve));
  // test/setup.ts fails this file if the Timeout were still active.
});

test('a wait past 2^31-1 ms (a huge penalty) sleeps, it does not spin on a timer that fires at once', async (t) => {
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const pacer = new Pacer({ now: mockedNow });
  const setTimer = t.mock.method(globalThis, 'setTimeout');
  const stream = pace({ pacer, input: 'pcm' });
  stream.on('data', () => {});
  pacer.penalize(1e12);
  stream.write(Buffer.alloc(100));
  await new Promise((resolve) => setImmediate(resolve));
  const delays = setTimer.mock.calls.map((c) => c.arguments[1] as number);
  setTimer.mock.restore();
  stream.destroy();
  await new Promise((resolve) => stream.once('close', resolve));
  assert.equal(delays.length, 1);
  // Node fires a longer timer after 1 ms (TimeoutOverflowWarning): pace would spin.
  assert.ok(delays[0]! > 1 && delays[0]! <= 2 ** 31 - 1, `timer of ${delays[0]} ms`);
  assert.deepEqual(warnings, []);
});

test('property: whatever the chunk sizes, bytes let through by time t never exceed burst + rate * t', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 1, max: 40_000 }), { minLength: 1, maxLength: 200 }),
      fc.integer({ min: 0, max: 100_000 }),
      (sizes, burstBytes) => {
        const c = clock();
        const pacer = new Pacer({ now: c.now, burstBytes });
        let sent = 0;
        for (const size of sizes) {
          c.advance(pacer.delayFor(size));
          pacer.take(size);
          sent += size;
          // A chunk larger than the bucket may go once the bucket is full (it then owes).
          const allowance = Math.max(burstBytes, size) + pacer.rate * c.now();
          assert.ok(sent <= allowance + sizes.length, `${sent} bytes by ${c.now()} ms`);
        }
      },
    ),
    { numRuns: 300 },
  );
});

test('the default clock is monotonic: a wall clock set back an hour does not stall pacing', (t) => {
  let monotonic = 1000;
  let wall = Date.now();
  t.mock.method(performance, 'now', () => monotonic);
  t.mock.method(Date, 'now', () => wall);
  const pacer = new Pacer();
  pacer.take(pacer.burstBytes);
  // The wall clock is set back an hour; 300 ms pass on both clocks.
  wall -= 3_600_000;
  monotonic += 300;
  wall += 300;
  // 1 s of audio at 4x real time needs 250 ms of refill, which has passed.
  assert.equal(pacer.delayFor(32_000), 0);
});

test('a speed given paces from the first byte: a short file is not sent as one burst', () => {
  const c = clock();
  const pacer = new Pacer({ now: c.now, speed: 1 });
  assert.equal(pacer.burstBytes, 0);
  // Ten 100 ms chunks (one second of audio): the first goes at once, each next 100 ms later.
  const sentAt: number[] = [];
  for (let i = 0; i < 10; i++) {
    c.advance(pacer.delayFor(3200));
    pacer.take(3200);
    sentAt.push(c.now());
  }
  assert.equal(sentAt[0], 0);
  assert.ok(sentAt[9]! >= 899, `the last chunk at ${sentAt[9]} ms, not in a burst`);
  // An explicit burst is still honoured.
  assert.equal(new Pacer({ now: c.now, speed: 1, burstBytes: 64_000 }).delayFor(64_000), 0);
});
