// `speechpipe transcribe` as a user runs it: a directory in, captions and JSON out, a manifest
// that records every input's result or reason, resume, exit codes. No API_URL: the built-in
// emulator answers.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import type { ManifestEntry } from '../src/sinks/manifest.ts';
import { runCli } from './helpers/cli.ts';
import { ffmpeg } from './helpers/ffmpeg.ts';
import { speechWav } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-cli-'));
after(() => rm(root, { recursive: true, force: true }));
const archive = join(root, 'archive');
await mkdir(join(archive, 'day1'), { recursive: true });
await writeFile(
  join(archive, 'day1', 'intro.wav'),
  await speechWav('Welcome to the archive. This is the first recording.', { pauseMs: 400 }),
);
await writeFile(join(archive, 'day1', 'notes.txt'), 'not audio, not picked up');
await writeFile(
  join(archive, 'interview.wav'),
  await speechWav('A short interview. Two sentences in all.', { pauseMs: 400 }),
);
await writeFile(join(archive, 'broken.mp3'), 'this is not an mp3 at all');

const cli = runCli;

async function manifest(out: string): Promise<ManifestEntry[]> {
  return (await readFile(join(out, 'manifest.ndjson'), 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as ManifestEntry);
}

test('a directory: every input ends with results or a recorded reason; exit 1 when any failed', async () => {
  const out = join(root, 'out-live');
  const run = await cli(['transcribe', archive, '--out', out, '--format', 'vtt,srt,txt,json', '--speakers']);
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stderr, /built-in emulator/);
  assert.match(run.stdout, /^2 done, 1 failed, 0 skipped/);
  const entries = await manifest(out);
  assert.equal(entries.length, 3);
  const broken = entries.find((e) => e.input.endsWith('broken.mp3'))!;
  assert.equal(broken.status, 'failed');
  assert.ok(broken.error!.code.startsWith('ERR_'), broken.error!.code);
  for (const done of entries.filter((e) => e.status === 'done')) {
    assert.equal(done.outputs!.length, 4);
    assert.ok(done.audioSeconds! > 1);
  }
  const vtt = await readFile(join(out, 'day1', 'intro.wav.vtt'), 'utf8');
  assert.match(vtt, /^WEBVTT\n\n\d{2}:\d{2}:\d{2}\.\d{3} --> \d{2}:\d{2}:\d{2}\.\d{3}\n<v [^>]+>\S/);
  const srt = await readFile(join(out, 'interview.wav.srt'), 'utf8');
  assert.match(srt, /^1\n\d{2}:\d{2}:\d{2},\d{3} --> \d{2}:\d{2}:\d{2},\d{3}\n/);
  const json = JSON.parse(await readFile(join(out, 'interview.wav.json'), 'utf8')) as {
    words: { speaker: string | null }[];
    transcript: string;
  };
  assert.ok(json.words.length > 0 && json.transcript.length > 0);
  assert.ok(
    json.words.every((w) => typeof w.speaker === 'string'),
    'speakers labelled',
  );
});

test('--resume skips what is done and unchanged, and tries the failures again', async () => {
  const out = join(root, 'out-resume');
  await cli(['transcribe', archive, '--out', out, '--format', 'txt']);
  const again = await cli(['transcribe', archive, '--out', out, '--format', 'txt', '--resume']);
  assert.equal(again.code, 1);
  assert.match(again.stdout, /^0 done, 1 failed, 2 skipped/);
  const entries = await manifest(out);
  assert.equal(entries.length, 4, 'the retried failure is recorded again');
});

for (const mode of ['batch', 'fast'] as const) {
  test(`--mode ${mode}`, async () => {
    const out = join(root, `out-${mode}`);
    const run = await cli([
      'transcribe',
      join(archive, 'interview.wav'),
      '--out',
      out,
      '--mode',
      mode,
      '--format',
      'json',
      ...(mode === 'batch' ? ['--speakers'] : []),
    ]);
    assert.equal(run.code, 0, run.stderr);
    const json = JSON.parse(await readFile(join(out, 'interview.wav.json'), 'utf8')) as {
      mode: string;
      words: unknown[];
    };
    assert.equal(json.mode, mode);
    assert.ok(json.words.length > 0);
  });
}

test('an input ffmpeg decodes only in part is done, with the skipped input recorded as a warning', async () => {
  const dir = join(root, 'damaged');
  await mkdir(dir, { recursive: true });
  const flac = await ffmpeg([
    '-f',
    'lavfi',
    '-i',
    'sine=frequency=440:sample_rate=16000:duration=4',
    '-c:a',
    'flac',
    '-f',
    'flac',
    'pipe:1',
  ]);
  await writeFile(join(dir, 'cut.flac'), flac.subarray(0, Math.floor(flac.length * 0.6) + 1));
  const out = join(root, 'out-damaged');
  const run = await cli(['transcribe', dir, '--out', out, '--format', 'txt']);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, /warning +cut\.flac: ERR_MEDIA_FORMAT/);
  const [entry] = await manifest(out);
  assert.equal(entry!.status, 'done');
  assert.equal(entry!.warnings![0]!.code, 'ERR_MEDIA_FORMAT');
});

test('bad usage exits 2 with the usage text', async () => {
  for (const args of [
    ['transcribe'],
    ['transcribe', archive],
    ['transcribe', archive, '--out', root, '--mode', 'nope'],
    ['nope'],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, args.join(' '));
    assert.match(run.stdout + run.stderr, /usage: speechpipe/);
  }
});
