// The `speechpipe` dispatcher: --help and -h on every command, --version, the exit codes it
// decides itself, and the Node version check that must run on an old Node.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { REQUIRED_NODE } from '../src/protocol/node-version.ts';
import { assertBadUsage, CLI_CWD, cliEnv, runCli } from './helpers/cli.ts';
import { findOldNode } from './helpers/system-node.ts';

const root = fileURLToPath(CLI_CWD);
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  version: string;
  engines: { node: string };
};
const COMMANDS = ['transcribe', 'caption', 'tts', 'emulator'];
/** Every command, for what each must do alike. */
const ALL_COMMANDS = ['transcribe', 'worker', 'caption', 'tts', 'bench', 'emulator'];

test('--help and -h print each command its usage on stdout and exit 0', async () => {
  const cases = COMMANDS.flatMap((command) => [
    [command, '--help'],
    [command, '-h'],
  ]);
  cases.push(['tts', '--out', 'x.wav', '-h']);
  const runs = cases.map(async ([command, ...flags]) => {
    const r = await runCli([command!, ...flags]);
    const what = `${command} ${flags.join(' ')}`;
    assert.equal(r.code, 0, `${what}: ${r.stderr}`);
    assert.match(r.stdout, new RegExp(`^usage: speechpipe ${command} `), what);
    assert.match(r.stdout, /Exit code: 0 /, what);
    assert.equal(r.stderr, '', what);
  });
  await Promise.all(runs);
});

test('speechpipe --help, -h and help <command> print usage on stdout and exit 0', async () => {
  for (const args of [['--help'], ['-h'], ['help']]) {
    const r = await runCli(args);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^usage: speechpipe <command> \[options\]/);
    for (const c of COMMANDS) assert.match(r.stdout, new RegExp(`\\n  ${c} `));
  }
  const r = await runCli(['help', 'tts']);
  assert.equal(r.code, 0);
  assert.match(r.stdout, /^usage: speechpipe tts /);
});

test('--help after -- is an operand, not a request for help', async () => {
  // tts takes the words after -- as text: with no --out that is bad usage.
  const r = await runCli(['tts', '--', '--help']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--out is required/);
});

test('speechpipe --version prints the version from package.json', async () => {
  const r = await runCli(['--version']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, `${pkg.version}\n`);
});

test('no command exits 2 with the usage on stderr', async () => {
  const r = await runCli([]);
  assert.equal(r.code, 2);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^usage: speechpipe <command>/);
});

test('an unknown command exits 2 with one line naming the commands, and where the help is', async () => {
  for (const args of [['transcribes'], ['help', 'nope']]) {
    const r = await runCli(args);
    assert.equal(r.code, 2, args.join(' '));
    assert.equal(r.stdout, '');
    assertBadUsage(r.stderr, undefined, args.join(' '));
    assert.match(
      r.stderr,
      new RegExp(
        `^speechpipe: unknown command "${args.at(-1)}" \\(commands: ${ALL_COMMANDS.join(', ')}\\)\n`,
      ),
    );
  }
});

test('every command: an unknown option is one line naming it (quotes balanced), then where the help is', async () => {
  await Promise.all(
    ALL_COMMANDS.map(async (command) => {
      const r = await runCli([command, '--bogus']);
      assert.equal(r.code, 2, `${command}: ${r.stderr}`);
      assert.equal(r.stdout, '', command);
      assertBadUsage(r.stderr, command, command);
      assert.equal(r.stderr.split('\n')[0], `speechpipe ${command}: unknown option --bogus`);
    }),
  );
});

