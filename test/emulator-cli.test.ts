// `speechpipe emulator` standalone: prints its URL and key as JSON, serves the interface, and
// closes cleanly (exit 0) on SIGTERM and SIGINT; bad arguments and bad files exit 2; the
// accounts and faults files and the admin endpoint, driven with plain fetch as any language would.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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

test('an address it cannot listen on (a port in use, a host that does not resolve) exits 2 saying which, with every thread stopped', async () => {
  const { createServer } = await import('node:net');
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  const { port } = taken.address() as { port: number };
  try {
    for (const [args, why] of [
      [['emulator', '--port', String(port)], /cannot listen on 127\.0\.0\.1:\d+ \(EADDRINUSE/],
      [
        ['emulator', '--port', String(port), '--workers', '2'],
        /cannot listen on 127\.0\.0\.1:\d+ \(EADDRINUSE/,
      ],
      [
        ['emulator', '--host', 'no-such-host.invalid'],
        /cannot listen on no-such-host\.invalid:0 \(E(NOTFOUND|AI_AGAIN)/,
      ],
    ] as const) {
      const run = start([...args]);
      const [code] = await run.exit;
      await run.closed;
      assert.equal(code, 2, `${args.join(' ')}: ${run.stderr()}`);
      assert.match(run.stderr(), why);
      assert.doesNotMatch(run.stderr(), /at .*\.ts:\d+/, 'no stack');
    }
  } finally {
    taken.close();
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

/** `text` matched literally inside a RegExp. */
const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const examples = fileURLToPath(new URL('../examples/', import.meta.url));

test('--accounts and --faults take the example files; a fault added over the admin endpoint acts until cleared; stats over HTTP', async () => {
  const run = start([
    'emulator',
    '--accounts',
    `${examples}emulator-accounts.json`,
    '--faults',
    `${examples}emulator-faults.json`,
  ]);
  const lines = createInterface({ input: run.child.stdout });
  const [first] = (await once(lines, 'line')) as [string];
  const { url, apiKey, admin } = JSON.parse(first) as { url: string; apiKey: string; admin: string };
  assert.equal(apiKey, 'test-key-acme', 'the first key of the file');
  assert.equal(admin, `${url}/_emulator`);
  const job = (key: string) => fetch(`${url}/v1/transcribe/${uuid()}`, { headers: { 'x-api-key': key } });
  const tts = (key: string, body: unknown) =>
    fetch(`${url}/http/tts`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const code = async (res: Response) => ((await res.json()) as { code: string }).code;

  // The accounts file: capabilities and tiers of its keys, its limits.
  assert.equal((await job(apiKey)).status, 404);
  const forbidden = await job('test-key-acme-tts');
  assert.deepEqual([forbidden.status, await code(forbidden)], [403, 'AUTH_FORBIDDEN']);
  const freeTier = await tts('test-key-hobby', { id: uuid(), text: 'a'.repeat(201) });
  assert.equal(freeTier.status, 422);
  assert.deepEqual(((await freeTier.json()) as { data: unknown }).data, {
    limit: 200,
    observed: 201,
    unit: 'characters',
    bound: 'tts_input_characters',
  });
  // The faults file: the second TTS request gets its 503.
  const moderated = await tts(apiKey, {});
  assert.equal(moderated.status, 503);
  assert.equal(moderated.headers.get('retry-after'), '1');
  assert.equal(await code(moderated), 'TTS_MODERATION_UNAVAILABLE');
  const listed = await fetch(`${admin}/faults`);
  const listing = await listed.text();
  assert.equal((JSON.parse(listing) as { faults: unknown[] }).faults.length, 3);
  assert.ok(!listing.includes('test-key-hobby'), 'a rule key is not shown');

  // A fault added over HTTP, as a test in another language would.
  const added = await fetch(`${admin}/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ operation: 'batch.get', action: { type: 'status', status: 503, retryAfter: 2 } }),
  });
  assert.equal(added.status, 201);
  assert.equal(typeof ((await added.json()) as { id: unknown }).id, 'number');
  for (let i = 0; i < 2; i++) {
    const faulted = await job(apiKey);
    assert.equal(faulted.status, 503);
    assert.equal(faulted.headers.get('retry-after'), '2');
    assert.equal(await code(faulted), 'HTTP_503');
  }
  const cleared = await fetch(`${admin}/faults`, { method: 'DELETE' });
  assert.deepEqual(await cleared.json(), { cleared: 4 });
  const afterClear = await job(apiKey);
  assert.deepEqual([afterClear.status, await code(afterClear)], [404, 'TRANSCRIPTION_JOB_NOT_FOUND']);

  const statsReply = await fetch(`${admin}/stats`);
  assert.equal(statsReply.status, 200);
  const text = await statsReply.text();
  const stats = JSON.parse(text) as {
    requests: Record<string, number>;
    rejections: Record<string, number>;
    faultsApplied: Record<string, number>;
  };
  assert.equal(stats.requests['batch.get'], 5);
  assert.equal(stats.requests['tts.http'], 2);
  assert.equal(stats.rejections.HTTP_503, 2);
  assert.equal(stats.rejections.TTS_MODERATION_UNAVAILABLE, 1);
  assert.equal(stats.rejections.AUTH_FORBIDDEN, 1);
  assert.equal(stats.faultsApplied.status, 3);
  for (const key of ['test-key-acme', 'test-key-hobby']) assert.ok(!text.includes(key), key);

  run.child.kill('SIGTERM');
  assert.deepEqual(await run.exit, [0, null], run.stderr());
  lines.close();
});

test('a bad --accounts or --faults file exits 2 naming the file, the field and what was expected', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-emu-files-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text);
    return path;
  };
  const badTier = await file(
    'tier.json',
    JSON.stringify({ keys: [{ key: 'k', account: 'a', tier: 'gold' }] }),
  );
  const badJson = await file('broken.json', '{"keys": [');
  // V8 quotes the text around an unexpected token: here, a key left unquoted.
  const unquotedKey = await file('unquoted.json', '{"keys": [{"key": sk_secret_4f9a2c, "account": "a"}]}');
  const badRule = await file(
    'rule.json',
    JSON.stringify([{ operation: '*', action: { type: 'status', status: 42 } }]),
  );
  const notArray = await file('object.json', JSON.stringify({ operation: '*', action: { type: 'fail' } }));
  const good = `${examples}emulator-accounts.json`;
  const cases: [string[], RegExp][] = [
    [
      ['--accounts', badTier],
      new RegExp(
        `${badTier}: keys\\[0\\]\\.tier: expected one of "free", "standard", "enterprise", got "gold"`,
      ),
    ],
    [['--accounts', badJson], new RegExp(`${literal(badJson)}: not valid JSON`)],
    [
      ['--accounts', unquotedKey],
      new RegExp(
        `${literal(unquotedKey)}: not valid JSON: Unexpected token \\(the text around it is not shown`,
      ),
    ],
    [['--accounts', join(dir, 'missing.json')], /missing\.json: cannot read it \(ENOENT\)/],
    [
      ['--faults', badRule],
      new RegExp(
        `${literal(badRule)}: \\[0\\]\\.action\\.status: expected an integer from 100 to 599, got number 42`,
      ),
    ],
    [
      ['--faults', notArray],
      new RegExp(`${literal(notArray)}: \\(top level\\): expected an array of fault rules, got an object`),
    ],
    [['--accounts', good, '--key', 'k'], /give --key or --accounts, not both/],
    [
      ['--key', 'short'],
      /^speechpipe emulator: --key must have at least 8 characters \(clients refuse a shorter key\)\n/,
    ],
  ];
  await Promise.all(
    cases.map(async ([args, message]) => {
      const bad = start(['emulator', ...args]);
      assert.equal((await bad.exit)[0], 2, args.join(' '));
      await bad.closed;
      assert.match(bad.stderr(), message);
      assert.doesNotMatch(bad.stderr(), /secret/, 'no part of a key is shown');
    }),
  );
});
