// Client CPU per live stream against the protocol's floor (issue 23): `speechpipe bench
// --workload live --concurrency 16 --pace 1` (its client_cpu_seconds_per_audio_second) and a
// bare loop that sends the same frames at the same pace with the same transport library and
// does nothing else (bench/helpers/bare-live.ts), each a process of its own, in alternating
// rounds against one emulator process, per transport. With --before DIR, the same command from
// another checkout (a worktree of an earlier commit, its node_modules installed) runs in the
// same rounds. Reports the medians and bare/ours (target >= 0.8).
//
//   node bench/live-cpu.ts [--duration SEC] [--warmup SEC] [--rounds N] [--before DIR]
//                          [--also NAME=DIR ...] [--transport http|socketio] [--concurrency N]
//                          [--pace X] [--pin] [--together] [--layers L,...] [--json]
//
// --pin (Linux, taskset): the emulator runs on the last CPU allowed and every contender on the
// first, so that the service's work never shares a core with the client measured (on a 2-core
// machine unpinned processes migrate between the cores, and each contender meets the
// emulator's caches and wake-ups in its own way).
//
// --layers transport,session,stream: also the layers of bench/live-cpu-layers.ts (in the
// Socket.IO rounds only; speechpipe's SocketTransport alone, a LiveSession, sttStream), as
// contenders named `layer:NAME`, to see where the CPU above the bare loop goes.
//
// --together: the contenders of a round run at the same time, each on an account of its own
// (so that each has the account's 8 streams), on the same CPU when pinned. Sequential rounds on
// a shared virtual machine differ by up to 50 % for the same code: whatever the host does
// meanwhile lands on one contender. Run together, contenders meet the same disturbance at the
// same moment, and their ratio is steadier from round to round (compare ratios, not figures
// across runs: each contender is measured beside the others).
//
// --pace 50 --concurrency 8 keeps the client busy (frames go as fast as they are accepted): the
// CPU per frame without the idle wake-ups of a live pace, steadier on a shared machine.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isLiveLayer, LIVE_LAYERS } from './helpers/live-layers.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TARGET = 0.8;

interface Contender {
  name: string;
  /** The transports it measures (default both). */
  transports?: ('http' | 'socketio')[];
  /** Runs one round; resolves with CPU seconds per audio second. */
  run(transport: 'http' | 'socketio', service: Service): Promise<number>;
}

interface Service {
  url: string;
  apiKey: string;
}

/** Node with `args`, on CPU `cpu` alone when pinning (taskset), else where the system puts it. */
function nodeCommand(args: string[], cpu: number | undefined): [string, string[]] {
  return cpu === undefined
    ? [process.execPath, args]
    : ['taskset', ['-c', String(cpu), process.execPath, ...args]];
}

/**
 * The CPUs this process may run on (`Cpus_allowed_list`: `0-1`, `2,4-5`), in order: under a
 * cpuset or taskset they need not be 0..n-1.
 */
function allowedCpus(): number[] {
  const line = /^Cpus_allowed_list:\s*(.+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? '';
  return line.split(',').flatMap((part) => {
    const [from, to = from] = part.trim().split('-').map(Number);
    return Number.isInteger(from) && Number.isInteger(to)
      ? Array.from({ length: to! - from! + 1 }, (_, i) => from! + i)
      : [];
  });
}

/** When pinning: contenders on the first allowed CPU, the service on the last. */
function pinning(): { client: number; service: number } {
  const cpus = allowedCpus();
  if (cpus.length < 2) throw new Error(`--pin needs 2 CPUs or more, this process may use ${cpus.length}`);
  return { client: cpus[0]!, service: cpus.at(-1)! };
}

/** A child process's stdout, parsed as JSON once it exited 0. */
async function runChild(
  args: string[],
  env: NodeJS.ProcessEnv,
  cwd: string,
  cpu: number | undefined,
): Promise<unknown> {
  const [command, argv] = nodeCommand(args, cpu);
  const child = spawn(command, argv, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (err += d));
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`${args.join(' ')} exited ${code}: ${err.slice(-2000)}`);
  return JSON.parse(out);
}

/** `speechpipe bench` from the checkout at `dir`, against the service. */
function cliContender(name: string, dir: string, options: RunOptions): Contender {
  return {
    name,
    async run(transport, service) {
      const report = (await runChild(
        [
          join(dir, 'src/cli/main.ts'),
          'bench',
          '--workload',
          'live',
          '--transport',
          transport,
          '--concurrency',
          String(options.concurrency),
          '--pace',
          String(options.pace),
          '--duration',
          String(options.durationSec),
          '--warmup',
          String(options.warmupSec),
          '--json',
        ],
        { ...process.env, API_URL: service.url, API_KEY: service.apiKey },
        dir,
        options.pin?.client,
      )) as { client_cpu_seconds_per_audio_second: number; operations: { failed: number } };
      if (report.operations.failed > 0) throw new Error(`${name}: ${JSON.stringify(report.operations)}`);
      return report.client_cpu_seconds_per_audio_second;
    },
  };
}

