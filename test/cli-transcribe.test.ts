// `speechpipe transcribe` as a user runs it: a directory in, captions and JSON out, a manifest
// that records every input's result or reason, resume, exit codes. No API_URL: the built-in
// emulator answers.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { assertBadUsage, CLI_CWD, cliEnv, readManifest, runCli } from './helpers/cli.ts';
import { ffmpeg } from './helpers/ffmpeg.ts';
import { startService } from './helpers/service.ts';
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
/** Fast transcription to text: the quickest whole run, for tests about the run itself. */
const FAST_TXT = ['--format', 'txt', '--mode', 'fast'];

const manifest = readManifest;

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
  assert.match(again.stdout, /^0 done, 1 failed, 0 skipped, 2 already done;/);
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

test('the captions and the timeline keep to the recording: no cue ends after it, the axis runs to its end', async () => {
  const dir = join(root, 'lengths');
  await mkdir(dir, { recursive: true });
  // 0.3 s of sound (one word); and the same followed by 4 s of silence (no word there).
  const tone = 'sine=frequency=300:sample_rate=16000:duration=0.3';
  await ffmpeg(['-f', 'lavfi', '-i', tone, join(dir, 'short.wav')]);
  await ffmpeg(['-f', 'lavfi', '-i', tone, '-af', 'apad=pad_dur=4', join(dir, 'tail.wav')]);
  const out = join(root, 'out-lengths');
  const run = await cli(['transcribe', dir, '--out', out, '--format', 'vtt,srt,svg', '--speakers']);
  assert.equal(run.code, 0, run.stderr);
  const seconds = new Map((await manifest(out)).map((e) => [e.input.replace(/^.*\//, ''), e.audioSeconds!]));
  assert.equal(seconds.get('short.wav'), 0.3);
  for (const name of ['short.wav', 'tail.wav']) {
    const ends = [
      ...(await readFile(join(out, `${name}.vtt`), 'utf8')).matchAll(/--> 00:00:(\d\d\.\d{3})/g),
      ...(await readFile(join(out, `${name}.srt`), 'utf8')).matchAll(/--> 00:00:(\d\d,\d{3})/g),
    ].map((m) => Number(m[1]!.replace(',', '.')));
    assert.ok(ends.length >= 2, `${name}: cues in both files`);
    for (const end of ends) assert.ok(end <= seconds.get(name)!, `${name}: a cue ends at ${end} s`);
  }
  assert.match(await readFile(join(out, 'tail.wav.svg'), 'utf8'), /1 speaker · 0:04/);
});

test('bad usage exits 2 with the error and where the help is', async () => {
  for (const args of [
    ['transcribe'],
    ['transcribe', archive],
    ['transcribe', archive, '--out', root, '--mode', 'nope'],
    ['transcribe', archive, '--out', root, '--mode', 'fast', '--speakers'],
    ['transcribe', archive, '--out', root, '--mode', 'batch', '--job-timeout', '0'],
    ['transcribe', archive, join(root, 'no-such-dir'), '--out', join(root, 'never')],
    ['nope'],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, args.join(' '));
    assert.equal(run.stdout, '', args.join(' '));
    assertBadUsage(run.stderr, args[0] === 'nope' ? undefined : 'transcribe', args.join(' '));
  }
});

test('two inputs with the same relative name both get their results, under different names', async () => {
  const a = join(root, 'same-a');
  const b = join(root, 'same-b');
  await mkdir(a, { recursive: true });
  await mkdir(b, { recursive: true });
  const wav = await readFile(join(archive, 'interview.wav'));
  await writeFile(join(a, 'talk.wav'), wav);
  await writeFile(join(b, 'talk.wav'), wav);
  const out = join(root, 'out-same');
  const run = await cli(['transcribe', a, b, '--out', out, ...FAST_TXT]);
  assert.equal(run.code, 0, run.stderr);
  const entries = await manifest(out);
  assert.equal(entries.length, 2);
  const [first, second] = [
    entries.find((e) => e.input.startsWith(a))!,
    entries.find((e) => e.input.startsWith(b))!,
  ];
  assert.deepEqual(first.outputs, [join(out, 'talk.wav.txt')]);
  assert.match(second.outputs![0]!, /talk\.wav~[0-9a-f]{8}\.txt$/);
  for (const e of entries) assert.ok((await readFile(e.outputs![0]!, 'utf8')).length > 1);
  // The names are stable: a resumed run finds both done.
  const again = await cli(['transcribe', a, b, '--out', out, ...FAST_TXT, '--resume']);
  assert.match(again.stdout, /^0 done, 0 failed, 0 skipped, 2 already done;/);
});

test('a path the walk cannot read is recorded as failed, and the run goes on', async () => {
  const dir = join(root, 'links');
  await mkdir(dir, { recursive: true });
  await symlink(join(dir, 'gone.wav'), join(dir, 'a-broken.wav'));
  await writeFile(join(dir, 'b-good.wav'), await readFile(join(archive, 'interview.wav')));
  const out = join(root, 'out-links');
  const run = await cli(['transcribe', dir, '--out', out, ...FAST_TXT]);
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stdout, /^1 done, 1 failed, 0 skipped/);
  const entries = await manifest(out);
  const broken = entries.find((e) => e.input.endsWith('a-broken.wav'))!;
  assert.equal(broken.status, 'failed');
  assert.equal(broken.error!.code, 'ENOENT');
  assert.equal(entries.find((e) => e.input.endsWith('b-good.wav'))!.status, 'done');
});

test('--resume runs an input again when other settings or outputs are asked for, or an output is gone', async () => {
  const dir = join(root, 'resume-settings');
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'talk.wav'), await readFile(join(archive, 'interview.wav')));
  const out = join(root, 'out-resume-settings');
  const base = ['transcribe', dir, '--out', out, '--mode', 'fast'];
  assert.equal((await cli([...base, '--format', 'txt'])).code, 0);
  const skipped = /^0 done, 0 failed, 0 skipped, 1 already done;/;
  const redone = /^1 done, 0 failed, 0 skipped;/;
  assert.match((await cli([...base, '--format', 'txt', '--resume'])).stdout, skipped);
  assert.match((await cli([...base, '--format', 'txt,srt', '--resume'])).stdout, redone, 'a new format');
  assert.match((await cli([...base, '--format', 'srt', '--resume'])).stdout, skipped, 'srt was written');
  assert.match((await cli([...base, '--format', 'txt', '--language', 'en', '--resume'])).stdout, redone);
  await rm(join(out, 'talk.wav.txt'));
  assert.match(
    (await cli([...base, '--format', 'txt', '--language', 'en', '--resume'])).stdout,
    redone,
    'output deleted',
  );
});

test('batch: a job whose wait gave up is recorded, and --resume waits for that job instead of submitting again', async () => {
  const service = await startService({ jobTiming: { queuedMs: 0, processingMs: 1500 } });
  const env = { API_URL: service.emulator.url, API_KEY: service.emulator.apiKey };
  const out = join(root, 'out-batch-resume');
  const args = [
    'transcribe',
    join(archive, 'interview.wav'),
    '--out',
    out,
    '--mode',
    'batch',
    '--format',
    'txt',
  ];
  const first = await cli([...args, '--job-timeout', '0.2'], env);
  assert.equal(first.code, 1, first.stderr);
  const [submitted, failed] = await manifest(out);
  assert.equal(submitted!.status, 'submitted');
  assert.equal(failed!.status, 'failed');
  assert.equal(failed!.error!.code, 'ERR_WAIT_TIMEOUT');
  assert.equal(failed!.jobId, submitted!.jobId);
  const second = await cli([...args, '--resume'], env);
  assert.equal(second.code, 0, second.stderr);
  assert.equal(service.emulator.stats().jobsCreated, 1, 'the file was submitted once');
  const entries = await manifest(out);
  assert.equal(entries.at(-1)!.status, 'done');
  assert.equal(entries.at(-1)!.jobId, submitted!.jobId);
});

test('Ctrl-C during a directory run: exit 130, finished inputs recorded, the counts said, the rest left for --resume', async () => {
  const dir = join(root, 'many');
  await mkdir(dir, { recursive: true });
  const wav = await readFile(join(archive, 'interview.wav'));
  for (let i = 0; i < 40; i++) await writeFile(join(dir, `f${String(i).padStart(2, '0')}.wav`), wav);
  const out = join(root, 'out-many');
  const child = spawn(
    process.execPath,
    ['src/cli/main.ts', 'transcribe', dir, '--out', out, ...FAST_TXT, '--concurrency', '1'],
    { cwd: CLI_CWD, env: cliEnv() },
  );
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
    if (/^done /m.test(stderr) && !child.killed) child.kill('SIGINT');
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 130, stderr);
  const counts =
    /^interrupted: (\d+) done, 0 failed, 0 skipped, (\d+) left; run again with --resume to continue$/m.exec(
      stderr,
    );
  assert.ok(counts, stderr);
  const entries = await manifest(out);
  assert.ok(entries.length >= 1 && entries.length < 40, `${entries.length} entries`);
  assert.ok(
    entries.every((e) => e.status === 'done'),
    'nothing recorded as failed by the interruption',
  );
  assert.equal(Number(counts[1]), entries.length, 'the inputs done, as the manifest has them');
  assert.equal(Number(counts[2]), 40 - entries.length, 'the rest are left');
});

