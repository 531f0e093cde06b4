// The resampling worker pool: same bytes as inline, input order kept, buffers moved, a bounded
// queue that makes callers wait, clean close, and the task file loading from dist/ as well.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { finished } from 'node:stream/promises';
import { test } from 'node:test';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { concatInt16, ResamplePlanner, type ResampleTask, runResampleTask } from '../src/audio/resampler.ts';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { decode } from '../src/transforms/decode.ts';
import { resample } from '../src/transforms/resample.ts';
import { PoolClosedError, ResamplePool, WorkerFailedError } from '../src/workers/resample-pool.ts';
import { chunksOf } from './helpers/chunks.ts';
import { collectBytes } from './helpers/collect.ts';

const FROM = { sampleRate: 48000, channels: 2 };
const TO = { sampleRate: 16000, channels: 1 };

function stereoNoise(frames: number, seed = 1): Buffer {
  const buf = Buffer.alloc(frames * 4);
  let x = seed;
  for (let i = 0; i < frames * 2; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    buf.writeInt16LE(((x >> 8) % 20000) - 10000 + Math.round(8000 * Math.sin(i * 0.002)), i * 2);
  }
  return buf;
}

function collect(source: Buffer, chunk: number, transform: NodeJS.ReadWriteStream): Promise<Buffer> {
  return collectBytes(chunksOf(source, chunk), transform);
}

function tasksFor(input: Buffer, taskFrames: number): ResampleTask[] {
  const planner = new ResamplePlanner(FROM, TO, { minTaskFrames: taskFrames, maxTaskFrames: taskFrames });
  const samples = new Int16Array(input.buffer.slice(input.byteOffset, input.byteOffset + input.length));
  return [...planner.push(samples), ...planner.end()];
}

test('pooled resample() gives exactly the inline bytes, in order', async (t) => {
  const pool = new ResamplePool({ threads: 2 });
  t.after(() => pool.close());
  const input = stereoNoise(48000 * 3);
  const inline = await collect(input, 7777, resample({ from: FROM, to: TO }));
  for (const taskSeconds of [0.05, 0.3, 1]) {
    const pooled = await collect(input, 7777, resample({ from: FROM, to: TO, pool, taskSeconds }));
    assert.equal(pooled.length, 16000 * 3 * 2);
    assert.ok(pooled.equals(inline), `taskSeconds ${taskSeconds}: pooled output differs`);
  }
});

test('property: results come back in submission order whatever the task sizes', async (t) => {
  const pool = new ResamplePool({ threads: 2, maxQueue: 64 });
  t.after(() => pool.close());
  const input = stereoNoise(48000 / 2, 7);
  const expected = concatInt16(tasksFor(input, 1000).map(runResampleTask));
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 9000 }), async (taskFrames) => {
      const outs = await Promise.all(tasksFor(input, taskFrames).map((task) => pool.run(task)));
      assert.deepEqual(concatInt16(outs), expected);
    }),
    { numRuns: 15 },
  );
});

test('the task window is transferred, not copied', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  const [task] = tasksFor(stereoNoise(4800), 100_000);
  const window = task!.window;
  assert.ok(window.byteLength > 0);
  const out = await pool.run(task!);
  assert.equal(window.byteLength, 0, 'the sender no longer holds the moved buffer');
  assert.equal(out.length, 1600);
});

test('the queue is bounded: run() waits for a slot, and waiters fail when the pool closes', async () => {
  const pool = new ResamplePool({ threads: 1, maxQueue: 1 });
  assert.equal(pool.capacity, 2);
  const tasks = tasksFor(stereoNoise(48000), 1600);
  let maxPending = 0;
  const runs = tasks.map((task) => {
    const p = pool.run(task);
    maxPending = Math.max(maxPending, pool.pending);
    return p;
  });
  assert.equal(maxPending, 2, 'never more tasks admitted than the capacity');
  const results = await Promise.all(runs);
  assert.equal(results.length, tasks.length);
  // Fill it again, then close: admitted tasks finish, waiting ones are refused.
  const more = tasksFor(stereoNoise(48000), 1600).map((task) =>
    pool.run(task).then(
      () => 'done',
      (e: Error) => e,
    ),
  );
  await pool.close();
  const settled = await Promise.all(more);
  assert.ok(settled.slice(0, 2).every((r) => r === 'done'));
  assert.ok(settled.slice(2).every((r) => r instanceof PoolClosedError));
  await assert.rejects(pool.run(tasks[0]!), PoolClosedError);
});

