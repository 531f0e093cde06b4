// `speechpipe transcribe` over an archive: video containers and media without an extension
// are found, --include/--exclude choose, --progress json lets programs follow the run, and a
// refused key stops the run at the first file with one message.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { readManifest, runCli } from './helpers/cli.ts';
import { ffmpeg } from './helpers/ffmpeg.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-cli-archive-'));
after(() => rm(root, { recursive: true, force: true }));
const archive = join(root, 'archive');
await mkdir(join(archive, 'video'), { recursive: true });
await mkdir(join(archive, 'drafts'), { recursive: true });
const speech = join(root, 'speech.wav');
await writeFile(speech, await speechWav('A recording kept in a video container.', { pauseMs: 300 }));
// Video containers with an audio track (and a tiny picture), and audio without an extension.
const lavfiVideo = ['-f', 'lavfi', '-i', 'color=c=black:s=64x64:d=3:r=5'];
await ffmpeg([
  '-y',
  ...lavfiVideo,
  '-i',
  speech,
  '-shortest',
  '-c:v',
  'mpeg4',
  '-c:a',
  'aac',
  join(archive, 'video', 'clip.mp4'),
]);
await ffmpeg([
  '-y',
  ...lavfiVideo,
  '-i',
  speech,
  '-shortest',
  '-c:v',
  'mpeg4',
  '-c:a',
  'aac',
  join(archive, 'video', 'clip.mkv'),
]);
await ffmpeg([
  '-y',
  ...lavfiVideo,
  '-i',
  speech,
  '-shortest',
  '-c:v',
  'mpeg2video',
  '-c:a',
  'mp2',
  '-f',
  'mpegts',
  join(archive, 'video', 'clip.ts'),
]);
await ffmpeg([
  '-y',
  ...lavfiVideo,
  '-i',
  speech,
  '-shortest',
  '-c:v',
  'mpeg4',
  '-c:a',
  'aac',
  '-f',
  'mov',
  join(archive, 'video', 'clip.mov'),
]);
await ffmpeg(['-y', '-i', speech, '-c:a', 'libmp3lame', '-f', 'mp3', join(archive, 'no-extension')]);
await writeFile(join(archive, 'README'), 'a text file without an extension: not media');
await writeFile(join(archive, 'drafts', 'draft.wav'), await speechWav('A draft.', {}));

test('video containers and media without an extension are transcribed; other files are not taken', async () => {
  const out = join(root, 'out-all');
  const run = await runCli(['transcribe', archive, '--out', out, '--mode', 'fast', '--format', 'txt']);
  assert.equal(run.code, 0, run.stderr);
  const done = (await readManifest(out))
    .filter((e) => e.status === 'done')
    .map((e) => e.input.slice(archive.length + 1));
  assert.deepEqual(done.sort(), [
    'drafts/draft.wav',
    'no-extension',
    'video/clip.mkv',
    'video/clip.mov',
    'video/clip.mp4',
    'video/clip.ts',
  ]);
});

test('--include and --exclude choose the inputs (globs relative to the directory given)', async () => {
  const out = join(root, 'out-globs');
  const run = await runCli([
    'transcribe',
    archive,
    '--out',
    out,
    '--mode',
    'fast',
    '--format',
    'txt',
    '--include',
    '**/*.{mp4,mkv,wav}',
    '--exclude',
    'drafts',
    '--exclude',
    '**/*.mkv',
  ]);
  assert.equal(run.code, 0, run.stderr);
  const inputs = (await readManifest(out)).map((e) => e.input.slice(archive.length + 1));
  assert.deepEqual(inputs, ['video/clip.mp4']);
});

test('--progress json: the run as NDJSON events on stderr, ending in the summary', async () => {
  const out = join(root, 'out-json');
  const run = await runCli([
    'transcribe',
    join(archive, 'video'),
    '--out',
    out,
    '--mode',
    'fast',
    '--format',
    'txt',
    '--progress',
    'json',
  ]);
  assert.equal(run.code, 0, run.stderr);
  const events = run.stderr
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { type: string; relative?: string; words?: number; total?: number });
  const types = new Set(events.map((e) => e.type));
  for (const type of ['queued', 'probed', 'started', 'done', 'summary']) assert.ok(types.has(type), type);
  const done = events.filter((e) => e.type === 'done');
  assert.equal(done.length, 4);
  assert.ok(done.every((e) => typeof e.relative === 'string' && (e.words ?? 0) > 0));
  assert.equal(events.at(-1)!.type, 'summary');
  assert.equal(events.at(-1)!.total, 4);
  assert.ok(!run.stderr.includes('"result"'), 'events carry counts, not whole results');
});

test('a refused key: the run stops at the first file with one message, exit 2, nothing recorded failed', async () => {
  const { emulator } = await startService();
  const out = join(root, 'out-401');
  const run = await runCli(
    ['transcribe', archive, '--out', out, '--mode', 'fast', '--format', 'txt', '--concurrency', '1'],
    {
      API_URL: emulator.url,
      API_KEY: 'a-key-the-service-does-not-know',
    },
  );
  assert.equal(run.code, 2, run.stderr);
  assert.equal(run.stderr.match(/AUTH_UNAUTHORIZED/g)?.length, 1, run.stderr);
  assert.match(run.stderr, /not attempted.*--resume/);
  assert.match(run.stdout, /0 done, 0 failed, 0 skipped, 6 not attempted/);
  // Nothing was recorded, so no manifest was written: the summary does not point to one.
  assert.ok(!existsSync(join(out, 'manifest.ndjson')));
  assert.match(run.stdout, /manifest: none written \(nothing recorded\)/);
  assert.ok(!run.stderr.includes('a-key-the-service-does-not-know'), 'the key is never printed');
});

test("--speakers --format svg draws each file's speaker timeline; svg without --speakers is bad usage", async () => {
  const out = join(root, 'out-svg');
  const run = await runCli([
    'transcribe',
    join(archive, 'drafts'),
    '--out',
    out,
    '--speakers',
    '--format',
    'svg,json',
  ]);
  assert.equal(run.code, 0, run.stderr);
  const svg = await readFile(join(out, 'draft.wav.svg'), 'utf8');
  const json = JSON.parse(await readFile(join(out, 'draft.wav.json'), 'utf8')) as {
    words: { word: string; speaker: string }[];
  };
  assert.match(svg, /^<svg /);
  for (const w of json.words) assert.ok(svg.includes(w.word), `${w.word} is in the picture`);
  for (const speaker of new Set(json.words.map((w) => w.speaker)))
    assert.ok(svg.includes(`>${speaker}</text>`));
  const bad = await runCli(['transcribe', archive, '--out', join(root, 'out-svg-bad'), '--format', 'svg']);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /needs --speakers/);
});
