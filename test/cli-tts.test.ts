// `speechpipe tts` as a user runs it: text in, a WAV file out, against the built-in emulator.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { lstat, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { splitForTts } from '../src/cli/tts-command.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { parseWavHeader } from '../src/index.ts';
import { assertBadUsage, runCli } from './helpers/cli.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-tts-'));
after(() => rm(root, { recursive: true, force: true }));

const cli = (args: string[], env?: NodeJS.ProcessEnv) => runCli(['tts', ...args], env);

test('splitForTts: pieces within the limit in code points, cut at sentence ends, nothing lost', () => {
  const text = 'First sentence here. Second one! A third, longer sentence that goes on? Done.';
  const pieces = splitForTts(text, 40);
  assert.deepEqual(pieces, [
    'First sentence here. Second one!',
    'A third, longer sentence that goes on?',
    'Done.',
  ]);
  // A sentence over the limit is cut at spaces; a word over the limit inside the word.
  const long = splitForTts(`${'word '.repeat(30)}${'x'.repeat(25)}`, 20);
  assert.ok(long.every((p) => [...p].length <= 20));
  assert.equal(long.join(' ').replace(/ /g, ''), `${'word'.repeat(30)}${'x'.repeat(25)}`);
  // Code points, not UTF-16 units: an astral digit counts once.
  const astral = '𝟙𝟚𝟛𝟜𝟝 𝟞𝟟𝟠𝟡𝟘';
  assert.deepEqual(splitForTts(astral, 5), ['𝟙𝟚𝟛𝟜𝟝', '𝟞𝟟𝟠𝟡𝟘']);
  // Punctuation alone is not sent (the service refuses text with no letter or number).
  assert.deepEqual(splitForTts('Hello. ... !!!', 6), ['Hello.']);
});

test('text to a WAV over Socket.IO (24 kHz) and HTTP (16 kHz), long text in several requests', async () => {
  for (const [transport, rate] of [
    ['socketio', 24_000],
    ['http', 16_000],
  ] as const) {
    const out = join(root, `hello-${transport}.wav`);
    const text = 'Good evening. This text is long enough to be spoken in three pieces, one after another.';
    const run = await cli([text, '--out', out, '--transport', transport, '--max-chars', '40']);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /spoke piece 3 of 3/);
    const wav = await readFile(out);
    const header = parseWavHeader(wav)!;
    assert.equal(header.sampleRate, rate);
    assert.equal(header.channels, 1);
    const seconds = (wav.length - header.dataOffset) / 2 / rate;
    assert.ok(seconds > 2, `${seconds} s`);
    assert.ok(!existsSync(`${out}.partial`));
  }
});

test('a piece refused after others were spoken: exit 1, neither the file nor its partial left', async () => {
  const emulator = await startEmulator();
  try {
    // The second request is refused (not retryable) after the first one's audio was written.
    emulator.faults.add({
      operation: 'tts.socket',
      nth: 2,
      action: { type: 'status', status: 400, code: 'TTS_INPUT_NOT_ALLOWED' },
    });
    const dir = await mkdtemp(join(root, 'refused-'));
    const out = join(dir, 'speech.wav');
    const text = 'The first piece is fine. The second piece is refused. The third is cancelled.';
    const run = await cli([text, '--out', out, '--max-chars', '30'], {
      API_URL: emulator.url,
      API_KEY: emulator.apiKey,
    });
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /spoke piece 1 of 3/);
    assert.match(run.stderr, /TTS_INPUT_NOT_ALLOWED/);
    assert.deepEqual(await readdir(dir), [], 'nothing left behind');
    // Pieces are spoken several at once: the third may have started; it is not retried.
    assert.ok(emulator.stats().requests['tts.socket'] <= 3);
  } finally {
    await emulator.close();
  }
});