function bareContender(options: RunOptions): Contender {
  return {
    name: 'bare',
    async run(transport, service) {
      const report = (await runChild(
        [
          join(ROOT, 'bench/helpers/bare-live.ts'),
          JSON.stringify({
            ...service,
            transport,
            concurrency: options.concurrency,
            pace: options.pace,
            durationSec: options.durationSec,
            warmupSec: options.warmupSec,
          }),
        ],
        process.env,
        ROOT,
        options.pin?.client,
      )) as { client_cpu_seconds_per_audio_second: number; failed: number };
      if (report.failed > 0) throw new Error(`bare: ${report.failed} streams failed`);
      return report.client_cpu_seconds_per_audio_second;
    },
  };
}

/** One layer of bench/live-cpu-layers.ts (Socket.IO), from this checkout. */
function layerContender(layer: string, options: RunOptions): Contender {
  if (!isLiveLayer(layer)) throw new Error(`--layers: unknown layer ${layer} (${LIVE_LAYERS.join(', ')})`);
  return {
    name: `layer:${layer}`,
    transports: ['socketio'],
    async run(_transport, service) {
      const report = (await runChild(
        [
          join(ROOT, 'bench/live-cpu-layers.ts'),
          layer,
          service.url,
          service.apiKey,
          String(options.durationSec),
          String(options.pace),
          String(options.concurrency),
          String(options.warmupSec),
        ],
        process.env,
        ROOT,
        options.pin?.client,
      )) as { client_cpu_seconds_per_audio_second: number };
      return report.client_cpu_seconds_per_audio_second;
    },
  };
}

/**
 * The emulator as `speechpipe bench` starts it: `speechpipe emulator`, a process of its own.
 * With `accounts` > 1, that many accounts, one key each (`apiKeys`), the first as `apiKey`.
 */
