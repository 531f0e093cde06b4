// Cluster mode under faults, on a real Redis (redis-server on a free port, no mock): a follow
// whose Redis goes away.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { enqueueArchive, startArchiveWorker } from '../src/archive/cluster.ts';
import { type RedisServer, redisMissing, startRedis } from './helpers/redis.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';
import { within } from './helpers/timers.ts';

const missing = redisMissing();
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

test(
  'Redis goes away while following (no worker): aborting the follow ends it, connections closed',
  skip,
  async () => {
    const redis = await startRedis();
    servers.push(redis);
    const dir = await archive(2);
    const enqueued = await enqueueArchive([dir], {
      queue: redis.url,
      queueName: `faults-${process.pid}-1`,
      out: join(root, 'out-gone'),
      mode: 'fast',
      formats: ['txt'],
      probe: false,
    });
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
  const redis = await startRedis();
  servers.push(redis);
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
    const redis = await startRedis();
    servers.push(redis);
    // The service answers the upload a second after it: Redis is gone by then.
    const { client, emulator } = await startService({
      latency: { perRequestMs: 1000 },
      jobTiming: { queuedMs: 0, processingMs: 30_000 },
    });
    const name = `faults-${process.pid}-3`;
    const dir = await archive(1);
    const enqueued = await enqueueArchive([dir], {
      queue: redis.url,
      queueName: name,
      out: join(root, 'out-submitting'),
      mode: 'batch',
      formats: ['txt'],
      probe: false,
    });
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