test('a piece whose audio breaks off is spoken again: exit 0, the whole text once in the file', async () => {
  const emulator = await startEmulator();
  try {
    const dir = await mkdtemp(join(root, 'cut-'));
    const text = 'The first piece is fine. The second piece is cut short. The third is fine.';
    const env = { API_URL: emulator.url, API_KEY: emulator.apiKey };
    const whole = join(dir, 'whole.wav');
    assert.equal(
      (await cli([text, '--out', whole, '--transport', 'http', '--max-chars', '30'], env)).code,
      0,
    );
    const requests = emulator.stats().requests['tts.http'];
    emulator.faults.add({
      operation: 'tts.http',
      nth: 2,
      action: { type: 'truncateTts', afterBytes: 3000 },
    });
    const out = join(dir, 'speech.wav');
    const run = await cli([text, '--out', out, '--transport', 'http', '--max-chars', '30'], env);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /spoke piece 3 of 3/);
    assert.equal(emulator.stats().requests['tts.http'], 2 * requests + 1, 'one piece spoken twice');
    assert.deepEqual(await readFile(out), await readFile(whole), 'the same audio as a run without the cut');
    assert.deepEqual((await readdir(dir)).sort(), ['speech.wav', 'whole.wav']);
  } finally {
    await emulator.close();
  }
});

test('a file that cannot be written: a typed error and exit 1, no crash, nothing left behind', async () => {
  const dir = await mkdtemp(join(root, 'nodir-'));
  const out = join(dir, 'missing', 'speech.wav');
  const run = await cli(['Hello there. This goes nowhere.', '--out', out]);
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stderr, /speechpipe tts: ENOENT/);
  assert.doesNotMatch(run.stderr, /Unhandled|at .*\.ts:\d+/);
  assert.deepEqual(await readdir(dir), []);
});

test('--text-file, --list-voices, a refused voice and bad usage', async () => {
  const file = join(root, 'text.txt');
  await writeFile(file, 'Read from a file.\n');
  const fromFile = await cli(['--text-file', file, '--out', join(root, 'file.wav')]);
  assert.equal(fromFile.code, 0, fromFile.stderr);

  const voices = await cli(['--list-voices']);
  assert.equal(voices.code, 0, voices.stderr);
  const listed = voices.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { id: string });
  assert.equal(listed.length, 7);
  const withVoice = await cli(['Hello there.', '--voice', listed[0]!.id, '--out', join(root, 'voice.wav')]);
  assert.equal(withVoice.code, 0, withVoice.stderr);

  const out = join(root, 'unknown-voice.wav');
  const refused = await cli([
    'Hello there.',
    '--voice',
    '00000000-0000-4000-8000-000000000001',
    '--out',
    out,
  ]);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /TTS_VOICE_NOT_FOUND/);
  assert.ok(!existsSync(out) && !existsSync(`${out}.partial`), 'no file left behind');

  for (const args of [
    [],
    ['Hello'],
    ['...', '--out', out],
    ['Hi', '--out', out, '--transport', 'ftp'],
    ['--text-file', join(root, 'no-such-text.txt'), '--out', out],
    ['--text-file', root, '--out', out],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, args.join(' '));
    assertBadUsage(run.stderr, 'tts', args.join(' '));
  }
});

test('pieces longer than the account takes: the refusal says which --max-chars to run with', async () => {
  const emulator = await startEmulator({
    keys: [{ key: 'test-key-hobby-0123', account: 'hobby', tier: 'free' }],
    limits: { ttsInputCharacters: { free: 40 } },
  });
  try {
    const out = join(root, 'too-long.wav');
    const text = 'This sentence is longer than forty characters, and so is this one, as you can hear.';
    const env = { API_URL: emulator.url, API_KEY: 'test-key-hobby-0123' };
    const run = await cli([text, '--out', out], env);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /CHARACTER_COUNT_EXCEEDED/);
    assert.match(run.stderr, /run again with --max-chars 40\b/);
    assert.ok(!existsSync(out));
    // As it says: every piece within the account's limit.
    const again = await cli([text, '--out', out, '--max-chars', '40'], env);
    assert.equal(again.code, 0, again.stderr);
    assert.ok(existsSync(out));
  } finally {
    await emulator.close();
  }
});

