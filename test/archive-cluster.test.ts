// Cluster mode on a real Redis (redis-server on a free port, no mock): `transcribe --queue`
// enqueues and follows, `speechpipe worker` processes run the jobs against one emulator, so
// account-wide limits and exactly-once submission are seen at the service.

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, test } from 'node:test';
import { startEmulator } from '../src/emulator/index.ts';
import type { EmulatorOptions } from '../src/emulator/types.ts';
import { CLI_CWD, cliEnv, readManifest, runCli } from './helpers/cli.ts';
import { type RedisServer, redisMissing, startRedis } from './helpers/redis.ts';
import { speechWav } from './helpers/speech.ts';

const missing = redisMissing();
if (missing) process.stderr.write(`archive-cluster: skipped: ${missing}\n`);

const root = await mkdtemp(join(tmpdir(), 'speechpipe-cluster-'));
after(() => rm(root, { recursive: true, force: true }));
let redis: RedisServer;
before(async () => {
  if (!missing) redis = await startRedis();
});
after(async () => {
  await redis?.stop();
});

const wav = await speechWav('A short recording for the cluster.', { pauseMs: 200 });
let queues = 0;
const queueName = () => `test-${process.pid}-${++queues}`;

/** `n` inputs under a fresh directory: `set/` with subdirectories, and two `talk.wav` in a/ and b/. */
async function archive(n: number): Promise<{ dir: string; roots: string[] }> {
  const dir = await mkdtemp(join(root, 'in-'));
  for (let i = 0; i < n - 2; i++) {
    const sub = join(dir, 'set', `part${i % 3}`);
    await mkdir(sub, { recursive: true });
    await writeFile(join(sub, `clip${i}.wav`), wav);
  }
  for (const d of ['a', 'b']) {
    await mkdir(join(dir, d));
    await writeFile(join(dir, d, 'talk.wav'), wav);
  }
  return { dir, roots: [join(dir, 'set'), join(dir, 'a', 'talk.wav'), join(dir, 'b', 'talk.wav')] };
}

async function listOutputs(out: string): Promise<string[]> {
  const entries = await readdir(out, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && e.name !== 'manifest.ndjson')
    .map((e) => relative(out, join(e.parentPath, e.name)))
    .sort();
}

