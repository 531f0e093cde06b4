// `speechpipe caption` as a user runs it: a recording played as a broadcast, captions to a viewer
// over Server-Sent Events and to a WebVTT file; interrupted, it stops ffmpeg and exits 130.

import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, test } from 'node:test';
import { startEmulator } from '../src/emulator/index.ts';
import { assertBadUsage, CLI_CWD, cliEnv, runCli } from './helpers/cli.ts';
import { alive, ffmpegChildren, sineFile } from './helpers/ffmpeg.ts';
import { speechWav } from './helpers/speech.ts';
import { readEvents } from './helpers/sse.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-caption-'));
after(() => rm(root, { recursive: true, force: true }));

function start(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): { child: ChildProcess; url: Promise<string>; stderr: () => string } {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'caption', ...args], {
    cwd: CLI_CWD,
    env: { ...cliEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const lines = createInterface({ input: child.stdout! });
  const url = new Promise<string>((resolve, reject) => {
    lines.once('line', (line) => resolve((JSON.parse(line) as { url: string }).url));
    child.once('exit', () => reject(new Error(`exited before serving: ${stderr}`)));
  });
  url.catch(() => {});
  return { child, url, stderr: () => stderr };
}

test('a recording played as a broadcast: a viewer sees cues and the end; the file gets them too', async () => {
  const wav = join(root, 'news.wav');
  await writeFile(
    wav,
    await speechWav('Good evening and welcome. Here is the news at nine. That is all for tonight.', {
      pauseMs: 600,
    }),
  );
  const out = join(root, 'news.vtt');
  const run = start([wav, '--realtime', '--port', '0', '--out', out, '--speakers']);
  const exited = once(run.child, 'exit');
  const events = await readEvents(`${await run.url}/events`, (e) => e.some((x) => x.event === 'end'));
  const [code] = await exited;
  assert.equal(code, 0, run.stderr());
  const cues = events
    .filter((e) => e.event === 'cue')
    .map((e) => e.data as { index: number; lines: string[]; speaker: string });
  assert.ok(
    cues.every((c) => c.lines.join(' ').length > 0 && c.speaker.startsWith('SPEAKER_')),
    'cues with text and speakers',
  );
  assert.equal(events.at(-1)!.event, 'end');
  const vtt = await readFile(out, 'utf8');
  assert.match(vtt, /^WEBVTT\n\n\d{2}:\d{2}:\d{2}\.\d{3} --> /);
  const total = vtt.match(/ --> /g)!.length;
  assert.ok(total >= 2, `${total} cues`);
  // However late the viewer connected, it saw every cue from then on, to the last.
  assert.ok(cues.length >= 1);
  assert.equal(cues.at(-1)!.index, total, 'the viewer saw the last cue the file has');
  for (let i = 1; i < cues.length; i++) assert.equal(cues[i]!.index, cues[i - 1]!.index + 1);
});

test('SIGINT stops an endless input: exit 130, its ffmpeg is gone', async () => {
  const run = start(['sine=frequency=300:sample_rate=16000', '--input-format', 'lavfi', '--port', '0']);
  await run.url;
  let ffmpegs: number[] = [];
  while (ffmpegs.length === 0) {
    ffmpegs = ffmpegChildren(run.child.pid!);
    await new Promise((r) => setTimeout(r, 20));
  }
  const exited = once(run.child, 'exit');
  run.child.kill('SIGINT');
  const [code] = await exited;
  assert.equal(code, 130, run.stderr());
  assert.match(run.stderr(), /interrupted/);
  assert.deepEqual(ffmpegs.filter(alive), [], 'ffmpeg was stopped before the command exited');
});

test('--hls, interrupted: the presentation ends (#EXT-X-ENDLIST), both ffmpegs are gone, exit 130', async () => {
  const dir = join(root, 'interrupted-hls');
  const run = start([
    'sine=frequency=300:sample_rate=16000',
    '--input-format',
    'lavfi',
    '--hls',
    dir,
    '--delay',
    '0.5',
    '--port',
    '0',
  ]);
  const master = `${new URL(await run.url).origin}/hls/master.m3u8`;
  while ((await fetch(master)).status !== 200) await new Promise((r) => setTimeout(r, 50));
  // The reader of the programme and the decoder of its audio for the captions.
  const ffmpegs = ffmpegChildren(run.child.pid!);
  assert.equal(ffmpegs.length, 2);
  const exited = once(run.child, 'exit');
  run.child.kill('SIGINT');
  const [code] = await exited;
  assert.equal(code, 130, run.stderr());
  assert.match(run.stderr(), /audio encoded to AAC/);
  assert.deepEqual(ffmpegs.filter(alive), [], 'ffmpeg was stopped before the command exited');
  const playlist = await readFile(join(dir, 'media.m3u8'), 'utf8');
  assert.match(playlist, /#EXT-X-ENDLIST\n$/);
});

test('SIGINT while speech is heard: the captions of what was read still reach the file and the viewers (no end), exit 130', async () => {
  // A tone is one utterance that never pauses: only the end of the input commits its words.
  const out = join(root, 'interrupted.vtt');
  const run = start([
    'sine=frequency=300:sample_rate=16000',
    '--input-format',
    'lavfi',
    '--realtime',
    '--port',
    '0',
    '--out',
    out,
  ]);
  const exited = once(run.child, 'exit');
  let signalled = false;
  const events = await readEvents(`${await run.url}/events`, (e) => {
    // Interrupted once the service has heard speech it has not committed yet.
    if (!signalled && e.some((x) => x.event === 'partial')) {
      signalled = true;
      run.child.kill('SIGINT');
    }
    return false; // to the end of the stream
  });
  const [code] = await exited;
  const cues = events.filter((e) => e.event === 'cue');
  assert.equal(cues.length, 1, 'the viewer got the cue of the speech heard before the signal');
  assert.ok(!events.some((e) => e.event === 'end'), 'no end: overlays reconnect to the next relay');
  const vtt = await readFile(out, 'utf8');
  assert.match(vtt, /^WEBVTT\n\n00:00:00\.\d{3} --> /);
  assert.equal(vtt.match(/ --> /g)?.length, 1);
  assert.equal(code, 130, run.stderr());
  assert.match(run.stderr(), /interrupted: 1 cues, all written to/);
});

test('an input that fails mid-speech: the captions of what it gave still reach the file, then exit 1', async (t) => {
  // A stream URL that sends a WAV header and two seconds of tone (one utterance that never
  // pauses), then resets the connection: only the end of the input commits its words.
  const wav = await sineFile({ seconds: 2, rate: 16000, codec: 'pcm_s16le', frequency: 300 });
  const server = createServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: audio/wav\r\n\r\n');
      socket.write(wav, () => setTimeout(() => socket.resetAndDestroy(), 200));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => server.close());
  const out = join(root, 'failed-input.vtt');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/live.wav`;
  const run = await runCli(['caption', url, '--port', '0', '--out', out]);
  const vtt = await readFile(out, 'utf8');
  assert.equal(vtt.match(/ --> /g)?.length, 1, `the cue of the tone: ${vtt}`);
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stderr, /the input failed \(ERR_FFMPEG_FAILED: ffmpeg could not read its input/);
  assert.doesNotMatch(run.stderr, /the input ended/);
});

test('a session that fails is a warning on stderr (not a silent gap), and the captions go on', async () => {
  const emulator = await startEmulator();
  try {
    const wav = join(root, 'restart.wav');
    await writeFile(wav, await speechWav('Good evening and welcome. Here is the news.', { pauseMs: 600 }));
    emulator.faults.add({
      operation: 'stt.http',
      nth: 3,
      action: { type: 'status', status: 503, code: 'SERVER_UNAVAILABLE', stage: 'afterEffect' },
    });
    const run = await runCli(['caption', wav, '--port', '0', '--transport', 'http'], {
      API_URL: emulator.url,
      API_KEY: emulator.apiKey,
    });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(emulator.stats().faultsApplied.status, 1);
    assert.match(run.stderr, /warning: ASR session failed \(SERVER_UNAVAILABLE: .*503.*\); restarting/);
    assert.match(run.stderr, /the input ended: [1-9]\d* cues/);
    assert.ok(!run.stderr.includes(emulator.apiKey));
  } finally {
    await emulator.close();
  }
});

test('a key the service refuses is bad environment: exit 2, the key not shown', async () => {
  const emulator = await startEmulator();
  try {
    const key = 'not-the-key-0123456789';
    for (const transport of ['socketio', 'http']) {
      const input = ['sine=frequency=300:sample_rate=16000:duration=2', '--input-format', 'lavfi'];
      const run = await runCli(['caption', ...input, '--port', '0', '--transport', transport], {
        API_URL: emulator.url,
        API_KEY: key,
      });
      assert.equal(run.code, 2, run.stderr);
      assert.match(run.stderr, /AUTH_UNAUTHORIZED/);
      assert.ok(!run.stderr.includes(key) && !run.stdout.includes(key));
    }
  } finally {
    await emulator.close();
  }
});

test('--cors ORIGIN: pages of that origin may read the cues and the events; --language ar: the page says so', async () => {
  const origin = 'https://player.example';
  const run = start([
    'sine=frequency=300:sample_rate=16000',
    '--input-format',
    'lavfi',
    '--port',
    '0',
    '--cors',
    origin,
    '--language',
    'ar',
  ]);
  const exited = once(run.child, 'exit');
  try {
    const url = await run.url;
    for (const path of ['/cues.json', '/captions.vtt', '/events']) {
      const res = await fetch(`${url}${path}`, { headers: { origin } });
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get('access-control-allow-origin'), origin, path);
      await res.body?.cancel();
    }
    assert.match(await (await fetch(`${url}/`)).text(), /<html lang="ar">/);
  } finally {
    run.child.kill('SIGINT');
    await exited;
  }
});

test('bad usage exits 2 with the error and where the help is', async () => {
  for (const args of [
    [],
    ['a', 'b'],
    ['x.wav', '--out', 'x.txt'],
    ['x.wav', '--port', 'nope'],
    ['x.wav', '--cors', 'player.example'],
    ['x.wav', '--host', ''],
    ['x.wav', '--delay', '3'],
    ['x.wav', '--hls', 'out', '--delay', '-1'],
    ['x.wav', '--hls', 'out', '--delay', 'soon'],
    ['x.wav', '--hls', ''],
  ]) {
    const run = start(args);
    const [code] = await once(run.child, 'exit');
    assert.equal(code, 2, args.join(' '));
    assertBadUsage(run.stderr(), 'caption', args.join(' '));
  }
});

test('raw PCM on standard input needs its encoding, --sample-rate and --channels (bad usage otherwise)', async () => {
  for (const [args, message] of [
    [['-', '--input-format', 's16le'], /--sample-rate/],
    [['-', '--input-format', 's16le', '--sample-rate', '8000'], /--channels/],
    [
      ['-', '--input-format', 'pulse', '--sample-rate', '8000', '--channels', '1'],
      /s16le, f32le, alaw, mulaw/,
    ],
    [['in.wav', '--sample-rate', '8000'], /standard input/],
  ] as const) {
    const run = await runCli(['caption', ...args]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, message);
  }
});

test('an input file that is not there, or a port in use: bad usage (exit 2), before anything is served', async () => {
  for (const [input, message] of [
    [join(root, 'nope.wav'), /no such file: .*nope\.wav/],
    [root, /is a directory/],
  ] as const) {
    const run = await runCli(['caption', input, '--port', '0']);
    assert.equal(run.code, 2, run.stderr);
    assertBadUsage(run.stderr, 'caption', input);
    assert.match(run.stderr, message);
    assert.equal(run.stdout, '', 'no URL printed: nothing was served');
  }
  const wav = join(root, 'taken.wav');
  await writeFile(wav, await speechWav('Hello there.'));
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address() as AddressInfo;
    // An earlier run's presentation in the --hls directory: nothing is done, so it stays.
    const hls = join(root, 'hls-kept');
    await mkdir(hls, { recursive: true });
    await writeFile(join(hls, 'master.m3u8'), '#EXTM3U\n');
    const run = await runCli(['caption', wav, '--port', String(port), '--hls', hls]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port} \\(.*EADDRINUSE`));
    assert.equal(run.stdout, '');
    assert.equal(await readFile(join(hls, 'master.m3u8'), 'utf8'), '#EXTM3U\n');
  } finally {
    server.close();
  }
});
