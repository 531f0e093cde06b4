// walkAudioFiles(): the order of a walk, and a directory with more subdirectories than a
// function call takes arguments.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { fromFile, walkAudioFiles } from '../src/sources/files.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-walk-'));
after(() => rm(root, { recursive: true, force: true }));

test('a directory’s files, then each subdirectory in name order, depth first', async () => {
  const dir = join(root, 'order');
  for (const sub of ['a/b', 'a/c', 'd']) await mkdir(join(dir, sub), { recursive: true });
  for (const file of ['a/x.wav', 'a/b/y.wav', 'a/c/z.wav', 'd/w.wav', 'top.wav']) {
    await writeFile(join(dir, file), 'RIFF');
  }
  const found: string[] = [];
  for await (const file of walkAudioFiles([dir])) found.push(file.relative);
  assert.deepEqual(found, [
    'top.wav',
    join('a', 'x.wav'),
    join('a', 'b', 'y.wav'),
    join('a', 'c', 'z.wav'),
    join('d', 'w.wav'),
  ]);
});

test('a directory of 16,000 subdirectories is walked, not a RangeError (spread arguments overflow the stack)', async () => {
  const dir = join(root, 'wide');
  await mkdir(dir);
  for (let i = 0; i < 16_000; i += 1000) {
    await Promise.all(Array.from({ length: 1000 }, (_, k) => mkdir(join(dir, String(i + k)))));
  }
  await writeFile(join(dir, '15999', 'last.wav'), 'RIFF');
  // A small stack (100 KiB) puts the limit near 10,000 arguments instead of 125,000.
  const files = fileURLToPath(new URL('../src/sources/files.ts', import.meta.url));
  const script = `import { walkAudioFiles } from ${JSON.stringify(files)};
    const found = [];
    for await (const f of walkAudioFiles([${JSON.stringify(dir)}])) found.push(f.relative);
    process.stdout.write(JSON.stringify(found));`;
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [
      '--stack-size=100',
      '--input-type=module',
      '-e',
      script,
    ]);
    assert.deepEqual(JSON.parse(stdout), [join('15999', 'last.wav')]);
  } finally {
    // Removed here rather than in `after`: 16,000 removals are the test's own time.
    await rm(dir, { recursive: true, force: true });
  }
});

test('fromFile: abort fails the stream with the signal’s own reason, not an AbortError wrapping it', async () => {
  const path = join(root, 'abort.wav');
  await writeFile(path, Buffer.alloc(64 * 1024));
  const reason = new Error('stopped by the caller');
  const aborted = new AbortController();
  aborted.abort(reason);
  await assert.rejects(fromFile(path, { signal: aborted.signal }).toArray(), (err) => err === reason);

  const later = new AbortController();
  const stream = fromFile(path, { signal: later.signal, highWaterMark: 1024 });
  const failed = assert.rejects(
    (async () => {
      for await (const _ of stream) later.abort(reason);
    })(),
    (err) => err === reason,
  );
  await failed;
  assert.ok(stream.destroyed);
});
