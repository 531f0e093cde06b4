// The published package: `npm run build` output is importable by name through the exports map.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { promisify } from 'node:util';

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
