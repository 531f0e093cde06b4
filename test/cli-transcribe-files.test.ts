// `speechpipe transcribe` and odd things on disk (issue 13, item 10): temporary files a killed
// run left, names with control characters or near the 255-byte limit, FIFOs and hidden files,
// symlinks that lead outside the inputs (and loops when they are followed).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { readManifest, runCli } from './helpers/cli.ts';
import { speechWav } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-files-'));
after(() => rm(root, { recursive: true, force: true }));
const wav = await speechWav('A short recording.', { pauseMs: 300 });
const FAST_TXT = ['--format', 'txt', '--mode', 'fast'];

const manifest = readManifest;

test('--resume removes the temporary files a killed run left (ours only)', async () => {
  const dir = await mkdtemp(join(root, 'resume-'));
  await writeFile(join(dir, 'a.wav'), wav);
  const out = join(dir, 'out');
  await mkdir(join(out, 'sub'), { recursive: true });
  const ours = [join(out, 'a.txt.4242.deadbeef.tmp'), join(out, 'sub', 'b.vtt.17.0123abcd.tmp')];
  for (const f of ours) await writeFile(f, 'half a file');
  await writeFile(join(out, 'notes.tmp'), 'the user’s');
  const run = await runCli(['transcribe', join(dir, 'a.wav'), '--out', out, ...FAST_TXT, '--resume']);
  assert.equal(run.code, 0, run.stderr);
  for (const f of ours) assert.ok(!existsSync(f), `${f} left`);
  assert.ok(existsSync(join(out, 'notes.tmp')), 'a file that is not ours was removed');
});

test('names with control characters, terminal escapes or near 255 bytes are transcribed and printed escaped', async () => {
  const dir = await mkdtemp(join(root, 'names-'));
  const odd = 'red\u001b[31m\u0007bell\ttab.wav';
  const long = `${'é'.repeat(120)}x.wav`; // 246 bytes: the result and temporary names would pass 255
  await writeFile(join(dir, odd), wav);
  await writeFile(join(dir, long), wav);
  const out = join(dir, 'out');
  const run = await runCli(['transcribe', dir, '--out', out, ...FAST_TXT]);
  assert.equal(run.code, 0, run.stderr);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: a raw control character is what it looks for
  const raw = /[\u0000-\u0008\u000b-\u001f]/;
  assert.doesNotMatch(run.stderr, raw, 'a raw control character reached the terminal');
  assert.match(run.stderr, /\\x1b\[31m\\x07bell\\x09tab/);
  const entries = await manifest(out);
  assert.equal(entries.filter((e) => e.status === 'done').length, 2);
  for (const e of entries) for (const o of e.outputs ?? []) assert.ok(existsSync(o), o);
  const names = await readdir(out);
  assert.ok(names.every((n) => Buffer.byteLength(n) <= 255));
});

test('a FIFO and hidden files are skipped with their reason in the manifest, and the walk does not block', async () => {
  const dir = await mkdtemp(join(root, 'special-'));
  await writeFile(join(dir, 'a.wav'), wav);
  execFileSync('mkfifo', [join(dir, 'pipe.wav')]);
  await writeFile(join(dir, '.hidden.wav'), wav);
  await mkdir(join(dir, '.cache'));
  const out = join(dir, 'out');
  const run = await runCli(['transcribe', dir, '--out', out, ...FAST_TXT]);
  assert.equal(run.code, 0, run.stderr);
  const byInput = new Map((await manifest(out)).map((e) => [e.input, e]));
  assert.equal(byInput.get(join(dir, 'a.wav'))?.status, 'done');
  assert.deepEqual(
    [join(dir, 'pipe.wav'), join(dir, '.hidden.wav'), join(dir, '.cache')].map((p) => [
      byInput.get(p)?.status,
      byInput.get(p)?.error?.code,
    ]),
    [
      ['skipped', 'ERR_NOT_REGULAR'],
      ['skipped', 'ERR_HIDDEN'],
      ['skipped', 'ERR_HIDDEN'],
    ],
  );
  assert.match(run.stdout, /^1 done, 0 failed, 3 skipped/);
});

test('a symlink leading outside the inputs is skipped unless --follow-symlinks; a loop is walked once', async () => {
  const dir = await mkdtemp(join(root, 'links-'));
  const outside = await mkdtemp(join(root, 'outside-'));
  await writeFile(join(outside, 'elsewhere.wav'), wav);
  const inputs = join(dir, 'inputs');
  await mkdir(inputs);
  await writeFile(join(inputs, 'here.wav'), wav);
  await symlink(join(outside, 'elsewhere.wav'), join(inputs, 'away.wav'));
  await symlink(join(inputs, 'here.wav'), join(inputs, 'near.wav'));
  await symlink(inputs, join(inputs, 'loop'));
  const out = join(dir, 'out');
  const plain = await runCli(['transcribe', inputs, '--out', out, ...FAST_TXT]);
  assert.equal(plain.code, 0, plain.stderr);
  const entries = new Map((await manifest(out)).map((e) => [e.input, e]));
  assert.equal(entries.get(join(inputs, 'away.wav'))?.error?.code, 'ERR_SYMLINK_OUTSIDE');
  assert.equal(entries.get(join(inputs, 'near.wav'))?.status, 'done', 'a symlink inside the inputs is taken');
  assert.equal(entries.get(join(inputs, 'loop'))?.error?.code, 'ERR_SYMLINK_DIR');

  const followed = join(dir, 'out-follow');
  const run = await runCli(['transcribe', inputs, '--out', followed, ...FAST_TXT, '--follow-symlinks']);
  assert.equal(run.code, 0, run.stderr);
  const all = await manifest(followed);
  assert.equal(all.find((e) => e.input === join(inputs, 'away.wav'))?.status, 'done');
  // The loop leads back to the inputs, walked already: nothing is found twice.
  assert.equal(all.filter((e) => e.status === 'done').length, 3);
});