test('writes wait while the stream has maxInFlight tasks (backpressure reaches the writer)', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  const stream = resample({ from: FROM, to: TO, pool, taskSeconds: 0.01, maxInFlight: 1 });
  const chunk = stereoNoise(48000);
  // No reader yet: the first write makes many tasks, so the writer is told to wait.
  const accepted = stream.write(chunk);
  assert.equal(accepted, false);
  const parts: Buffer[] = [];
  stream.on('data', (c: Buffer) => parts.push(c));
  stream.end();
  await finished(stream);
  assert.equal(Buffer.concat(parts).length, 16000 * 2);
});

test('destroying a pooled stream mid-run settles and leaves the pool usable', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  const stream = resample({ from: FROM, to: TO, pool, taskSeconds: 0.05 });
  stream.on('data', () => {});
  stream.write(stereoNoise(48000 * 2));
  stream.destroy();
  await new Promise((resolve) => stream.once('close', resolve));
  const [task] = tasksFor(stereoNoise(480), 100_000);
  assert.equal((await pool.run(task!)).length, 160);
});

/**
 * The dist/ files that `entries` load (their relative imports, followed) that are missing or
 * older than the source they are built from: a test of dist/ must not pass against old code.
 */
function staleBuild(entries: URL[]): string[] {
  const distRoot = new URL('../dist/', import.meta.url).href;
  const srcRoot = new URL('../src/', import.meta.url).href;
  const stale: string[] = [];
  const seen = new Set<string>();
  const visit = (file: URL) => {
    if (seen.has(file.href)) return;
    seen.add(file.href);
    const src = new URL(file.href.replace(distRoot, srcRoot).replace(/\.(c?)js$/, '.$1ts'));
    const name = file.href.slice(distRoot.length);
    if (!existsSync(file)) {
      stale.push(`${name} (missing)`);
      return;
    }
    if (existsSync(src) && statSync(src).mtimeMs > statSync(file).mtimeMs) {
      stale.push(`${name} (older than its source)`);
    }
    for (const m of readFileSync(file, 'utf8').matchAll(
      /(?:from|import)\s*\(?\s*['"](\.{1,2}\/[^'"]+\.js)['"]/g,
    )) {
      visit(new URL(m[1]!, file));
    }
  };
  for (const entry of entries) visit(entry);
  return stale;
}

test('the pool loads its task from dist/ (.cjs entry, .js task) as well as from source (.cts, .ts)', async () => {
  const dist = new URL('../dist/workers/resample-pool.js', import.meta.url);
  const entry = new URL('../dist/workers/resample-entry.cjs', import.meta.url);
  const task = new URL('../dist/workers/resample-task.js', import.meta.url);
  const stale = staleBuild([dist, entry, task]);
  if (stale.length > 0) {
    assert.fail(
      `dist/ is missing or stale: ${stale.join(', ')}. \`npm test\` builds it first; run \`npm run build\``,
    );
  }
  const script = `
    const { ResamplePool } = await import(${JSON.stringify(dist.href)});
    const pool = new ResamplePool({ threads: 1 });
    const window = new Int16Array(2000).fill(1000);
    const out = await pool.run({ from: { sampleRate: 16000, channels: 1 }, to: { sampleRate: 16000, channels: 1 },
      design: {}, window, base: 0, start: { pos: 0, frac: 0 }, count: 2000 });
    await pool.close();
    console.log(out.length, out[5]);`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script]);
  assert.equal(stdout.trim(), '2000 1000');
});

test('the workers require a CommonJS entry (a function), not an ES module', () => {
  // Piscina require()s its file first; require(esm) of a module still loading when its worker
  // ended once aborted the process in Node's loader (resample-entry.cts). The pool's tests above
  // run their tasks through this entry.
  const entry = createRequire(import.meta.url)('../src/workers/resample-entry.cts') as unknown;
  assert.equal(typeof entry, 'function', 'require() gave a module namespace: the entry is an ES module');
});

