// hlsOutput() with real files and a real relay: a programme's MPEG-TS (made by ffmpeg) and its
// captions in, a presentation on disk out (bounded by its window, every file whole, an earlier
// run's files replaced); served under /hls/ with the right content types, CORS, no caching of
// playlists and no way out of the directory; destroyed, it lets go of everything.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, test } from 'node:test';
import { captionRelay } from '../src/sinks/caption-relay.ts';
import { hlsMount, hlsOutput } from '../src/sinks/hls-output.ts';
import { ffmpeg, transportStreamOf } from './helpers/ffmpeg.ts';
import { parsePlaylist } from './helpers/hls.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-hls-out-'));
after(() => rm(root, { recursive: true, force: true }));

/** `seconds` of MPEG-TS: a test picture with a keyframe every 0.5 s, and a tone. */
const programme = (seconds: number, video = true) =>
  transportStreamOf({
    seconds,
    video,
    fps: 20,
    args: [
      ...(video ? ['-c:v', 'libx264', '-preset', 'ultrafast', '-g', '10', '-pix_fmt', 'yuv420p'] : []),
      '-c:a',
      'aac',
    ],
  });

const words = (text: string, start: number) =>
  text.split(' ').map((word, i) => ({ word, start_time: start + i * 0.3, end_time: start + i * 0.3 + 0.2 }));

