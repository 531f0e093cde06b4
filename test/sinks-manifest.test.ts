// The run manifest: read back line by line, a torn last line costs only itself, superseded
// lines are compacted away (whole, however the writes are cut), resume decisions compare settings
// and outputs.

import assert from 'node:assert/strict';
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { Manifest, type ManifestEntry, type ManifestSettings } from '../src/sinks/manifest.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-manifest-'));
after(() => rm(root, { recursive: true, force: true }));

const settings: ManifestSettings = { mode: 'live', language: 'auto', speakers: false };
const file = (input: string) => ({ path: input, size: 10, mtimeMs: 1000 });
const done = (input: string, outputs = [`${input}.txt`]): Omit<ManifestEntry, 'at'> => ({
  input,
  size: 10,
  mtimeMs: 1000,
  status: 'done',
  settings,
  outputs,
});

test('a torn last line costs only itself: the next entry is a line of its own', async () => {
  const path = join(root, 'torn.ndjson');
  const a = JSON.stringify({ ...done('a'), at: 'x' });
  await writeFile(path, `${a}\n{"input":"b","size":10,"mti`);
  const first = await Manifest.open(path);
  assert.ok(first.isDone(file('a'), { settings, outputs: ['a.txt'] }));
  assert.equal(first.get('b'), undefined);
  await first.record(done('c'));
  const again = await Manifest.open(path);
  assert.ok(again.isDone(file('c'), { settings, outputs: ['c.txt'] }), 'the entry after the torn line');
  assert.ok(again.isDone(file('a'), { settings, outputs: ['a.txt'] }));
});

test('a manifest opened by a relative path records where it was opened, after the process changed directory', async () => {
  const base = await mkdtemp(join(root, 'relative-'));
  const elsewhere = await mkdtemp(join(root, 'elsewhere-'));
  const cwd = process.cwd();
  let manifest: Manifest;
  process.chdir(base);
  try {
    manifest = await Manifest.open(join('out', 'manifest.ndjson'));
  } finally {
    process.chdir(cwd);
  }
  assert.equal(manifest.path, join(base, 'out', 'manifest.ndjson'));
  // Entries come long after the open (a cluster run's follow): the directory is another by then.
  process.chdir(elsewhere);
  try {
    await manifest.record(done('a'));
  } finally {
    process.chdir(cwd);
  }
  const again = await Manifest.open(join(base, 'out', 'manifest.ndjson'));
  assert.ok(again.isDone(file('a'), { settings, outputs: ['a.txt'] }));
});

test('a manifest whose lines are mostly superseded is compacted to the latest entry per input', async () => {
  const path = join(root, 'compact.ndjson');
  const lines: string[] = [];
  for (let run = 0; run < 300; run++)
    for (const input of ['a', 'b', 'c', 'd', 'e'])
      lines.push(JSON.stringify({ ...done(input, [`${input}.${run}.txt`]), at: String(run) }));
  await writeFile(path, `${lines.join('\n')}\n`);
  const manifest = await Manifest.open(path);
  const text = await readFile(path, 'utf8');
  assert.equal(text.trim().split('\n').length, 5);
  assert.deepEqual(manifest.get('c')!.outputs, ['c.299.txt'], 'the latest entry is kept');
  const reopened = await Manifest.open(path);
  assert.deepEqual(
    reopened.entries().map((e) => e.input),
    ['a', 'b', 'c', 'd', 'e'],
  );
});

test('a few superseded lines are left as they are', async () => {
  const path = join(root, 'small.ndjson');
  const text = ['a', 'a', 'a'].map((i, n) => JSON.stringify({ ...done(i), at: String(n) })).join('\n');
  await writeFile(path, `${text}\n`);
  await Manifest.open(path);
  assert.equal(await readFile(path, 'utf8'), `${text}\n`);
});

