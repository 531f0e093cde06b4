// Cluster mode under faults, on a real Redis (redis-server on a free port, no mock): a follow
// whose Redis goes away, a queue that loses its jobs or has no worker, results removed after a run,
// enqueuing aborted, paths given relative.

import assert from 'node:assert/strict';
import { access, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { enqueueArchive, startArchiveWorker } from '../src/archive/cluster/index.ts';
import type { ArchiveEvent, ArchiveSummary } from '../src/archive/index.ts';
import { readManifest } from './helpers/cli.ts';
import { type RedisServer, redisMissing, startRedis } from './helpers/redis.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';
import { within } from './helpers/timers.ts';

const missing = redisMissing();
/** A redis-server of the test's own (it stops it), stopped at the end in any case. */
async function ownRedis(): Promise<RedisServer> {
  const redis = await startRedis();
  servers.push(redis);
  return redis;
}

/** `dir`'s inputs as jobs on `queueName`, results as txt in `out`. */
const enqueue = (redis: RedisServer, dir: string, queueName: string, out: string, mode: 'fast' | 'batch') =>
  enqueueArchive([dir], { queue: redis.url, queueName, out, mode, formats: ['txt'], probe: false });

const skip = missing ? { skip: missing } : {};

const root = await mkdtemp(join(tmpdir(), 'speechpipe-cluster-faults-'));
after(() => rm(root, { recursive: true, force: true }));
const servers: RedisServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

const wav = await speechWav('A short recording for the cluster.', { pauseMs: 200 });

async function archive(n: number): Promise<string> {
  const dir = await mkdtemp(join(root, 'in-'));
  await mkdir(dir, { recursive: true });
  for (let i = 0; i < n; i++) await writeFile(join(dir, `clip${i}.wav`), wav);
  return dir;
}

// Each of these waits on its own Redis and service (a bound, a reconnection, an interval): they
// wait at the same time.
describe('Redis gone, jobs lost, no worker', { concurrency: true }, () => {
  test(
    'Redis goes away while following (no worker): aborting the follow ends it, connections closed',
    skip,
    async () => {
      const redis = await ownRedis();
      const dir = await archive(2);
      const enqueued = await enqueue(redis, dir, `faults-${process.pid}-1`, join(root, 'out-gone'), 'fast');
      assert.equal(enqueued.added, 2);
      const controller = new AbortController();
      const types: string[] = [];
      const following = (async () => {
        for await (const event of enqueued.follow({ signal: controller.signal })) types.push(event.type);
      })();
      // Reconciling runs every 2 s: let one start against the dead server.
      await new Promise((r) => setTimeout(r, 300));
      await redis.stop();
      await new Promise((r) => setTimeout(r, 2500));
      controller.abort();
      await within(following, 5000, 'the follow after abort');
      assert.equal(types.at(-1), 'summary');
    },
  );

  test('Redis goes away under an idle worker: close() ends it, connections closed', skip, async () => {
    const redis = await ownRedis();
    const { client } = await startService();
    const worker = await startArchiveWorker({
      queue: redis.url,
      queueName: `faults-${process.pid}-2`,
      client,
      stallTimeoutMs: 1000,
    });
    await redis.stop();
    await new Promise((r) => setTimeout(r, 500));
    await within(worker.close({ handBackAfterMs: 0 }), 8000, 'the worker close');
  });

  test(
    'Redis goes away while a worker records a batch job it submitted: close() hands it back within a bound',
    skip,
    async () => {
      const redis = await ownRedis();
      // The service answers the upload a second after it: Redis is gone by then.
      const { client, emulator } = await startService({
        latency: { perRequestMs: 1000 },
        jobTiming: { queuedMs: 0, processingMs: 30_000 },
      });
      const name = `faults-${process.pid}-3`;
      const dir = await archive(1);
      const enqueued = await enqueue(redis, dir, name, join(root, 'out-submitting'), 'batch');
      await enqueued.close();
      let started!: () => void;
      const isStarted = new Promise<void>((r) => {
        started = r;
      });
      const worker = await startArchiveWorker({
        queue: redis.url,
        queueName: name,
        client,
        stallTimeoutMs: 1000,
        onEvent: (e) => {
          if (e.type === 'started') started();
        },
      });
      await within(isStarted, 10_000, 'the job to start');
      // Redis dies while the job is being uploaded: the service accepts it, and storing its id in
      // the queue job waits for a Redis that does not come back.
      await redis.stop();
      while (emulator.stats().jobsCreated === 0) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300));
      await within(worker.close({ handBackAfterMs: 0 }), 10_000, 'the worker close');
    },
  );

  test(
    'the queue loses its jobs (Redis restarted empty): the follow records them failed instead of waiting for good',
    skip,
    async () => {
      const redis = await ownRedis();
      const dir = await archive(2);
      const out = join(root, 'out-lost');
      const enqueued = await enqueue(redis, dir, `faults-${process.pid}-4`, out, 'fast');
      const { Redis } = await import('ioredis');
      const admin = new Redis(redis.url);
      await admin.flushall();
      await admin.quit();
      const events: Array<ArchiveEvent | ArchiveSummary> = [];
      const controller = new AbortController();
      const following = (async () => {
        for await (const event of enqueued.follow({ signal: controller.signal })) events.push(event);
      })();
      try {
        await within(following, 10_000, 'the follow of lost jobs');
      } finally {
        controller.abort();
        await following;
      }
      const summary = events.at(-1) as ArchiveSummary;
      assert.equal(summary.failed, 2, JSON.stringify(summary));
      const failed = events.filter((e) => e.type === 'failed');
      assert.deepEqual(
        failed.map((e) => e.error.code),
        ['ERR_JOB_LOST', 'ERR_JOB_LOST'],
      );
      const manifest = await readManifest(out);
      assert.deepEqual(
        manifest.map((e) => e.status),
        ['failed', 'failed'],
      );
    },
  );

  test(
    'a queue no worker serves: the follow says so (NO_WORKER), and that a worker serves it when one comes',
    skip,
    async () => {
      const redis = await ownRedis();
      const { client } = await startService();
      const dir = await archive(2);
      const queueName = `faults-${process.pid}-noworker`;
      const enqueued = await enqueue(redis, dir, queueName, join(root, 'out-noworker'), 'fast');
      const events: Array<ArchiveEvent | ArchiveSummary> = [];
      let worker: Awaited<ReturnType<typeof startArchiveWorker>> | undefined;
      try {
        const following = (async () => {
          for await (const event of enqueued.follow({ noWorkerMs: 100 })) {
            events.push(event);
            if (event.type === 'paused' && !worker)
              worker = await startArchiveWorker({
                queue: redis.url,
                queueName,
                client,
                stallTimeoutMs: 1000,
              });
          }
        })();
        await within(following, 20_000, 'the follow');
      } finally {
        await worker?.close();
      }
      const types = events.map((e) => e.type);
      const paused = events.find((e) => e.type === 'paused');
      assert.ok(paused?.type === 'paused' && paused.reason.code === 'NO_WORKER', types.join(' '));
      assert.match(paused.reason.message, /2 job\(s\) waiting and no worker/);
      assert.ok(types.indexOf('resumed') > types.indexOf('paused'), types.join(' '));
      assert.equal(types.filter((t) => t === 'done').length, 2, types.join(' '));
      assert.equal(types.filter((t) => t === 'paused').length, 1, 'said once');
      assert.equal(types.at(-1), 'summary');
    },
  );
});