test('an idle pool does not keep the process alive', async () => {
  // A process that runs a task and never closes its pool must still exit by itself.
  const pool = new URL('../src/workers/resample-pool.ts', import.meta.url).href;
  const script = `
    const { ResamplePool } = await import(${JSON.stringify(pool)});
    const p = new ResamplePool({ threads: 2, idleTimeoutMs: 60000 });
    const out = await p.run({ from: { sampleRate: 16000, channels: 1 }, to: { sampleRate: 8000, channels: 1 },
      design: {}, window: new Int16Array(4000), base: -200, start: { pos: 0, frac: 0 }, count: 1000 });
    console.log(out.length);`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    timeout: 30_000,
  });
  assert.equal(stdout.trim(), '1000');
});

test('bad numeric options are InvalidArgumentError, not a deadlock or lost output', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  for (const maxInFlight of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(
      () => resample({ from: FROM, to: TO, pool, maxInFlight }),
      InvalidArgumentError,
      `${maxInFlight}`,
    );
  }
  for (const taskSeconds of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(
      () => resample({ from: FROM, to: TO, pool, taskSeconds }),
      InvalidArgumentError,
      `${taskSeconds}`,
    );
    assert.throws(
      () => resample({ from: FROM, to: TO, taskSeconds }),
      InvalidArgumentError,
      `inline ${taskSeconds}`,
    );
  }
  for (const options of [
    { threads: 0 },
    { threads: 1.5 },
    { threads: Number.NaN },
    { maxQueue: -1 },
    { idleTimeoutMs: -5 },
  ]) {
    assert.throws(() => new ResamplePool(options), InvalidArgumentError, JSON.stringify(options));
  }
  // The smallest good values still work.
  const out = await collect(
    stereoNoise(4800),
    1000,
    resample({ from: FROM, to: TO, pool, maxInFlight: 1, taskSeconds: 0.001 }),
  );
  assert.equal(out.length, 1600 * 2);
});

test('a task that fails in a worker is a typed ERR_WORKER_FAILED, also downstream of resample()', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  const [task] = tasksFor(stereoNoise(4800), 100_000);
  // Channels 0: the worker's runResampleTask throws; the error crosses the thread as a plain Error.
  await assert.rejects(pool.run({ ...task!, to: { sampleRate: 16000, channels: 0 } }), (err: Error) => {
    assert.ok(err instanceof WorkerFailedError, String(err));
    assert.equal(err.code, 'ERR_WORKER_FAILED');
    assert.match(String((err.cause as Error).message), /channels/);
    return true;
  });
  // A pool whose worker fails every task: the resample() stream fails with the same typed error.
  class FailingPool extends ResamplePool {
    override run(task: ResampleTask, signal?: AbortSignal): Promise<Int16Array> {
      return super.run({ ...task, count: -1 }, signal);
    }
  }
  const failing = new FailingPool({ threads: 1 });
  t.after(() => failing.close());
  await assert.rejects(
    collect(stereoNoise(48000), 4800, resample({ from: FROM, to: TO, pool: failing, taskSeconds: 0.1 })),
    (err: Error & { code?: string }) => err instanceof WorkerFailedError && err.code === 'ERR_WORKER_FAILED',
  );
  // The pool stays usable.
  assert.equal((await pool.run(tasksFor(stereoNoise(480), 100_000)[0]!)).length, 160);
});

test('abort: resample() (inline and pooled) and decode() fail with the signal’s own reason', async (t) => {
  const pool = new ResamplePool({ threads: 1 });
  t.after(() => pool.close());
  for (const reason of [new Error('stop now'), 'a string reason', { why: 'an object' }]) {
    for (const make of [
      (signal: AbortSignal) => resample({ from: FROM, to: TO, signal }),
      (signal: AbortSignal) => resample({ from: FROM, to: TO, pool, taskSeconds: 0.05, signal }),
      (signal: AbortSignal) => decode({ signal, input: { encoding: 's16le', ...FROM } }),
    ]) {
      const abort = new AbortController();
      const stream = make(abort.signal);
      stream.on('data', () => {});
      stream.write(stereoNoise(48000));
      abort.abort(reason);
      await assert.rejects(finished(stream), (err: unknown) => {
        assert.equal(err, reason);
        return true;
      });
      // Already aborted when made: the same.
      const early = make(AbortSignal.abort(reason));
      await assert.rejects(finished(early), (err: unknown) => err === reason);
    }
  }
});
