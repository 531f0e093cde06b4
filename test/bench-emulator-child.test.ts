// The emulator `speechpipe bench` starts in a process of its own goes when bench goes, however
// bench ends (SIGKILL too): it watches a pipe from bench (`emulator --stop-on-stdin-end`).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdir, readFile, readlink } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { cliEnv } from './helpers/cli.ts';
import { canListChildren, childPids } from './helpers/proc.ts';

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Whether process `pid` has a TCP connection open (child stdio pipes are Unix sockets). */
async function hasTcp(pid: number): Promise<boolean> {
  const inodes = new Set<string>();
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [])) {
    const link = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
    if (inode) inodes.add(inode);
  }
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const rows = (await readFile(table, 'utf8').catch(() => '')).trim().split('\n').slice(1);
    if (rows.some((row) => inodes.has(row.trim().split(/\s+/)[9] ?? ''))) return true;
  }
  return false;
}

/** Poll `check` until it holds, at most `limitMs` (a bound, not a measurement). */
async function until(check: () => boolean | Promise<boolean>, limitMs = 30_000): Promise<boolean> {
  for (const end = Date.now() + limitMs; Date.now() < end; await sleep(50)) if (await check()) return true;
  return check();
}

test('emulator --stop-on-stdin-end stops, exit 0, when its standard input ends', async () => {
  const child = spawn(process.execPath, [main, 'emulator', '--stop-on-stdin-end'], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exit = once(child, 'exit');
  const lines = createInterface({ input: child.stdout });
  const first = await Promise.race([
    once(lines, 'line').then(([line]) => line as string),
    exit.then(() => assert.fail(`the emulator exited before it served: ${stderr}`)),
  ]);
  assert.match((JSON.parse(first) as { url: string }).url, /^http:\/\/127\.0\.0\.1:\d+$/);
  child.stdin.end();
  const [code] = (await exit) as [number | null];
  lines.close();
  assert.equal(code, 0, stderr);
});

test('bench killed with SIGKILL leaves no emulator behind', async (t) => {
  if (!(await canListChildren())) return t.skip('no /proc/PID/task/PID/children here');
  const bench = spawn(
    process.execPath,
    [main, 'bench', '--workload', 'tts', '--concurrency', '1', '--duration', '120', '--json'],
    { stdio: 'ignore', env: cliEnv() },
  );
  const benchExit = once(bench, 'exit');
  let emulatorPid: number | undefined;
  try {
    const found = await until(async () => {
      for (const pid of await childPids(bench.pid!)) {
        const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
        if (cmdline.includes('emulator')) emulatorPid = pid;
      }
      // Bench has read the emulator's address once it has a TCP connection (to the emulator).
      return emulatorPid !== undefined && (await hasTcp(bench.pid!));
    });
    assert.ok(found, 'bench started its emulator and talks to it');
    bench.kill('SIGKILL');
    await benchExit;
    assert.ok(await until(() => !alive(emulatorPid!)), `emulator ${emulatorPid} still running`);
  } finally {
    if (bench.exitCode === null && bench.signalCode === null) bench.kill('SIGKILL');
    if (emulatorPid !== undefined && alive(emulatorPid)) process.kill(emulatorPid, 'SIGKILL');
  }
});
