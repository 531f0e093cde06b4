// `speechpipe emulator` standalone: prints its URL and key as JSON, serves the interface, and
// closes cleanly (exit 0) on SIGTERM and SIGINT; bad arguments exit 2.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Agent } from 'undici';
import { call, uuid } from './helpers/emulator-fixtures.ts';

const main = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const dispatcher = new Agent();
after(() => dispatcher.close());

function start(args: string[]) {
  const child = spawn(process.execPath, [main, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exit = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  return { child, exit, stderr: () => stderr };
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`serves with the given key and closes on ${signal}`, async () => {
    const run = start(['emulator', '--port', '0', '--key', 'cli-test-key']);
    const lines = createInterface({ input: run.child.stdout });
    const [first] = (await once(lines, 'line')) as [string];
    const { url, apiKey } = JSON.parse(first) as { url: string; apiKey: string };
    assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(apiKey, 'cli-test-key');
    const reply = await call(`${url}/v1/transcribe/${uuid()}`, { key: apiKey, dispatcher });
    assert.equal(reply.status, 404);
    assert.equal((reply.json() as { code: string }).code, 'TRANSCRIPTION_JOB_NOT_FOUND');
    assert.equal((await call(`${url}/v1/transcribe/${uuid()}`, { key: 'other', dispatcher })).status, 401);
    run.child.kill(signal);
    const [code] = await run.exit;
    lines.close();
    assert.equal(code, 0, run.stderr());
    assert.match(run.stderr(), new RegExp(`closed on ${signal}`));
  });
}

test('a random key when none is given; bad arguments exit 2', async () => {
  const run = start(['emulator']);
  const lines = createInterface({ input: run.child.stdout });
  const [first] = (await once(lines, 'line')) as [string];
  assert.match((JSON.parse(first) as { apiKey: string }).apiKey, /^emu_/);
  run.child.kill('SIGTERM');
  const ended = await run.exit;
  assert.deepEqual(ended, [0, null], run.stderr());
  lines.close();
  for (const args of [['emulator', '--port', 'x'], ['emulator', '--nope'], ['unknown-command'], []]) {
    const bad = start(args);
    assert.equal((await bad.exit)[0], 2, args.join(' '));
  }
});
