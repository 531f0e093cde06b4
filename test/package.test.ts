// The published package: `npm run build` output is importable by name through the exports map.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { REQUIRED_NODE } from '../src/protocol/node-version.ts';
import { findOldNode } from './helpers/system-node.ts';

const root = new URL('..', import.meta.url);
const run = promisify(execFile);

test('the root export resolves to dist/ with types', async (t) => {
  if (!existsSync(new URL('dist/index.js', root))) {
    assert.fail('dist/ is missing: `npm test` builds it first; run `npm run build`');
  }
  assert.ok(existsSync(new URL('dist/index.d.ts', root)));
  const script = `import('speechpipe').then((m) => console.log(JSON.stringify({
    encodeFrame: typeof m.encodeFrame, demuxTts: typeof m.demuxTts, parseNdjson: typeof m.parseNdjson,
    errors: typeof m.SpeechServiceError })))`;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: root });
  assert.deepEqual(JSON.parse(stdout), {
    encodeFrame: 'function',
    demuxTts: 'function',
    parseNdjson: 'function',
    errors: 'function',
  });
  t.diagnostic('speechpipe resolves through package.json exports');
});

test('dist holds only the library', async () => {
  assert.ok(!existsSync(new URL('dist/test', root)));
  assert.ok(!existsSync(new URL('dist/bench', root)));
});

test('speechpipe/emulator resolves to dist/ and the built CLI runs', async () => {
  const script = `import('speechpipe/emulator').then(async (m) => {
    const e = await m.startEmulator(); console.log(JSON.stringify({ url: typeof e.url, key: typeof e.apiKey })); await e.close(); })`;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: root });
  assert.deepEqual(JSON.parse(stdout), { url: 'string', key: 'string' });
  const cli = await run(process.execPath, ['dist/cli/main.js', '--help'], { cwd: root });
  assert.match(cli.stdout, /usage: speechpipe <command>/);
  assert.match(cli.stdout, /transcribe/);
});

test('on a Node older than the library needs, importing either entry fails at once saying what it needs and found', async (t) => {
  const entries = ['dist/index.js', 'dist/emulator/index.js'];
  for (const entry of entries) {
    const built = new URL(entry, root);
    const source = new URL(entry.replace(/^dist/, 'src').replace(/\.js$/, '.ts'), root);
    if (!existsSync(built) || statSync(built).mtimeMs < statSync(source).mtimeMs)
      assert.fail(
        `${entry} is missing or older than its source: \`npm test\` builds it; run \`npm run build\``,
      );
  }
  const old = findOldNode();
  if (!old) {
    t.skip(
      `no Node older than ${REQUIRED_NODE} on this machine (looked at /usr/bin/node, /usr/local/bin/node, which -a node)`,
    );
    return;
  }
  t.diagnostic(`old Node: ${old.path} v${old.version}`);
  for (const name of ['speechpipe', 'speechpipe/emulator']) {
    // As a user's program imports it: by name, through the exports map.
    const script = `import(${JSON.stringify(name)}).then(
      () => console.log(JSON.stringify({ imported: true })),
      (e) => console.log(JSON.stringify({ name: e.name, code: e.code, message: e.message })))`;
    const { stdout }: { stdout: string } = await run(old.path, ['--input-type=module', '-e', script], {
      cwd: root,
      encoding: 'utf8',
    });
    assert.deepEqual(
      JSON.parse(stdout),
      {
        name: 'SpeechpipeError',
        code: 'ERR_NODE_VERSION',
        message: `speechpipe needs Node.js ${REQUIRED_NODE} or later; this is Node.js ${old.version} (${old.path})`,
      },
      name,
    );
  }
});