test('isDone: the same input, settings and outputs; pendingJob: a job to wait for again', async () => {
  const manifest = await Manifest.open(join(root, 'decide.ndjson'));
  await manifest.record(done('a', ['a.vtt', 'a.json']));
  const wanted = { settings, outputs: ['a.vtt'] };
  assert.ok(manifest.isDone(file('a'), wanted));
  assert.ok(!manifest.isDone({ ...file('a'), size: 11 }, wanted), 'changed input');
  assert.ok(!manifest.isDone(file('a'), { settings, outputs: ['a.srt'] }), 'an output not written');
  assert.ok(!manifest.isDone(file('a'), { settings: { ...settings, speakers: true }, outputs: ['a.vtt'] }));
  assert.ok(!manifest.isDone(file('a'), { settings: { ...settings, language: 'en' }, outputs: ['a.vtt'] }));

  const batch = { ...settings, mode: 'batch' };
  const id = '3b241101-e2bb-4255-8caf-4136c566a962';
  const base = { input: 'b', size: 10, mtimeMs: 1000, settings: batch };
  await manifest.record({ ...base, status: 'submitted', jobId: id });
  assert.equal(manifest.pendingJob(file('b'), batch), id);
  assert.equal(manifest.pendingJob(file('b'), settings), undefined, 'other settings');
  assert.equal(manifest.pendingJob({ ...file('b'), mtimeMs: 2 }, batch), undefined, 'changed input');
  await manifest.record({
    ...base,
    status: 'failed',
    jobId: id,
    error: { code: 'ERR_WAIT_TIMEOUT', message: '' },
  });
  assert.equal(manifest.pendingJob(file('b'), batch), id, 'a wait that gave up');
  await manifest.record({
    ...base,
    status: 'failed',
    jobId: id,
    error: { code: 'ERR_JOB_NOT_DONE', message: '' },
  });
  assert.equal(manifest.pendingJob(file('b'), batch), undefined, 'a job that failed is not waited for again');
});

test('a service recorded with the settings: done and pending jobs are of that service only; none recorded matches any', async () => {
  const manifest = await Manifest.open(join(root, 'service.ndjson'));
  const here = { ...settings, service: 'https://speech.example/v1' };
  const there = { ...settings, service: 'emulator:generated' };
  await manifest.record({ ...done('a', ['a.vtt']), settings: here });
  assert.ok(manifest.isDone(file('a'), { settings: here, outputs: ['a.vtt'] }));
  assert.ok(!manifest.isDone(file('a'), { settings: there, outputs: ['a.vtt'] }), 'another service');
  assert.ok(manifest.isDone(file('a'), { settings, outputs: ['a.vtt'] }), 'a run that names no service');
  // A batch job submitted to one service is not waited for on another (it has no such job).
  const batch = { ...here, mode: 'batch' };
  const id = '3b241101-e2bb-4255-8caf-4136c566a962';
  await manifest.record({
    input: 'b',
    size: 10,
    mtimeMs: 1000,
    settings: batch,
    status: 'submitted',
    jobId: id,
  });
  assert.equal(manifest.pendingJob(file('b'), batch), id);
  assert.equal(manifest.pendingJob(file('b'), { ...batch, service: 'emulator:generated' }), undefined);
  // An entry of an earlier version, without a service, matches any.
  await manifest.record({ ...done('c', ['c.vtt']), settings });
  assert.ok(manifest.isDone(file('c'), { settings: there, outputs: ['c.vtt'] }));
});

test('compaction where writes take only part of what they are given (a disk filling up): nothing is cut', async (t) => {
  const path = join(root, 'short-writes.ndjson');
  const lines: string[] = [];
  for (let run = 0; run < 3; run++)
    for (let i = 0; i < 600; i++) lines.push(JSON.stringify({ ...done(`input-${i}`), at: String(run) }));
  await writeFile(path, `${lines.join('\n')}\n`);
  // Every write of the file handles takes at most 4 KiB, as write(2) may.
  const probe = await open(join(root, 'probe'), 'w');
  const FileHandle = Object.getPrototypeOf(probe) as { write: (...args: unknown[]) => Promise<unknown> };
  await probe.close();
  const write = FileHandle.write;
  t.mock.method(
    FileHandle,
    'write',
    function (this: unknown, data: unknown, offset?: number, length?: number) {
      if (!Buffer.isBuffer(data) && typeof data !== 'string') return write.call(this, data, offset, length);
      const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data);
      const at = offset ?? 0;
      return write.call(this, bytes, at, Math.min(length ?? bytes.length - at, 4096));
    },
  );
  await Manifest.open(path);
  t.mock.restoreAll();
  const kept = (await readFile(path, 'utf8')).trim().split('\n');
  assert.equal(kept.length, 600);
  for (const line of kept) JSON.parse(line);
  assert.equal((await Manifest.open(path)).entries().length, 600);
});
