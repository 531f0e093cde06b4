// EventQueue: events come out in push order to one consumer, a wake without an event reaches a
// waiting consumer, producers that await room() stop at the mark until the consumer takes
// events, and closing lets every producer go on.

import assert from 'node:assert/strict';
import test from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { EventQueue } from '../src/archive/event-queue.ts';

/** Whether `promise` has settled after the microtasks and one macrotask now due. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => {
      done = true;
    },
    () => {
      done = true;
    },
  );
  await tick();
  return done;
}

test('events come out in push order, those pushed while draining too', () => {
  const queue = new EventQueue<number>();
  queue.push(1);
  queue.push(2);
  const out: number[] = [];
  for (const event of queue.drain()) {
    out.push(event);
    if (event === 1) queue.push(3);
  }
  assert.deepEqual(out, [1, 2, 3]);
  assert.equal(queue.length, 0);
  assert.equal(queue.shift(), undefined);
});

test('wait() resolves at a push or a wake, and at once while an event is queued', async () => {
  const queue = new EventQueue<string>();
  const first = queue.wait();
  assert.equal(await settled(first), false, 'nothing happened yet');
  assert.equal(queue.wait(), first, 'one consumer: the same wait');
  queue.push('a');
  assert.equal(await settled(first), true);
  assert.equal(await settled(queue.wait()), true, 'an event is queued');
  queue.shift();
  const second = queue.wait();
  assert.equal(await settled(second), false);
  queue.wake();
  assert.equal(await settled(second), true, 'a wake without an event');
  assert.equal(queue.length, 0);
});

test('a producer that awaits room() waits at the mark until the consumer takes an event', async () => {
  const queue = new EventQueue<number>({ highWaterMark: 2 });
  queue.push(1);
  assert.equal(await settled(queue.room()), true, 'below the mark');
  queue.push(2);
  const room = queue.room();
  assert.equal(await settled(room), false, 'at the mark');
  queue.push(3); // a callback's push is never refused
  assert.equal(queue.length, 3);
  queue.shift();
  assert.equal(await settled(room), false, 'still at the mark');
  queue.shift();
  assert.equal(await settled(room), true, 'below it again');
});

test('producers that await room() keep the queue bounded whatever they produce', async () => {
  const queue = new EventQueue<number>({ highWaterMark: 8 });
  let most = 0;
  const produce = async (from: number) => {
    for (let i = from; i < from + 500; i++) {
      queue.push(i);
      most = Math.max(most, queue.length);
      await queue.room();
    }
  };
  const producers = Promise.all([produce(0), produce(1000)]);
  let taken = 0;
  while (taken < 1000) {
    await queue.wait();
    for (const _ of queue.drain()) {
      taken++;
      if (taken % 3 === 0) await tick(); // a consumer slower than its producers
    }
  }
  await producers;
  assert.ok(most <= 8 + 2, `at most the mark and one event per producer were queued, saw ${most}`);
});

test('close() lets waiting producers go on, drops what is queued and every later push', async () => {
  const queue = new EventQueue<number>({ highWaterMark: 1 });
  queue.push(1);
  const room = queue.room();
  const waiting = queue.wait();
  queue.close();
  assert.equal(await settled(room), true);
  assert.equal(await settled(waiting), true);
  assert.equal(queue.closed, true);
  assert.equal(queue.length, 0);
  queue.push(2);
  assert.equal(queue.length, 0);
  assert.equal(await settled(queue.room()), true);
  assert.equal(await settled(queue.wait()), true);
});

test('a mark that is not a positive integer is a RangeError', () => {
  for (const highWaterMark of [0, -1, 1.5, Number.NaN])
    assert.throws(() => new EventQueue({ highWaterMark }), RangeError, String(highWaterMark));
});