test('a key the service refuses is bad environment: exit 2, the key not shown, no file', async () => {
  const emulator = await startEmulator();
  try {
    const key = 'not-the-key-0123456789';
    const out = join(root, 'refused-key.wav');
    for (const args of [
      ['Hello there.', '--out', out],
      ['Hello there.', '--out', out, '--transport', 'http'],
      ['--list-voices'],
    ]) {
      const run = await cli(args, { API_URL: emulator.url, API_KEY: key });
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, /AUTH_UNAUTHORIZED/);
      assert.ok(!run.stderr.includes(key) && !run.stdout.includes(key));
      assert.ok(!existsSync(out));
    }
  } finally {
    await emulator.close();
  }
});

test('--out that is a FIFO, a device or a symlink is refused (exit 2, left as it was); a regular file is replaced', async () => {
  const dir = await mkdtemp(join(root, 'special-'));
  const fifo = join(dir, 'pipe.wav');
  execFileSync('mkfifo', [fifo]);
  const target = join(dir, 'target.wav');
  await writeFile(target, 'keep me');
  const link = join(dir, 'link.wav');
  await symlink(target, link);
  for (const [out, kind] of [
    [fifo, /a FIFO/],
    ['/dev/null', /a device/],
    [link, /a symbolic link/],
  ] as const) {
    const run = await cli(['Hello there.', '--out', out]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, kind);
  }
  assert.ok((await lstat(fifo)).isFIFO());
  assert.ok((await lstat(link)).isSymbolicLink());
  assert.equal(await readFile(target, 'utf8'), 'keep me');
  assert.deepEqual((await readdir(dir)).sort(), ['link.wav', 'pipe.wav', 'target.wav']);
  const replaced = await cli(['Hello there.', '--out', target]);
  assert.equal(replaced.code, 0, replaced.stderr);
  assert.equal((await readFile(target)).subarray(0, 4).toString(), 'RIFF');
});

test('the format follows --out: Ogg Opus, MP3 and FLAC through ffmpeg; any other extension is bad usage', async () => {
  const dir = await mkdtemp(join(root, 'formats-'));
  const magic: [string, (b: Buffer) => boolean][] = [
    ['speech.ogg', (b) => b.subarray(0, 4).toString() === 'OggS' && b.includes('OpusHead')],
    ['speech.opus', (b) => b.subarray(0, 4).toString() === 'OggS'],
    [
      'speech.mp3',
      (b) => b.subarray(0, 3).toString() === 'ID3' || (b[0] === 0xff && (b[1]! & 0xe0) === 0xe0),
    ],
    ['speech.flac', (b) => b.subarray(0, 4).toString() === 'fLaC'],
    ['speech.WAV', (b) => b.subarray(0, 4).toString() === 'RIFF'],
  ];
  for (const [name, check] of magic) {
    const run = await cli(['Hello there.', '--out', join(dir, name)]);
    assert.equal(run.code, 0, run.stderr);
    assert.ok(check(await readFile(join(dir, name))), `${name} is not in its format`);
  }
  const bad = await cli(['Hello there.', '--out', join(dir, 'speech.xyz')]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /\.wav, \.ogg, \.opus, \.mp3, \.flac/);
  assert.deepEqual((await readdir(dir)).sort(), magic.map(([n]) => n).sort(), 'no partial file left');
});

test('pieces are spoken several at once and written in order', async () => {
  const emulator = await startEmulator({ latency: { perRequestMs: 400 } });
  try {
    const dir = await mkdtemp(join(root, 'parallel-'));
    const out = join(dir, 'speech.wav');
    const text = 'One piece here. Two pieces here. Three pieces here. Four pieces here.';
    const run = await cli([text, '--out', out, '--max-chars', '20'], {
      API_URL: emulator.url,
      API_KEY: emulator.apiKey,
    });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(emulator.stats().requests['tts.socket'], 4);
    assert.ok(
      emulator.stats().maxConcurrent.tts >= 2,
      `at most ${emulator.stats().maxConcurrent.tts} at once`,
    );
    const order = [...run.stderr.matchAll(/spoke piece (\d) of 4/g)].map((m) => Number(m[1]));
    assert.deepEqual(order, [1, 2, 3, 4]);
  } finally {
    await emulator.close();
  }
});
