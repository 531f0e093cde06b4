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

function start(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, [main, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const exit = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  /** Once stdout and stderr are closed too: all of stderr was read. */
  const closed = once(child, 'close');
  return { child, exit, closed, stderr: () => stderr };
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

test('TTS_MAX_INPUT_CHARACTERS_* in the environment set the text limits; a bad value exits 2', async () => {
  const run = start(['emulator', '--key', 'cli-env-key'], { TTS_MAX_INPUT_CHARACTERS_STANDARD: '4' });
  const lines = createInterface({ input: run.child.stdout });
  const [first] = (await once(lines, 'line')) as [string];
  const { url, apiKey } = JSON.parse(first) as { url: string; apiKey: string };
  const reply = await call(`${url}/http/tts`, {
    key: apiKey,
    body: JSON.stringify({ id: uuid(), text: 'hello' }),
    dispatcher,
  });
  assert.equal(reply.status, 422, reply.text);
  const body = reply.json() as { code: string; data: Record<string, unknown> };
  assert.equal(body.code, 'CHARACTER_COUNT_EXCEEDED');
  assert.deepEqual(body.data, { limit: 4, observed: 5, unit: 'characters', bound: 'tts_input_characters' });
  run.child.kill('SIGTERM');
  assert.deepEqual(await run.exit, [0, null], run.stderr());
  lines.close();
  const bad = start(['emulator'], { TTS_MAX_INPUT_CHARACTERS_FREE: 'lots' });
  assert.equal((await bad.exit)[0], 2);
  await bad.closed;
  assert.match(bad.stderr(), /TTS_MAX_INPUT_CHARACTERS_FREE must be a positive integer/);
});
