import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { tee } from '../src/transforms/tee.ts';

function slowSink(delayMs: number, into: Buffer[]): Writable {
  return new Writable({
    highWaterMark: 1,
    write(chunk: Buffer, _e, cb) {
      into.push(chunk);
      setTimeout(cb, delayMs);
    },
  });
}

test('every branch gets every chunk and its end, however slow the readers', async () => {
  const data = Array.from({ length: 40 }, (_, i) => Buffer.alloc(1000, i));
  const split = tee(3, { highWaterMark: 1024 });
  const got: Buffer[][] = [[], [], []];
  await Promise.all([
    pipeline(Readable.from(data), split.input),
    pipeline(split.branches[0]!, slowSink(0, got[0]!)),
    pipeline(split.branches[1]!, slowSink(2, got[1]!)),
    pipeline(split.branches[2]!, slowSink(1, got[2]!)),
  ]);
  for (const g of got) assert.deepEqual(Buffer.concat(g), Buffer.concat(data));
});

test('the slowest branch sets the pace: the input waits instead of buffering', async () => {
  const split = tee(2, { highWaterMark: 1024 });
  split.branches[0]!.resume();
  // Branch 1 is never read: its buffers fill, then writes must stop completing.
  let completed = 0;
  for (let i = 0; i < 50; i++) {
    split.input.write(Buffer.alloc(1000), () => completed++);
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(completed < 10, `${completed} writes completed with a stalled branch`);
  split.input.destroy();
});

test('a failing branch fails the input and the other branches', async () => {
  const split = tee(2);
  const boom = new Error('branch failed');
  const input = pipeline(Readable.from([Buffer.alloc(10), Buffer.alloc(10)]), split.input);
  const ok = pipeline(split.branches[0]!, new Writable({ write: (_c, _e, cb) => cb() }));
  split.branches[1]!.destroy(boom);
  await assert.rejects(input, boom);
  await assert.rejects(ok);
});

test('a branch its reader destroyed without an error fails the next write instead of holding it', {
  timeout: 10_000,
}, async () => {
  const split = tee(2);
  const other = pipeline(split.branches[0]!, new Writable({ write: (_c, _e, cb) => cb() }));
  split.input.write(Buffer.from('first'));
  // The reader gives up: destroy() with no error, so no 'error' reaches the tee.
  split.branches[1]!.destroy();
  await once(split.branches[1]!, 'close');
  const written = new Promise<Error | null | undefined>((resolve) =>
    split.input.write(Buffer.from('second'), resolve),
  );
  split.input.on('error', () => {});
  const err = await written;
  assert.ok(err instanceof InvalidArgumentError, `the write ended with ${err}`);
  await assert.rejects(other);
});
