// Cluster mode against a local run, at a fixed service speed: 200 small files by fast
// transcription (every request takes --request-ms at the emulator; the account admits
// --limit at once, the queue's global concurrency is the same). Reports slot utilisation
// (service busy time / (limit × wall)) for a local run and with 2 worker processes, the wall
// time of a run whose worker is killed (kill -9) halfway against one without, and the largest
// concurrency the service saw with 1, 2 and 4 workers (it must not pass the limit).
//
//   node bench/archive-cluster.ts [--files N] [--request-ms MS] [--limit N] [--json]
//
// Needs redis-server (scripts/setup.sh installs it); starts its own on a free port.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { enqueueArchive, transcribeArchive } from '../src/archive/index.ts';
import { createClient } from '../src/client/index.ts';
import { type Emulator, startEmulator } from '../src/emulator/index.ts';
import { encodeWav } from '../src/index.ts';
import { startRedis } from '../test/helpers/redis.ts';

const { values } = parseArgs({
  options: {
    files: { type: 'string', default: '200' },
    'request-ms': { type: 'string', default: '100' },
    limit: { type: 'string', default: '4' },
    json: { type: 'boolean', default: false },
  },
});
const FILES = Number(values.files);
const REQUEST_MS = Number(values['request-ms']);
const LIMIT = Number(values.limit);
const CLI = new URL('../src/cli/main.ts', import.meta.url).pathname;

const root = await mkdtemp(join(tmpdir(), 'speechpipe-bench-cluster-'));
const redis = await startRedis();
let runs = 0;

async function inputs(): Promise<string> {
  const dir = join(root, 'in');
  // One second of a tone: the service's time is fixed by REQUEST_MS, not the audio.
  const pcm = Buffer.alloc(32_000);
  for (let i = 0; i < 16_000; i++) pcm.writeInt16LE(Math.round(8000 * Math.sin(i * 0.1)), i * 2);
  const wav = encodeWav(pcm, 16_000);
  for (let i = 0; i < FILES; i++) {
    const sub = join(dir, `d${i % 10}`);
    await mkdir(sub, { recursive: true });
    await writeFile(join(sub, `f${i}.wav`), wav);
  }
  return dir;
}

// The service would admit 64 at once: the bound seen is ours (the queue's global concurrency,
// the local run's concurrency), not the service's 429s.
const service = () =>
  startEmulator({ latency: { perRequestMs: REQUEST_MS }, limits: { accountConcurrency: { fast: 64 } } });

interface Result {
  wallMs: number;
  busyMs: number;
  maxConcurrent: number;
  /** 429s the service answered (none expected). */
  rejected: number;
  utilisation: number;
  done: number;
}

const measure = (emulator: Emulator, began: number, done: number): Result => {
  const wallMs = performance.now() - began;
  const stats = emulator.stats();
  return {
    wallMs: Math.round(wallMs),
    busyMs: stats.busyMs.fast,
    maxConcurrent: stats.maxConcurrent.fast,
    rejected: Object.values(stats.rejections).reduce((a, b) => a + b, 0),
    utilisation: stats.busyMs.fast / (LIMIT * wallMs),
    done,
  };
};

async function local(dir: string): Promise<Result> {
  const emulator = await service();
  // The account's limit is the client's plan; files at once come from it (transcribeEach's
  // default keeps the next requests ready in the admission queue).
  const client = createClient({
    apiUrl: emulator.url,
    apiKey: emulator.apiKey,
    env: {},
    concurrency: { fast: LIMIT },
  });
  try {
    const began = performance.now();
    let done = 0;
    for await (const event of transcribeArchive([dir], {
      client,
      out: join(root, `out-${++runs}`),
      mode: 'fast',
      formats: ['txt'],
      probe: false,
    }))
      if (event.type === 'summary') done = event.done;
    return measure(emulator, began, done);
  } finally {
    await client.close();
    await emulator.close();
  }
}

function worker(emulator: Emulator, name: string): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    [
      CLI,
      'worker',
      '--queue',
      redis.url,
      '--queue-name',
      name,
      '--concurrency',
      String(LIMIT),
      '--stall-timeout',
      '1',
    ],
    {
      env: { ...process.env, API_URL: emulator.url, API_KEY: emulator.apiKey },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  return new Promise((resolve, reject) => {
    let text = '';
    child.stderr!.on('data', (d: Buffer) => {
      text += d.toString();
      if (text.includes('ready:')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`worker exited ${code}: ${text}`)));
  });
}

async function cluster(dir: string, workers: number, killHalfway = false): Promise<Result> {
  const emulator = await service();
  const name = `bench-${process.pid}-${++runs}`;
  const children = await Promise.all(Array.from({ length: workers }, () => worker(emulator, name)));
  try {
    const began = performance.now();
    const enqueued = await enqueueArchive([dir], {
      queue: redis.url,
      queueName: name,
      out: join(root, `out-${runs}`),
      mode: 'fast',
      formats: ['txt'],
      accountConcurrency: LIMIT,
      probe: false,
    });
    let done = 0;
    let killed = false;
    for await (const event of enqueued.follow()) {
      if (event.type === 'done') done++;
      if (killHalfway && !killed && done >= FILES / 2) {
        killed = true;
        children[0]!.kill('SIGKILL');
      }
      if (event.type === 'summary') done = event.done;
    }
    return measure(emulator, began, done);
  } finally {
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once('exit', () => resolve());
            c.kill('SIGTERM');
          }),
      ),
    );
    await emulator.close();
  }
}

try {
  const dir = await inputs();
  const localRun = await local(dir);
  const two = await cluster(dir, 2);
  const twoKilled = await cluster(dir, 2, true);
  const one = await cluster(dir, 1);
  const four = await cluster(dir, 4);
  const report = {
    files: FILES,
    requestMs: REQUEST_MS,
    limit: LIMIT,
    idealWallMs: Math.round((FILES * REQUEST_MS) / LIMIT),
    local: localRun,
    cluster2: two,
    killHalfway: { ...twoKilled, wallRatio: twoKilled.wallMs / two.wallMs },
    maxConcurrent: { workers1: one.maxConcurrent, workers2: two.maxConcurrent, workers4: four.maxConcurrent },
  };
  if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  else {
    const pct = (x: number) => `${(x * 100).toFixed(1)}%`;
    const line = (label: string, r: Result) =>
      `${label.padEnd(30)} wall ${String(r.wallMs).padStart(6)} ms  utilisation ${pct(r.utilisation).padStart(6)}  max in flight ${r.maxConcurrent}  429s ${r.rejected}  done ${r.done}`;
    process.stdout.write(
      [
        `${FILES} files, ${REQUEST_MS} ms a request, limit ${LIMIT} (ideal wall ${report.idealWallMs} ms)`,
        line(`local run (concurrency ${LIMIT})`, localRun),
        line('2 workers', two),
        line('2 workers, one killed halfway', twoKilled),
        line('1 worker', one),
        line('4 workers', four),
        `kill-halfway wall-time ratio: ${report.killHalfway.wallRatio.toFixed(2)}`,
        `max in flight with 1, 2, 4 workers: ${one.maxConcurrent}, ${two.maxConcurrent}, ${four.maxConcurrent} (limit ${LIMIT})`,
        '',
      ].join('\n'),
    );
  }
} finally {
  await redis.stop();
  await rm(root, { recursive: true, force: true });
}
