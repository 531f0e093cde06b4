// The ways in from a checkout, run as a newcomer runs them after setup, on a machine whose own
// `node` is older than the sources need (Debian's 20 here): the npm scripts and npx pick the
// pinned Node 24 themselves. Also what the scripts print to a pipe, and what git ignores.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { findOldNode, systemEnv } from './helpers/system-node.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { name: string; version: string };

let env: NodeJS.ProcessEnv;

before(() => {
  const system = systemEnv();
  env = system.env;
  // Said, not skipped: on a machine whose node is new enough the same commands still must work.
  process.stderr.write(
    `# system node: ${system.node}${findOldNode() ? '' : ' (no Node older than 22.19 here: the commands run on it)'}\n`,
  );
});

function sh(
  command: string,
  args: string[],
  extraEnv: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      { cwd: root, env: { ...env, ...extraEnv }, timeout: 90_000, maxBuffer: 1 << 24 },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

test('npm run -s speechpipe -- ARGS runs the command from the sources on the pinned Node', async () => {
  const version = await sh('npm', ['run', '-s', 'speechpipe', '--', '--version']);
  assert.equal(version.code, 0, version.stderr);
  assert.equal(version.stdout, `${pkg.version}\n`);
  const help = await sh('npm', ['run', '-s', 'speechpipe', '--', 'tts', '--help']);
  assert.equal(help.code, 0, help.stderr);
  assert.match(help.stdout, /^usage: speechpipe tts /);
  // Its exit code is the command's.
  const bad = await sh('npm', ['run', '-s', 'speechpipe', '--', 'tts', '--bogus']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /^speechpipe tts: unknown option --bogus\n/);
});

test('npx speechpipe runs the built command on the pinned Node', async () => {
  const main = join(root, 'dist/cli/main.js');
  if (!existsSync(main) || statSync(main).mtimeMs < statSync(join(root, 'src/cli/main.ts')).mtimeMs)
    assert.fail(
      'dist/cli/main.js is missing or older than src/cli/main.ts: `npm test` builds it; run `npm run build`',
    );
  // npm_config_yes=false: were it not found in the checkout, npx would fail, not fetch one.
  const r = await sh('npx', ['speechpipe', '--version'], { npm_config_yes: 'false' });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, `${pkg.version}\n`);
});

test('npm run test:unit -- FILE runs that file alone, with the handle check of every test file', async () => {
  const grace = { SPEECHPIPE_LEAK_GRACE_MS: '500' };
  const tidy = await sh(
    'npm',
    ['run', 'test:unit', '--', '--test-reporter=tap', 'test/fixtures/tidy.fixture.ts'],
    grace,
  );
  assert.equal(tidy.code, 0, tidy.stdout + tidy.stderr);
  assert.match(tidy.stdout, /^# tests 1$/m);
  assert.match(tidy.stdout, /passes and tidies up/);
  const both = await sh(
    'npm',
    [
      'run',
      'test:unit',
      '--',
      '--test-reporter=tap',
      'test/fixtures/tidy.fixture.ts',
      'test/fixtures/leaky.fixture.ts',
    ],
    grace,
  );
  assert.notEqual(both.code, 0);
  // Those two files' tests, and the leaky file failed as a whole: nothing else ran.
  const ran = [...both.stdout.matchAll(/^# Subtest: (.*)$/gm)].map((m) => m[1]).sort();
  assert.deepEqual(ran, ['passes and tidies up', 'passes but leaks', 'test/fixtures/leaky.fixture.ts']);
  assert.match(both.stdout + both.stderr, /left handles open after its hooks: TCPServerWrap x1/);
});

test('test:unit: an option with its value apart is not taken for a file (no file given: every test file)', async (t) => {
  // A `node` that prints how it was called stands in for the runners.
  const bin = mkdtempSync(join(tmpdir(), 'speechpipe-fake-node-'));
  t.after(() => rmSync(bin, { recursive: true, force: true }));
  writeFileSync(join(bin, 'node'), '#!/bin/sh\necho "node $*"\n', { mode: 0o755 });
  const run = (args: string[]) => sh('sh', ['scripts/test-unit.sh', ...args], { PATH: `${bin}:${env.PATH}` });
  for (const pattern of [['--test-name-pattern', 'resume'], ['--test-name-pattern=resume']]) {
    const { code, stdout } = await run(pattern);
    assert.equal(code, 0, stdout);
    const calls = stdout.split('\n').filter((l) => l.startsWith('node '));
    assert.equal(calls.length, 2, `two runners, the long files beside the rest:\n${stdout}`);
    for (const call of calls) assert.ok(call.includes(pattern.join(' ')), call);
    assert.match(stdout, / test\/archive\.test\.ts /, "every test file, not Node's default glob");
  }
  // A file given after the option: that file alone, in one runner.
  const one = await run(['--test-name-pattern', 'resume', 'test/archive.test.ts']);
  assert.deepEqual(
    one.stdout.split('\n').filter((l) => l.startsWith('node ')),
    [
      'node --test --test-concurrency=4 --import ./test/setup.ts --test-name-pattern resume test/archive.test.ts',
    ],
  );
});

test('npm run bench -- --help says how to run the suites, lists them, and runs none', async () => {
  const r = await sh('npm', ['run', '-s', 'bench', '--', '--help']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^usage: npm run bench /);
  assert.match(r.stdout, /npm run bench -- decode/);
  assert.match(r.stdout, /^Suites: align, decode, .*workers$/m);
  assert.doesNotMatch(r.stdout, /^# \S+\.bench\.ts/m, 'no suite ran');
  for (const [args, message] of [
    [['--bogus'], 'bench: unknown option --bogus'],
    [['no-such-suite'], 'bench: no suite matches no-such-suite'],
  ] as const) {
    const bad = await sh('npm', ['run', '-s', 'bench', '--', ...args]);
    assert.equal(bad.code, 2, args.join(' '));
    assert.equal(bad.stderr, `${message}\nRun "npm run bench -- --help" for the options and suites.\n`);
    assert.doesNotMatch(bad.stdout, /\.bench\.ts/, 'no suite ran');
  }
});

test('npm run docs writes no colour codes into a pipe', async () => {
  // An unknown option: TypeDoc's error line, coloured when it believes it writes to a terminal.
  const r = await sh('npm', ['run', '-s', 'docs', '--', '--noSuchTypedocOption']);
  assert.notEqual(r.code, 0);
  const output = r.stdout + r.stderr;
  assert.match(output, /\[error\] Unknown option: --noSuchTypedocOption/);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the escape is what must be absent
  assert.doesNotMatch(output, /\u001b\[/);
});

test('the tarball npm pack writes into the checkout is ignored by git', async (t) => {
  const tarball = `${pkg.name.replace(/^@/, '').replace('/', '-')}-${pkg.version}.tgz`;
  const r = await sh('git', ['check-ignore', '--no-index', '--quiet', tarball]);
  if (r.code === 128) {
    t.skip(`not a git checkout (git check-ignore: ${r.stderr.trim()})`);
    return;
  }
  assert.equal(r.code, 0, `${tarball} is not ignored by git`);
});
