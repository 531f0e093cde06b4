// Resume across spellings of the same results directory: a done input is not redone because
// --out was given relative once and absolute the next time.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, test } from 'node:test';
import { type ArchiveSummary, transcribeArchive } from '../src/archive/index.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-archive-paths-'));
after(() => rm(root, { recursive: true, force: true }));
const archive = join(root, 'archive');
await mkdir(archive, { recursive: true });
await writeFile(
  join(archive, 'a.wav'),
  await speechWav('A short recording of one sentence.', { pauseMs: 300 }),
);
const { client } = await startService();

async function last<T>(iterable: AsyncIterable<T>): Promise<T> {
  let out: T | undefined;
  for await (const item of iterable) out = item;
  return out!;
}

test('resume skips what is done whether --out is given relative or absolute', async () => {
  const out = join(root, 'out');
  const settings = { client, mode: 'fast', language: 'en', formats: ['json'] } as const;
  const first = (await last(
    transcribeArchive([archive], { ...settings, out: relative(process.cwd(), out) }),
  )) as ArchiveSummary;
  assert.equal(first.done, 1);
  const again = (await last(
    transcribeArchive([archive], { ...settings, out, resume: true }),
  )) as ArchiveSummary;
  assert.equal(again.done, 0, 'done in the first run: not redone');
  assert.equal(again.alreadyDone, 1);
});