test('result names stay with their inputs when a colliding input turns unreadable, readable or gone', async () => {
  const a = join(root, 'flip-a');
  const b = join(root, 'flip-b');
  await mkdir(a, { recursive: true });
  await mkdir(b, { recursive: true });
  const wav = await readFile(join(archive, 'interview.wav'));
  await symlink(join(a, 'nowhere.wav'), join(a, 'talk.wav'));
  await writeFile(join(b, 'talk.wav'), wav);
  const out = join(root, 'out-flip');
  const run = (...extra: string[]) => cli(['transcribe', a, b, '--out', out, ...FAST_TXT, ...extra]);
  assert.match((await run()).stdout, /^1 done, 1 failed, 0 skipped/);
  const bName = (await manifest(out)).find((e) => e.input.startsWith(b))!.outputs![0]!;
  // a becomes readable: it gets a name of its own, b keeps its result and is not redone.
  await rm(join(a, 'talk.wav'));
  await writeFile(join(a, 'talk.wav'), wav);
  assert.match((await run('--resume')).stdout, /^1 done, 0 failed, 0 skipped, 1 already done;/);
  const entries = await manifest(out);
  const aName = entries.findLast((e) => e.input.startsWith(a))!.outputs![0]!;
  assert.notEqual(aName, bName);
  // a is gone: b still keeps its name.
  await rm(a, { recursive: true });
  await mkdir(a);
  assert.match((await run('--resume')).stdout, /^0 done, 0 failed, 0 skipped, 1 already done;/);
  assert.ok((await readFile(bName, 'utf8')).length > 1);
});