interface WorkerProcess {
  child: ChildProcess;
  /** stderr lines with the time each arrived. */
  lines: Array<{ at: number; text: string }>;
  exited: Promise<number | null>;
  /** Resolves once a line matches. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  stop(): Promise<number | null>;
}

const workers = new Set<WorkerProcess>();
after(async () => {
  for (const w of workers)
    if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
  await Promise.all([...workers].map((w) => w.exited));
});

async function startWorker(
  service: { url: string; apiKey: string },
  name: string,
  extra: string[] = [],
): Promise<WorkerProcess> {
  const child = spawn(
    process.execPath,
    [
      'src/cli/main.ts',
      'worker',
      '--queue',
      redis.url,
      '--queue-name',
      name,
      '--stall-timeout',
      '1',
      ...extra,
    ],
    {
      cwd: CLI_CWD,
      env: { ...cliEnv(), API_URL: service.url, API_KEY: service.apiKey },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  const lines: WorkerProcess['lines'] = [];
  const waiters = new Set<{ pattern: RegExp; resolve: () => void }>();
  let buffered = '';
  child.stderr!.on('data', (d: Buffer) => {
    buffered += d.toString();
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    for (const text of parts) {
      lines.push({ at: performance.now(), text });
      for (const w of waiters)
        if (w.pattern.test(text)) {
          waiters.delete(w);
          w.resolve();
        }
    }
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const worker: WorkerProcess = {
    child,
    lines,
    exited,
    waitFor(pattern, timeoutMs = 30_000) {
      if (lines.some((l) => pattern.test(l.text))) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no line matched ${pattern}:\n${lines.map((l) => l.text).join('\n')}`)),
          timeoutMs,
        );
        waiters.add({
          pattern,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
  workers.add(worker);
  await worker.waitFor(/ready:/);
  return worker;
}

async function emulator(options: EmulatorOptions) {
  const e = await startEmulator(options);
  after(() => e.close());
  return e;
}

const skip = missing ? { skip: missing } : {};

test(
  'enqueue + 2 worker processes: every input done, names and count as a local run; enqueuing again adds no job',
  skip,
  async () => {
    const { roots } = await archive(7);
    const service = await emulator({ latency: { perRequestMs: 50 } });
    const name = queueName();
    const [w1, w2] = await Promise.all([
      startWorker(service, name, ['--metrics-port', '0']),
      startWorker(service, name),
    ]);
    const out = join(root, 'out-cluster');
    const args = ['transcribe', ...roots, '--out', out, '--mode', 'fast', '--format', 'txt,json'];
    // The local run (the built-in emulator) beside the cluster run.
    const [cluster, local] = await Promise.all([
      runCli([...args, '--queue', redis.url, '--queue-name', name, '--progress', 'plain']),
      runCli([...args.slice(0, -6), '--out', join(root, 'out-local'), ...args.slice(-4)]),
    ]);
    assert.equal(cluster.code, 0, cluster.stderr);
    assert.match(cluster.stderr, /7 job\(s\) added, 0 queued already/);
    assert.equal(local.code, 0, local.stderr);
    const names = await listOutputs(out);
    assert.equal(names.length, 14);
    assert.deepEqual(names, await listOutputs(join(root, 'out-local')));
    assert.ok(
      names.some((n) => /^talk\.wav~[0-9a-f]{8}\.txt$/.test(n)),
      'the second talk.wav was kept apart',
    );
    const entries = await readManifest(out);
    assert.equal(entries.filter((e) => e.status === 'done').length, 7);
    assert.equal(service.stats().requests['fast.http'], 7, 'each input transcribed once');
    // Both workers took jobs.
    for (const w of [w1!, w2!])
      assert.ok(
        w.lines.some((l) => /^speechpipe worker: done /.test(l.text)),
        'a worker did nothing',
      );

    // Prometheus metrics of the first worker: its files and audio done, nothing in flight.
    const metricsUrl = /metrics at (\S+)/.exec(w1!.lines.map((l) => l.text).join('\n'))![1]!;
    const metrics = await (await fetch(metricsUrl)).text();
    const doneByW1 = w1!.lines.filter((l) => /^speechpipe worker: done /.test(l.text)).length;
    assert.match(metrics, new RegExp(`^speechpipe_files_done_total ${doneByW1}$`, 'm'));
    assert.match(metrics, /^speechpipe_audio_seconds_done_total [1-9]/m);
    assert.match(metrics, /^speechpipe_operations_in_flight 0$/m);
    assert.match(metrics, /^speechpipe_rate_limited_total 0$/m);

    const again = await runCli([...args, '--queue', redis.url, '--queue-name', name, '--progress', 'plain']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stderr, /0 job\(s\) added, 7 queued already/);
    assert.match(again.stdout, /^7 done, 0 failed/);
    assert.equal(service.stats().requests['fast.http'], 7, 'enqueuing again ran nothing again');

    // --no-wait adds and exits; a later follow (--resume) finds the jobs done.
    assert.equal(await w1!.stop(), 0);
    assert.equal(await w2!.stop(), 0);
  },
);

test(
  '--no-wait enqueues and exits; workers started later run the jobs; --resume follows them',
  skip,
  async () => {
    const { roots } = await archive(4);
    const service = await emulator({});
    const name = queueName();
    const out = join(root, 'out-nowait');
    const args = ['transcribe', ...roots, '--out', out, '--mode', 'fast', '--format', 'txt'];
    const queued = await runCli([...args, '--queue', redis.url, '--queue-name', name, '--no-wait']);
    assert.equal(queued.code, 0, queued.stderr);
    assert.match(queued.stdout, /^4 added, 0 queued already/);
    const w = await startWorker(service, name);
    const follow = await runCli([...args, '--queue', redis.url, '--queue-name', name, '--resume']);
    assert.equal(follow.code, 0, follow.stderr);
    assert.match(follow.stdout, /^4 done, 0 failed/);
    assert.equal((await readManifest(out)).filter((e) => e.status === 'done').length, 4);
    assert.equal(await w.stop(), 0);
  },
);

test(
  '--no-wait with an input the walk cannot read: recorded failed, exit 1 as a local run',
  skip,
  async () => {
    const dir = await mkdtemp(join(root, 'in-unreadable-'));
    await writeFile(join(dir, 'good.wav'), wav);
    await symlink(join(dir, 'gone.wav'), join(dir, 'broken.wav'));
    const out = join(root, 'out-nowait-unreadable');
    const queued = await runCli([
      'transcribe',
      dir,
      '--out',
      out,
      '--mode',
      'fast',
      '--queue',
      redis.url,
      '--queue-name',
      queueName(),
      '--no-wait',
    ]);
    assert.equal(queued.code, 1, queued.stderr);
    assert.match(queued.stdout, /^1 added, 0 queued already, 1 not queued \(1 failed: see the manifest\)/);
    assert.deepEqual(
      (await readManifest(out)).map((e) => [e.status, e.error?.code]),
      [['failed', 'ENOENT']],
    );
  },
);

test(
  'global concurrency: 2 workers of 3 never hold more than the queue limit (2) at the service',
  skip,
  async () => {
    const { roots } = await archive(8);
    // The service would admit 8: the bound seen is the queue's, not the service's.
    const service = await emulator({
      latency: { perRequestMs: 300 },
      limits: { accountConcurrency: { fast: 8 } },
    });
    const name = queueName();
    const ws = await Promise.all([
      startWorker(service, name, ['--concurrency', '3']),
      startWorker(service, name, ['--concurrency', '3']),
    ]);
    const out = join(root, 'out-concurrency');
    const run = await runCli([
      'transcribe',
      ...roots,
      '--out',
      out,
      '--mode',
      'fast',
      '--format',
      'txt',
      '--queue',
      redis.url,
      '--queue-name',
      name,
      '--account-concurrency',
      '2',
    ]);
    assert.equal(run.code, 0, run.stderr);
    const stats = service.stats();
    assert.equal(stats.maxConcurrent.fast, 2, `max in flight ${stats.maxConcurrent.fast}`);
    assert.equal(stats.rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0, 0);
    for (const w of ws) assert.equal(await w.stop(), 0);
  },
);

test(
  'kill -9 of a worker mid-run (batch): its jobs are taken over, every input done, no batch job submitted twice',
  skip,
  async () => {
    const { roots } = await archive(6);
    const service = await emulator({ jobTiming: { queuedMs: 0, processingMs: 2500 } });
    const name = queueName();
    // One job at a time: killed after its job's submission was recorded, the victim holds no
    // other job in the middle of a submission. (A worker killed between the service accepting
    // a job and recording its id would leave a job the service runs twice: the interface has no
    // idempotent submission. With two jobs at once, a loaded machine made that window real.)
    // The survivor takes every other job at once (five of six: one is left for the victim),
    // so the run lasts about one job's processing.
    const [victim, survivor] = await Promise.all([
      startWorker(service, name, ['--concurrency', '1']),
      startWorker(service, name, ['--concurrency', '5']),
    ]);
    const out = join(root, 'out-kill');
    const following = runCli([
      'transcribe',
      ...roots,
      '--out',
      out,
      '--mode',
      'batch',
      '--format',
      'txt',
      '--queue',
      redis.url,
      '--queue-name',
      name,
    ]);
    // Killed while it holds jobs the service accepted.
    await victim.waitFor(/submitted /);
    victim.child.kill('SIGKILL');
    await victim.exited;
    const run = await following;
    assert.equal(run.code, 0, run.stderr);
    const entries = await readManifest(out);
    assert.equal(entries.filter((e) => e.status === 'done').length, 6);
    assert.equal(service.stats().jobsCreated, 6, 'a batch job was submitted twice');
    assert.ok(
      survivor.lines.some((l) => /started .*\(taken over\) waiting for job/.test(l.text)),
      'the survivor did not take a job over',
    );
    assert.equal(await survivor.stop(), 0);
  },
);

test(
  'SIGTERM then a second one: the worker hands back its jobs and exits 0; the one that takes them waits for their batch jobs',
  skip,
  async () => {
    const { roots } = await archive(4);
    const service = await emulator({ jobTiming: { queuedMs: 0, processingMs: 2500 } });
    const name = queueName();
    const first = await startWorker(service, name, ['--concurrency', '2']);
    const following = runCli([
      'transcribe',
      ...roots,
      '--out',
      join(root, 'out-sigterm'),
      '--mode',
      'batch',
      '--format',
      'txt',
      '--queue',
      redis.url,
      '--queue-name',
      name,
    ]);
    await first.waitFor(/submitted /);
    const second = await startWorker(service, name, ['--concurrency', '2']);
    first.child.kill('SIGTERM');
    await first.waitFor(/finishing the jobs in flight/);
    first.child.kill('SIGTERM');
    assert.equal(await first.exited, 0);
    assert.ok(
      first.lines.some((l) => /handed back /.test(l.text)),
      'nothing was handed back',
    );
    const run = await following;
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^4 done, 0 failed/);
    assert.equal(service.stats().jobsCreated, 4, 'a batch job was submitted twice');
    assert.ok(second.lines.some((l) => /waiting for job/.test(l.text)));
    assert.equal(await second.stop(), 0);
  },
);

test(
  'a 429 with Retry-After pauses the whole queue: no worker starts a job until it has passed',
  skip,
  async () => {
    const { roots } = await archive(8);
    const service = await emulator({
      latency: { perRequestMs: 150 },
      faults: [
        {
          operation: 'fast.http',
          nth: 3,
          times: 1,
          action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 2 },
        },
      ],
    });
    const name = queueName();
    const ws = await Promise.all([
      startWorker(service, name, ['--concurrency', '1']),
      startWorker(service, name, ['--concurrency', '1']),
    ]);
    const run = await runCli([
      'transcribe',
      ...roots,
      '--out',
      join(root, 'out-429'),
      '--mode',
      'fast',
      '--format',
      'txt',
      '--queue',
      redis.url,
      '--queue-name',
      name,
    ]);
    assert.equal(run.code, 0, run.stderr);
    const limited = ws.flatMap((w) => w.lines.filter((l) => /429 \(fast\)/.test(l.text)));
    assert.equal(limited.length, 1);
    const at = limited[0]!.at;
    // A job a worker fetched while the limit was being set (a few ms) may start; after that,
    // neither worker (the other one was free) starts a job within the Retry-After (2 s).
    const startsAfter = ws
      .flatMap((w) => w.lines)
      .filter((l) => /started /.test(l.text) && l.at > at + 150)
      .map((l) => l.at - at);
    assert.ok(startsAfter.length > 0, 'jobs were left after the 429');
    const log = () =>
      ws.map((w, i) => w.lines.map((l) => `${i} +${Math.round(l.at - at)} ${l.text}`).join('\n')).join('\n');
    assert.ok(
      Math.min(...startsAfter) >= 1700,
      `a job started ${Math.round(Math.min(...startsAfter))} ms after the 429:\n${log()}`,
    );
    assert.equal(service.stats().requests['fast.http'], 9, '8 inputs and the one refused');
    for (const w of ws) assert.equal(await w.stop(), 0);
  },
);

test('a refused key stops the queue: the follow reports it as a local run does (exit 2)', skip, async () => {
  const { roots } = await archive(3);
  const service = await emulator({});
  const name = queueName();
  const w = await startWorker({ url: service.url, apiKey: 'wrong-key' }, name);
  const out = join(root, 'out-401');
  const args = ['transcribe', ...roots, '--out', out, '--mode', 'fast', '--format', 'txt'];
  const run = await runCli([...args, '--queue', redis.url, '--queue-name', name]);
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /stopped: the service refused the key \(401\)/);
  assert.equal(await w.stop(), 0);
  // The key fixed: --resume resumes the queue and the jobs handed back run.
  const fixed = await startWorker(service, name);
  const again = await runCli([...args, '--queue', redis.url, '--queue-name', name, '--resume']);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stdout, /^3 done, 0 failed/);
  assert.equal(await fixed.stop(), 0);
});

test(
  'an unreachable Redis: transcribe --queue and worker exit 2 at once with a clear error',
  skip,
  async () => {
    const { roots } = await archive(3);
    const began = performance.now();
    const [run, worker] = await Promise.all([
      runCli(['transcribe', ...roots, '--out', join(root, 'out-noredis'), '--queue', 'redis://127.0.0.1:1']),
      runCli(['worker', '--queue', 'redis://127.0.0.1:1']),
    ]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /cannot connect to Redis at 127\.0\.0\.1:1/);
    assert.equal(worker.code, 2, worker.stderr);
    assert.match(worker.stderr, /cannot connect to Redis at 127\.0\.0\.1:1/);
    assert.ok(performance.now() - began < 20_000);
  },
);