/** A raw request (no client-side path normalisation), its status, headers and body. */
function get(url: string, path: string, method = 'GET') {
  const { hostname, port } = new URL(url);
  return new Promise<{
    status: number;
    headers: Record<string, string | string[] | undefined>;
    body: string;
  }>((resolve, reject) => {
    const req = request({ hostname, port, path, method }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('a programme and its captions become a presentation: bounded by its window, ended, files whole', async () => {
  const dir = join(root, 'run');
  await mkdir(dir);
  // An earlier run's playlists and segment must go; the user's own file must stay.
  await writeFile(join(dir, 'master.m3u8'), '#EXTM3U\n#EXT-X-ENDLIST\n');
  await writeFile(join(dir, '0a1b2c3d-7.ts'), 'old');
  await writeFile(join(dir, 'notes.txt'), 'mine');
  const hls = await hlsOutput({ dir, delaySec: 0.2, targetDurationSec: 0.5, windowSegments: 2 });
  assert.deepEqual((await readdir(dir)).sort(), ['notes.txt']);
  const ts = await programme(4);
  const utterances = [
    { type: 'utterance', id: 'a', index: 0, text: '', words: words('Good evening.', 0.2) },
    { type: 'utterance', id: 'a', index: 1, text: '', words: words('The news at nine.', 1.5) },
    { type: 'utterance', id: 'a', index: 2, text: '', words: words('That is all.', 3.2) },
  ];
  const seen = new Set<string>();
  // Watch the directory while it runs: never more than the window keeps, never a file half made.
  let most = 0;
  const watching = (async () => {
    while (!hls.writableFinished && !hls.destroyed) {
      const names = await readdir(dir);
      most = Math.max(most, names.filter((n) => n.endsWith('.ts')).length);
      for (const name of names.filter((n) => n.endsWith('.m3u8'))) {
        const text = await readFile(join(dir, name), 'utf8').catch(() => '#EXTM3U\n');
        assert.ok(text.startsWith('#EXTM3U\n') && text.endsWith('\n'), `${name} whole: ${text}`);
        for (const s of parsePlaylist(text).segments) seen.add(s.uri);
      }
      await new Promise((r) => setTimeout(r, 30));
    }
  })();
  await Promise.all([
    pipeline(Readable.from([ts.subarray(0, 100_000), ts.subarray(100_000)]), hls.media),
    pipeline(Readable.from(utterances), hls),
  ]);
  await watching;
  const media = parsePlaylist(await readFile(join(dir, 'media.m3u8'), 'utf8'));
  const subtitles = parsePlaylist(await readFile(join(dir, 'subtitles.m3u8'), 'utf8'));
  assert.equal(media.endList, true);
  assert.equal(subtitles.endList, true);
  assert.equal(media.segments.length, 2, 'the window');
  assert.equal(hls.stats().segments, 8, '4 s in 0.5 s segments');
  assert.equal(hls.stats().video, true);
  assert.equal(hls.stats().withoutKeyframe, 0, 'a keyframe every 0.5 s: every segment starts at one');
  // The master playlist names the codecs (H.264 and AAC-LC) and claims no independent segments.
  const master = await readFile(join(dir, 'master.m3u8'), 'utf8');
  assert.match(
    parsePlaylist(master).playlists![0]!.attributes.CODECS as string,
    /^avc1\.[0-9a-f]{6},mp4a\.40\.2$/,
  );
  assert.ok(!master.includes('#EXT-X-INDEPENDENT-SEGMENTS'));
  // The window slid while it ran (the last ones go out together, when both sides ended).
  assert.ok(seen.size > 4, `${seen.size} segments were listed on the way`);
  // Listed (2), a window behind (2), held by the delay line (4 at most: then the input waits),
  // and the one being written.
  assert.ok(most <= 9, `${most} segments at once`);
  const left = (await readdir(dir)).sort();
  assert.equal(left.filter((n) => n.endsWith('.ts')).length, 4);
  assert.ok(!left.some((n) => n.endsWith('.tmp')), 'no temporary file left');
  assert.ok(left.includes('notes.txt'));
  assert.ok(!left.includes('0a1b2c3d-7.ts'));
  // Every caption in a WebVTT segment (those still on disk hold the last ones).
  const vtt = (
    await Promise.all(left.filter((n) => n.endsWith('.vtt')).map((n) => readFile(join(dir, n), 'utf8')))
  ).join('');
  assert.match(vtt, /That is all\./);
});

test('keyframes further apart than the target: segments cut between them are counted, every one within the target', async () => {
  const dir = join(root, 'sparse');
  await mkdir(dir);
  const hls = await hlsOutput({ dir, delaySec: 0, targetDurationSec: 0.5, windowSegments: 20 });
  // A keyframe every 2 s (40 frames at 20 fps): a segment may not wait that long.
  const ts = await transportStreamOf({
    seconds: 4,
    fps: 20,
    args: [
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-g',
      '40',
      '-sc_threshold',
      '0',
      '-pix_fmt',
      'yuv420p',
      '-c:a',
      'aac',
    ],
  });
  await Promise.all([pipeline(Readable.from([ts]), hls.media), pipeline(Readable.from([]), hls)]);
  const { segments, withoutKeyframe } = hls.stats();
  const media = parsePlaylist(await readFile(join(dir, 'media.m3u8'), 'utf8'));
  assert.equal(media.segments.length, segments);
  // Keyframes at 0 and 2 s start two segments; every other segment starts between them.
  assert.equal(withoutKeyframe, segments - 2, `${withoutKeyframe} of ${segments}`);
  assert.ok(withoutKeyframe > 0);
  assert.equal(media.targetDuration, 1);
  for (const seg of media.segments)
    assert.ok(Math.round(seg.duration) <= 1, `a segment of ${seg.duration} s`);
});

test('served under /hls/: content types, CORS, playlists never cached, nothing outside the directory', async () => {
  const dir = join(root, 'served');
  await mkdir(dir);
  const files: Record<string, string> = {
    'master.m3u8': 'application/vnd.apple.mpegurl',
    'a1-0.ts': 'video/mp2t',
    'a1-0.vtt': 'text/vtt; charset=utf-8',
    'init.mp4': 'video/mp4',
    'a1-0.m4s': 'video/iso.segment',
    'a1-0.aac': 'audio/aac',
  };
  for (const name of Object.keys(files)) await writeFile(join(dir, name), `body of ${name}`);
  await writeFile(join(dir, '.media.m3u8.x.tmp'), 'half');
  await writeFile(join(dir, 'secret.txt'), 'no');
  await writeFile(join(root, 'outside.m3u8'), 'outside');
  const relay = await captionRelay({ cors: 'https://player.example', mounts: [hlsMount(dir)] });
  try {
    for (const [name, type] of Object.entries(files)) {
      const res = await get(relay.url, `/hls/${name}`);
      assert.equal(res.status, 200, name);
      assert.equal(res.headers['content-type'], type);
      assert.equal(res.body, `body of ${name}`);
      assert.equal(res.headers['access-control-allow-origin'], 'https://player.example');
      assert.match(
        res.headers['cache-control'] as string,
        name.endsWith('.m3u8') ? /no-store/ : /max-age/,
        `${name} cached as it should`,
      );
    }
    const head = await get(relay.url, '/hls/a1-0.ts', 'HEAD');
    assert.equal(head.status, 200);
    assert.equal(head.headers['content-length'], String('body of a1-0.ts'.length));
    assert.equal(head.body, '');
    for (const path of [
      '/hls/../outside.m3u8',
      '/hls/%2e%2e/outside.m3u8',
      '/hls/..%2foutside.m3u8',
      '/hls/x%2f..%2f..%2foutside.m3u8',
      '/hls/%2Fetc%2Fpasswd.m3u8',
      '/hls/.media.m3u8.x.tmp',
      '/hls/secret.txt',
      '/hls/missing.ts',
      '/hls/',
    ])
      assert.equal((await get(relay.url, path)).status, 404, path);
    assert.equal((await get(relay.url, '/hls/%E0%A4%A.ts')).status, 400);
    assert.equal((await get(relay.url, '/hls/a1-0.ts', 'DELETE')).status, 405);
    // A preflight from the player's origin.
    const preflight = await get(relay.url, '/hls/master.m3u8', 'OPTIONS');
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers['access-control-allow-origin'], 'https://player.example');
  } finally {
    await relay.close();
  }
});

test('destroyed mid-programme: its file closed, no end written; media without audio is refused', async () => {
  const dir = join(root, 'cut');
  const hls = await hlsOutput({ dir, delaySec: 0.2, targetDurationSec: 0.5 });
  const ts = await programme(2);
  hls.media.write(ts.subarray(0, 60_000));
  await new Promise((r) => setTimeout(r, 50));
  hls.destroy();
  await new Promise((r) => hls.media.once('close', r));
  assert.equal(hls.media.destroyed, true, 'the media side goes with it');
  const playlist = await readFile(join(dir, 'media.m3u8'), 'utf8').catch(() => '');
  assert.doesNotMatch(playlist, /ENDLIST/);

  const silent = await hlsOutput({ dir: join(root, 'silent'), delaySec: 0 });
  const captionsFailed = new Promise<Error>((resolve) => silent.once('error', resolve));
  const video = await ffmpeg([
    '-f',
    'lavfi',
    '-i',
    'testsrc2=size=160x120:rate=20',
    '-t',
    '1',
    '-c:v',
    'libx264',
    '-preset',
    'ultrafast',
    '-f',
    'mpegts',
    'pipe:1',
  ]);
  await assert.rejects(pipeline(Readable.from([video]), silent.media), { code: 'ERR_HLS_NO_AUDIO' });
  assert.equal(((await captionsFailed) as { code?: string }).code, 'ERR_HLS_NO_AUDIO', 'both sides fail');
  await assert.rejects(hlsOutput({ dir: '' }), { code: 'ERR_INVALID_ARGUMENT' });
  await assert.rejects(hlsOutput({ dir, delaySec: -1 }), { code: 'ERR_INVALID_ARGUMENT' });
});
