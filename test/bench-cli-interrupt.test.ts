// `speechpipe bench` interrupted before its run starts (Ctrl-C while it reads the media or
// starts its emulator) exits 130 and says so, as every command does when interrupted.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, type TestContext, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../src/cli/bench-command.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { canListChildren, childPids } from './helpers/proc.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-bench-int-'));
after(() => rm(root, { recursive: true, force: true }));
const wav = join(root, 'clip.wav');
await writeFile(wav, encodeWav(Buffer.alloc(64_000), 16_000, 1));
const args = ['--workload', 'fast', '--concurrency', '1', '--duration', '1', '--media', wav];

/** Run the command in this process with its stderr captured; `interrupt` gets its SIGINT listener. */
async function runInterrupted(
  t: TestContext,
  interrupt: (sigint: () => void) => Promise<void> | void,
): Promise<{ code: number; stderr: string }> {
  const saved = { url: process.env.API_URL, key: process.env.API_KEY };
  delete process.env.API_URL;
  delete process.env.API_KEY;
  t.after(() => {
    if (saved.url !== undefined) process.env.API_URL = saved.url;
    if (saved.key !== undefined) process.env.API_KEY = saved.key;
  });
  let stderr = '';
  t.mock.method(process.stderr, 'write', (chunk: unknown) => {
    stderr += String(chunk);
    return true;
  });
  const before = new Set(process.listeners('SIGINT'));
  const running = run(args);
  const listener = process.listeners('SIGINT').find((l) => !before.has(l));
  assert.ok(listener, 'the command listens for SIGINT');
  await interrupt(() => (listener as (signal: NodeJS.Signals) => void)('SIGINT'));
  return { code: await running, stderr };
}

test('Ctrl-C while the media is read: exit 130, interrupted', async (t) => {
  const { code, stderr } = await runInterrupted(t, (sigint) => sigint());
  assert.equal(code, 130, stderr);
  assert.match(stderr, /interrupted/);
});

test('Ctrl-C while the emulator starts (it gets the signal too): exit 130, interrupted', async (t) => {
  if (!(await canListChildren())) return t.skip('no /proc/PID/task/PID/children here');
  const { code, stderr } = await runInterrupted(t, async (sigint) => {
    // A terminal's Ctrl-C reaches the whole process group: the emulator as soon as it exists.
    for (let i = 0; i < 3000; i++) {
      const pids = await childPids(process.pid);
      if (pids.length > 0) {
        for (const pid of pids) process.kill(pid, 'SIGINT');
        sigint();
        return;
      }
      await sleep(10);
    }
    assert.fail('no emulator was started');
  });
  assert.equal(code, 130, stderr);
  assert.match(stderr, /interrupted/);
});