test('every command: an option missing its value, and one given a value it does not take, are said so', async () => {
  const cases: [string[], string][] = [
    [['transcribe', 'x', '--out'], '--out needs a value'],
    [['worker', '--queue'], '--queue needs a value'],
    [
      ['caption', 'x', '--port', '--realtime'],
      '--port needs a value (one that starts with - is written --port=--realtime)',
    ],
    [['tts', '--list-voices=yes'], '--list-voices takes no value'],
    [['bench', '--json=1'], '--json takes no value'],
    [['emulator', '--port'], '--port needs a value'],
    [['emulator', 'extra'], 'unexpected argument "extra": this command takes options only'],
  ];
  await Promise.all(
    cases.map(async ([args, message]) => {
      const r = await runCli(args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assertBadUsage(r.stderr, args[0], args.join(' '));
      assert.equal(r.stderr.split('\n')[0], `speechpipe ${args[0]}: ${message}`);
    }),
  );
});

test('the top-level help says what tts writes: WAV, Ogg Opus, MP3 and FLAC', async () => {
  const r = await runCli(['--help']);
  const tts = r.stdout.split('\n').find((line) => line.startsWith('  tts '));
  assert.ok(tts, r.stdout);
  for (const format of ['WAV', 'Ogg Opus', 'MP3', 'FLAC'])
    assert.ok(tts.includes(format), `${format}: ${tts}`);
});

test('a bad environment (API_URL without API_KEY) exits 2 for every command that talks to the service', async () => {
  const out = mkdtempSync(join(tmpdir(), 'speechpipe-cli-'));
  try {
    const env = { API_URL: 'http://127.0.0.1:9' };
    const runs = [
      ['tts', 'hello', '--out', join(out, 'a.wav')],
      ['tts', '--list-voices'],
      ['transcribe', 'package.json', '--out', out],
      ['caption', 'package.json', '--port', '0'],
    ].map(async (args) => {
      const r = await runCli(args, env);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      // In the command's terms: the library's `apiKey` option is not the command's.
      assert.match(r.stderr, /API_URL is set but API_KEY is not: set API_KEY/);
      assert.doesNotMatch(r.stderr, /apiKey/);
    });
    await Promise.all(runs);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test('a key too short to be a key is bad environment: exit 2, saying so', async () => {
  const r = await runCli(['tts', '--list-voices'], { API_URL: 'http://127.0.0.1:9', API_KEY: 'k' });
  assert.equal(r.code, 2, r.stderr);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^speechpipe: the API key must have at least 8 characters, not 1: /);
});

test('a reader that closed standard output (or error) early does not crash the command nor change its exit code', async () => {
  const out = mkdtempSync(join(tmpdir(), 'speechpipe-cli-'));
  try {
    const runs: [string[], string][] = [
      [['tts', 'Hello there.', '--out', join(out, 'hello.wav')], 'hello.wav'],
      [
        [
          'caption',
          'sine=frequency=300:sample_rate=16000:duration=1',
          '--input-format',
          'lavfi',
          '--port',
          '0',
          '--out',
          join(out, 'c.vtt'),
        ],
        'c.vtt',
      ],
    ];
    for (const [args, made] of runs) {
      const child = spawn(process.execPath, ['src/cli/main.ts', ...args], {
        cwd: CLI_CWD,
        env: cliEnv(),
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      // Both read ends closed at once: every line the command writes meets EPIPE.
      child.stdout!.destroy();
      child.stderr!.destroy();
      const [code] = (await once(child, 'exit')) as [number | null];
      assert.equal(code, 0, args.join(' '));
      assert.ok(existsSync(join(out, made)), made);
    }
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

test('the version check names the same Node as package.json engines', () => {
  const required = /^(\d+)\.(\d+)\.0$/.exec(REQUIRED_NODE);
  assert.ok(required, REQUIRED_NODE);
  assert.equal(pkg.engines.node, `>=${required[1]}.${required[2]}`);
});

test('on Node older than 22.19 the built command says what it needs and found, and exits 2', async (t) => {
  const main = join(root, 'dist/cli/main.js');
  if (!existsSync(main) || statSync(main).mtimeMs < statSync(join(root, 'src/cli/main.ts')).mtimeMs) {
    assert.fail(
      'dist/cli/main.js is missing or older than src/cli/main.ts: `npm test` builds it; run `npm run build`',
    );
  }
  const old = findOldNode();
  if (!old) {
    t.skip(
      'no Node older than 22.19 on this machine (looked at /usr/bin/node, /usr/local/bin/node, which -a node)',
    );
    return;
  }
  t.diagnostic(`old Node: ${old.path} v${old.version}`);
  for (const args of [['--version'], ['transcribe', 'x', '--out', 'y'], []]) {
    const r = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile(old.path, [main, ...args], { cwd: root }, (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      ),
    );
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.equal(r.stdout, '');
    assert.equal(
      r.stderr,
      `speechpipe: needs Node.js 22.19.0 or later; this is Node.js ${old.version} (${old.path})\n`,
    );
  }
});
