// The replay buffer core: what a failed live session accepted and the service had not
// finalised, bounded in bytes and seconds, with the range it had to drop.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { ReplayBuffer } from '../src/transforms/replay-buffer.ts';

const BPS = 32_000; // PCM16 16 kHz mono bytes per second
const chunk = (sec: number, fill = 1) => Buffer.alloc(Math.round(sec * BPS), fill);

test('replays from the finalised point, the first chunk cut at it in whole samples; fillers are not sent again', () => {
  const b = new ReplayBuffer({ maxSec: 60, maxBytes: 60 * BPS });
  b.push(0, chunk(1), false);
  b.push(1, chunk(0.1, 0), true); // keepalive silence
  b.push(1.1, chunk(1, 2), false);
  b.commit(0.5);
  const r = b.replay();
  assert.equal(r.lost, undefined);
  assert.equal(r.from, 0.5);
  assert.deepEqual(
    r.chunks.map((c) => [c.at, c.pcm.length]),
    [
      [0.5, 0.5 * BPS],
      [1.1, BPS],
    ],
  );
  assert.ok(r.chunks.every((c) => c.pcm.length % 2 === 0 && !c.filler));
});

test('commit drops what is finalised; commitAll leaves nothing to send again', () => {
  const b = new ReplayBuffer({ maxSec: 60, maxBytes: 60 * BPS });
  for (let i = 0; i < 5; i++) b.push(i, chunk(1), false);
  b.commit(2);
  assert.equal(b.bytes, 3 * BPS);
  b.commitAll();
  assert.equal(b.bytes, 0);
  const r = b.replay();
  assert.deepEqual(r.chunks, []);
  assert.equal(r.from, 5);
});

test('the bound drops the oldest audio and reports the unfinalised part of it as lost', () => {
  const b = new ReplayBuffer({ maxSec: 2, maxBytes: 60 * BPS });
  b.push(0, chunk(1), false);
  b.commit(0.25);
  b.push(1, chunk(1), false);
  b.push(2, chunk(1), false); // 3 s > 2 s: the first second goes
  const r = b.replay();
  assert.deepEqual(r.lost, { start: 0.25, end: 1 });
  assert.equal(r.from, 1);
  assert.equal(r.chunks.length, 2);
});

test('property: memory stays within the bound, and replay + lost cover every unfinalised second', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({ sec: fc.integer({ min: 1, max: 40 }), filler: fc.boolean(), commit: fc.boolean() }),
        {
          minLength: 1,
          maxLength: 60,
        },
      ),
      fc.integer({ min: 1, max: 30 }),
      (steps, maxTenths) => {
        const limits = { maxSec: maxTenths / 10, maxBytes: (maxTenths / 10) * BPS };
        const b = new ReplayBuffer(limits);
        let at = 0;
        for (const step of steps) {
          const pcm = chunk(step.sec / 100);
          b.push(at, pcm, step.filler);
          at += pcm.length / BPS;
          if (step.commit) b.commit(at - pcm.length / BPS / 2);
          assert.ok(b.bytes <= limits.maxBytes + 1e-9);
        }
        const r = b.replay();
        const start = r.lost ? r.lost.start : r.from;
        assert.ok(Math.abs(start - b.committed) < 1e-9 || start >= b.committed);
        if (r.lost) assert.ok(Math.abs(r.lost.end - r.from) < 1e-9 || r.lost.end <= r.from);
        for (let i = 1; i < r.chunks.length; i++) assert.ok(r.chunks[i]!.at > r.chunks[i - 1]!.at);
      },
    ),
  );
});