async function startService(
  cpu: number | undefined,
  accounts = 1,
): Promise<Service & { apiKeys: string[]; stop(): Promise<void> }> {
  const dir = accounts > 1 ? await mkdtemp(join(tmpdir(), 'live-cpu-')) : undefined;
  const keys = Array.from({ length: accounts }, (_, i) => `live-cpu-${i}-${process.pid}`);
  const args = [join(ROOT, 'src/cli/main.ts'), 'emulator', '--stop-on-stdin-end'];
  if (dir) {
    const file = join(dir, 'accounts.json');
    const entries = keys.map((key, i) => ({ key, account: `contender-${i}`, tier: 'enterprise' }));
    await writeFile(file, JSON.stringify({ keys: entries }));
    args.push('--accounts', file);
  }
  const [command, argv] = nodeCommand(args, cpu);
  const child = spawn(command, argv, {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  // A command that cannot start (no taskset, no CPU of that number) ends with no line.
  let failed: Error | undefined;
  child.once('error', (err) => (failed = err));
  let line = '';
  for await (const chunk of child.stdout) {
    line += chunk;
    if (line.includes('\n')) break;
  }
  if (!line.includes('\n'))
    throw new Error(
      `the emulator did not start (${failed?.message ?? `${command} exited ${child.exitCode}`})`,
    );
  const { url, apiKey } = JSON.parse(line.split('\n')[0]!) as Service;
  return {
    url,
    apiKey,
    apiKeys: dir ? keys : [apiKey],
    async stop() {
      child.stdin.end();
      if (child.exitCode === null) await once(child, 'exit');
      if (dir) await rm(dir, { recursive: true, force: true });
    },
  };
}

interface RunOptions {
  durationSec: number;
  /** Audio at this multiple of real time (1: live; far above, frames go as fast as accepted). */
  pace: number;
  warmupSec: number;
  rounds: number;
  concurrency: number;
  transports: ('http' | 'socketio')[];
  before?: string;
  /** More checkouts to run in the same rounds, by name. */
  also?: Record<string, string>;
  /** Layers of bench/live-cpu-layers.ts to run as contenders too (Socket.IO only). */
  layers?: string[];
  /** The contenders of a round run at the same time, each on an account of its own. */
  together?: boolean;
  /** The CPUs of the contenders and of the service (taskset), from {@link pinning}. */
  pin?: { client: number; service: number } | undefined;
  log?: (line: string) => void;
}

export interface LiveCpuRow {
  transport: 'http' | 'socketio';
  /** Median CPU seconds per audio second, by contender. */
  median: Record<string, number>;
  rounds: Record<string, number[]>;
  /** bare / ours, and bare / before when measured (target >= 0.8). */
  bareOverOurs: number;
  bareOverBefore?: number;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export async function runLiveCpu(options: RunOptions): Promise<LiveCpuRow[]> {
  const log = options.log ?? (() => {});
  const contenders = [
    cliContender('ours', ROOT, options),
    bareContender(options),
    ...(options.before ? [cliContender('before', options.before, options)] : []),
    ...Object.entries(options.also ?? {}).map(([name, dir]) => cliContender(name, dir, options)),
    ...(options.layers ?? []).map((layer) => layerContender(layer, options)),
  ];
  const service = await startService(options.pin?.service, options.together ? contenders.length : 1);
  const rows: LiveCpuRow[] = [];
  try {
    const results = new Map<string, Record<string, number[]>>();
    for (let round = 0; round < options.rounds; round++) {
      for (const transport of options.transports) {
        const running = contenders.filter((c) => c.transports?.includes(transport) ?? true);
        const table = results.get(transport) ?? {};
        results.set(transport, table);
        const record = (name: string, value: number) => {
          table[name] ??= [];
          table[name]!.push(value);
          log(`round ${round + 1} ${transport} ${name}: ${value.toFixed(5)} s CPU per audio s`);
        };
        if (options.together) {
          // All at once, each on its own account (a different one each round). Every one ends
          // before a failure is thrown: none is left running against a stopped service.
          const settled = await Promise.allSettled(
            running.map((c, i) =>
              c.run(transport, {
                url: service.url,
                apiKey: service.apiKeys[(i + round) % contenders.length]!,
              }),
            ),
          );
          for (const s of settled) if (s.status === 'rejected') throw s.reason;
          for (const [i, c] of running.entries())
            record(c.name, (settled[i] as PromiseFulfilledResult<number>).value);
          continue;
        }
        // A different first contender each round: a drift in the machine's load hits all alike.
        for (let i = 0; i < running.length; i++) {
          const c = running[(i + round) % running.length]!;
          record(c.name, await c.run(transport, service));
        }
      }
    }
    for (const transport of options.transports) {
      const table = results.get(transport)!;
      const m = Object.fromEntries(Object.entries(table).map(([k, v]) => [k, median(v)]));
      rows.push({
        transport,
        median: m,
        rounds: table,
        bareOverOurs: m.bare! / m.ours!,
        ...(m.before !== undefined ? { bareOverBefore: m.bare! / m.before } : {}),
      });
    }
  } finally {
    await service.stop();
  }
  return rows;
}

/** bare / `name` in each round (both ran in it). */
export function roundRatios(row: LiveCpuRow, name: string): number[] {
  const bare = row.rounds.bare ?? [];
  return (row.rounds[name] ?? []).flatMap((x, i) => (bare[i] === undefined ? [] : [bare[i]! / x]));
}

export function formatLiveCpu(rows: readonly LiveCpuRow[]): string {
  const names = [...new Set(rows.flatMap((r) => Object.keys(r.median)))];
  const lines = [
    `client CPU s per audio s (median of rounds; bare / each)  ${names.map((n) => n.padEnd(18)).join('')}`,
  ];
  for (const r of rows) {
    const cell = (n: string) => {
      const x = r.median[n];
      if (x === undefined) return '-'.padEnd(18);
      return (n === 'bare' ? x.toFixed(5) : `${x.toFixed(5)} (${(r.median.bare! / x).toFixed(2)})`).padEnd(
        18,
      );
    };
    lines.push(`${`live ${r.transport}`.padEnd(57)}${names.map(cell).join('')}`);
    // Each round's own bare / each: the rounds differ more from one another than contenders in
    // one round do, so this range says how far a median can be trusted.
    const range = (n: string) => {
      const ratios = roundRatios(r, n);
      if (n === 'bare' || ratios.length === 0) return ''.padEnd(18);
      return `${Math.min(...ratios).toFixed(2)}..${Math.max(...ratios).toFixed(2)}`.padEnd(18);
    };
    lines.push(`${'  bare / each, per round: lowest..highest'.padEnd(57)}${names.map(range).join('')}`);
  }
  lines.push(`target: bare / ours >= ${TARGET}`);
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const value = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const transport = value('--transport');
  const before = value('--before');
  const also = Object.fromEntries(
    args.flatMap((a, i) => (a === '--also' ? [args[i + 1]!.split('=') as [string, string]] : [])),
  );
  const rows = await runLiveCpu({
    durationSec: Number(value('--duration') ?? 60),
    warmupSec: Number(value('--warmup') ?? 10),
    rounds: Number(value('--rounds') ?? 3),
    concurrency: Number(value('--concurrency') ?? 16),
    pace: Number(value('--pace') ?? 1),
    transports: transport ? [transport as 'http' | 'socketio'] : ['http', 'socketio'],
    ...(before ? { before } : {}),
    also,
    pin: args.includes('--pin') ? pinning() : undefined,
    together: args.includes('--together'),
    layers: value('--layers')?.split(',').filter(Boolean) ?? [],
    log: (line) => console.error(line),
  });
  console.log(args.includes('--json') ? JSON.stringify(rows, null, 2) : formatLiveCpu(rows));
}