test('batch: an input unreadable for one run keeps its pending job for the next --resume', async () => {
  const service = await startService({ jobTiming: { queuedMs: 0, processingMs: 1500 } });
  const env = { API_URL: service.emulator.url, API_KEY: service.emulator.apiKey };
  const dir = join(root, 'batch-flaky');
  await mkdir(dir, { recursive: true });
  const input = join(dir, 'talk.wav');
  await writeFile(input, await readFile(join(archive, 'interview.wav')));
  // A whole-second mtime, so putting the file back can restore it exactly.
  const mtime = 1_700_000_000;
  await utimes(input, mtime, mtime);
  const out = join(root, 'out-batch-flaky');
  const args = ['transcribe', input, '--out', out, '--mode', 'batch', '--format', 'txt'];
  assert.equal((await cli([...args, '--job-timeout', '0.2'], env)).code, 1);
  const jobId = (await manifest(out))[0]!.jobId;
  assert.ok(jobId);
  // The file is away for one run (a directory given, the file gone from it).
  const saved = await readFile(input);
  await rm(input);
  await symlink(join(dir, 'elsewhere.wav'), input);
  assert.equal(
    (await cli(['transcribe', dir, '--out', out, '--mode', 'batch', '--format', 'txt', '--resume'], env))
      .code,
    1,
  );
  assert.equal((await manifest(out)).at(-1)!.jobId, jobId, 'the unreadable entry keeps the job');
  await rm(input);
  await writeFile(input, saved);
  await utimes(input, mtime, mtime);
  const last = await cli([...args, '--resume'], env);
  assert.equal(last.code, 0, last.stderr);
  assert.equal(service.emulator.stats().jobsCreated, 1, 'the file was submitted once');
});

test('a manifest that gave two inputs one name (before names were kept apart): the second is redone under its own', async () => {
  const c = join(root, 'legacy-c');
  const d = join(root, 'legacy-d');
  await mkdir(c, { recursive: true });
  await mkdir(d, { recursive: true });
  const wav = await readFile(join(archive, 'interview.wav'));
  await writeFile(join(c, 'talk.wav'), wav);
  await writeFile(join(d, 'talk.wav'), wav);
  const out = join(root, 'out-legacy');
  const run = (...extra: string[]) => cli(['transcribe', c, d, '--out', out, ...FAST_TXT, ...extra]);
  assert.equal((await run()).code, 0);
  // Rewrite the manifest as the old code left it: both entries naming talk.wav.txt.
  const shared = join(out, 'talk.wav.txt');
  // c's entry first (the run wrote them in the order they finished): c keeps the name.
  const legacy = (await manifest(out))
    .sort((x, y) => Number(x.input.startsWith(d)) - Number(y.input.startsWith(d)))
    .map((e) => JSON.stringify({ ...e, outputs: [shared] }));
  await writeFile(join(out, 'manifest.ndjson'), `${legacy.join('\n')}\n`);
  assert.match((await run('--resume')).stdout, /^1 done, 0 failed, 0 skipped, 1 already done;/);
  const redone = (await manifest(out)).at(-1)!;
  assert.ok(redone.input.startsWith(d));
  assert.match(redone.outputs![0]!, /talk\.wav~[0-9a-f]{8}\.txt$/);
});
