// Archive runs under faults: a manifest that cannot be written, a consumer that leaves early,
// inputs given twice, a sink that fails while inputs decode, an abort during the walk.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, test } from 'node:test';
import {
  type ArchiveEvent,
  type ArchiveSummary,
  openArchiveStore,
  transcribeArchive,
  transcribeEach,
  walkArchive,
} from '../src/archive/index.ts';
import { readManifest } from './helpers/cli.ts';
import { ffmpegChildren, sineFile } from './helpers/ffmpeg.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';
import { within } from './helpers/timers.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-archive-faults-'));
after(() => rm(root, { recursive: true, force: true }));
const archive = join(root, 'archive');
await mkdir(archive, { recursive: true });
const wav = await speechWav('A short recording for the faults.', { pauseMs: 200 });
for (let i = 0; i < 6; i++) await writeFile(join(archive, `clip${i}.wav`), wav);

const { client, emulator } = await startService({ latency: { perRequestMs: 200 } });

test('a manifest that cannot be written mid-run: the run fails with the error, it does not hang', async () => {
  const out = join(root, 'out-manifest');
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  const run = (async () => {
    for await (const event of transcribeArchive([archive], {
      client,
      out,
      mode: 'fast',
      language: 'en',
      formats: ['txt'],
      concurrency: 3,
      probe: false,
    })) {
      events.push(event);
      if (event.type === 'started' && events.filter((e) => e.type === 'started').length === 1) {
        // The manifest's place taken by a directory: every append fails (EISDIR), as on a
        // full disk or a revoked permission.
        await rm(join(out, 'manifest.ndjson'), { force: true });
        await mkdir(join(out, 'manifest.ndjson'));
      }
    }
  })();
  await assert.rejects(within(run, 10_000, 'the run'), (err: NodeJS.ErrnoException) => {
    assert.equal(err.code, 'EISDIR', String(err));
    return true;
  });
  // The inputs in flight were cancelled before the run ended, not left running behind it.
  const fast = client.admissionStats().find((w) => w.workload === 'fast')!;
  assert.equal(fast.running + fast.queued, 0, `still in flight: ${JSON.stringify(fast)}`);
});

test('an input named twice (overlapping roots, a file inside a directory given): transcribed once', async () => {
  const out = join(root, 'out-twice');
  const before = emulator.stats().requests['fast.http'] ?? 0;
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  for await (const event of transcribeArchive(
    [join(archive, 'clip0.wav'), archive, `${archive}/./clip1.wav`, archive],
    { client, out, mode: 'fast', language: 'en', formats: ['txt'], probe: false },
  ))
    events.push(event);
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.total, 6, 'each input counted once');
  assert.equal(summary.done, 6);
  assert.equal((emulator.stats().requests['fast.http'] ?? 0) - before, 6, 'each input transcribed once');
  const manifest = await readManifest(out);
  assert.equal(manifest.length, 6, manifest.map((e) => e.input).join('\n'));
  assert.equal(new Set(manifest.map((e) => resolve(e.input))).size, 6);
});

test('a sink that fails while inputs decode through ffmpeg: the pipeline settles after the children exited', async () => {
  const dir = join(root, 'mp3s');
  await mkdir(dir, { recursive: true });
  const mp3 = await sineFile({ seconds: 60, rate: 16000, codec: 'libmp3lame', format: 'mp3' });
  for (let i = 0; i < 3; i++) await writeFile(join(dir, `tone${i}.mp3`), mp3);
  const store = await openArchiveStore({
    out: join(root, 'out-mp3s'),
    mode: 'live',
    language: 'en',
    speakers: false,
  });
  const failing = new Writable({
    objectMode: true,
    write(event: ArchiveEvent, _encoding, callback) {
      // Audio flows out of this input's ffmpeg: it is running now.
      callback(event.type === 'progress' ? new Error('the sink broke') : null);
    },
  });
  await assert.rejects(
    within(
      pipeline(walkArchive([dir]), transcribeEach({ client, store, concurrency: 3 }), failing),
      20_000,
      'the run',
    ),
    /the sink broke/,
  );
  assert.deepEqual(ffmpegChildren(process.pid), [], 'ffmpeg still running after the pipeline settled');
});

test('aborted during the walk: the summary counts every input found as not attempted', async () => {
  const controller = new AbortController();
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  for await (const event of transcribeArchive([archive], {
    client,
    out: join(root, 'out-walk-aborted'),
    mode: 'fast',
    formats: ['txt'],
    signal: controller.signal,
  })) {
    events.push(event);
    // The walk goes on listing the directory after the first input it yields.
    if (event.type === 'queued') controller.abort();
  }
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.type, 'summary');
  assert.equal(summary.stopped?.code, 'ERR_INTERRUPTED');
  assert.ok(summary.total >= 1 && summary.total < 6, `${summary.total} found`);
  assert.equal(
    summary.done + summary.failed + summary.skipped + summary.alreadyDone + summary.notAttempted,
    summary.total,
  );
  const stopped = events.find((e) => e.type === 'stopped');
  assert.equal(stopped?.type === 'stopped' && stopped.notAttempted, summary.total);
});

test('aborted mid-run: inputs the walk did not take are left for the resumed run too, and the counts add up', async () => {
  const dir = join(root, 'with-hidden');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'a.wav'), wav);
  await writeFile(join(dir, 'b.wav'), wav);
  await writeFile(join(dir, '.hidden.wav'), wav);
  const controller = new AbortController();
  let summary: ArchiveSummary | undefined;
  for await (const event of transcribeArchive([dir], {
    client,
    out: join(root, 'out-with-hidden'),
    mode: 'fast',
    formats: ['txt'],
    concurrency: 1,
    probe: false,
    signal: controller.signal,
  })) {
    if (event.type === 'started') controller.abort();
    if (event.type === 'summary') summary = event;
  }
  assert.equal(summary?.total, 3);
  assert.equal(
    summary.done + summary.failed + summary.skipped + summary.alreadyDone + summary.notAttempted,
    3,
    JSON.stringify(summary),
  );
});