test(
  'the results of a cluster run removed: the same run again writes them anew, not only records them done',
  skip,
  async () => {
    const redis = await ownRedis();
    const { client, emulator } = await startService();
    const dir = await archive(2);
    const queueName = `faults-${process.pid}-removed`;
    const out = join(root, 'out-removed');
    const worker = await startArchiveWorker({ queue: redis.url, queueName, client, stallTimeoutMs: 1000 });
    const run = async () => {
      const enqueued = await enqueue(redis, dir, queueName, out, 'fast');
      const types: string[] = [];
      for await (const event of enqueued.follow()) types.push(event.type);
      return types;
    };
    try {
      assert.equal((await within(run(), 20_000, 'the first run')).filter((t) => t === 'done').length, 2);
      const outputs = [join(out, 'clip0.wav.txt'), join(out, 'clip1.wav.txt')];
      for (const output of outputs) await access(output);
      await rm(out, { recursive: true });
      assert.equal((await within(run(), 20_000, 'the run again')).filter((t) => t === 'done').length, 2);
      for (const output of outputs) await access(output);
      assert.equal(emulator.stats().requests['fast.http'], 4, 'each input transcribed again');
      assert.deepEqual(
        (await readManifest(out)).map((e) => e.status),
        ['done', 'done'],
      );
    } finally {
      await worker.close();
    }
  },
);

test(
  'enqueuing aborted: it rejects with the reason, adds nothing more and leaves no connection',
  skip,
  async () => {
    const redis = await ownRedis();
    const dir = await archive(3);
    const queueName = `faults-${process.pid}-aborted`;
    const reason = new Error('interrupted');
    await assert.rejects(
      enqueueArchive([dir], {
        queue: redis.url,
        queueName,
        out: join(root, 'out-aborted'),
        mode: 'fast',
        signal: AbortSignal.abort(reason),
      }),
      (err) => err === reason,
    );
    const enqueued = await enqueue(redis, dir, queueName, join(root, 'out-aborted'), 'fast');
    await enqueued.close();
    assert.equal(enqueued.added, 3, 'the aborted run added no job');
  },
);

test(
  'inputs and --out given relative: workers elsewhere read and write the paths the enqueuer meant',
  skip,
  async () => {
    const redis = await ownRedis();
    const { client } = await startService();
    const base = await mkdtemp(join(root, 'relative-'));
    await mkdir(join(base, 'in'));
    await writeFile(join(base, 'in', 'clip.wav'), wav);
    const queueName = `faults-${process.pid}-relative`;
    const cwd = process.cwd();
    let enqueued: Awaited<ReturnType<typeof enqueueArchive>>;
    process.chdir(base);
    try {
      enqueued = await enqueueArchive(['in'], {
        queue: redis.url,
        queueName,
        out: 'out',
        mode: 'fast',
        formats: ['txt'],
      });
    } finally {
      // The worker runs from another directory, as on another machine or under a service manager.
      process.chdir(cwd);
    }
    const worker = await startArchiveWorker({ queue: redis.url, queueName, client, stallTimeoutMs: 1000 });
    try {
      const events: Array<ArchiveEvent | ArchiveSummary> = [];
      for await (const event of enqueued.follow()) events.push(event);
      const summary = events.at(-1) as ArchiveSummary;
      assert.equal(summary.done, 1, JSON.stringify(events.filter((e) => e.type === 'failed')));
      await access(join(base, 'out', 'clip.wav.txt'));
    } finally {
      await worker.close();
    }
  },
);
