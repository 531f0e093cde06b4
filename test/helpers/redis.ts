// A real Redis for cluster tests: Debian's redis-server on a free port, in a temporary
// directory, with no persistence; stopped (and its directory removed) by stop().

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { answers, freePort } from './ports.ts';

export interface RedisServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** Why cluster tests cannot run here, or undefined when redis-server is installed. */
export function redisMissing(): string | undefined {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return undefined;
  } catch {
    return 'redis-server is not installed (scripts/setup.sh installs it)';
  }
}

export async function startRedis(): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-redis-'));
  const port = await freePort();
  const child: ChildProcess = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const began = Date.now();
  while (!(await answers(port))) {
    if (child.exitCode !== null || Date.now() - began > 10_000) {
      child.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
      throw new Error(`redis-server did not start: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
