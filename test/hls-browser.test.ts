// `speechpipe caption --hls` as a viewer sees it: a programme with video (ffmpeg's lavfi test
// picture and espeak-ng speech at known times) and one of audio alone (a WAV on standard input)
// are captioned into a live HLS presentation; hls.js plays it in a real headless Chromium from
// another origin (--cors); its subtitle text track must hold every caption's words, each at the
// time of its speech in the media; the video must still be video. ffprobe and m3u8-parser read
// the presentation the run left behind.

import assert from 'node:assert/strict';
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs';
import { mkdtemp, readFile as readFileAsync, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, type TestContext, test } from 'node:test';
import { promisify } from 'node:util';
import type { Browser, Page } from 'puppeteer-core';
import { browserSkip, keepScreenshot, launchBrowser } from './helpers/browser.ts';
import { CLI_CWD, cliEnv } from './helpers/cli.ts';
import { parsePlaylist } from './helpers/hls.ts';
import { speechWav } from './helpers/speech.ts';

const skip = browserSkip();
const run = promisify(execFile);
const DELAY_SEC = 3;
const root = await mkdtemp(join(tmpdir(), 'speechpipe-hls-'));
const HLS_JS = new URL('../node_modules/hls.js/dist/hls.min.js', import.meta.url);

// The player's site, on an origin of its own: a page with a <video> and hls.js.
const PLAYER = `<!doctype html><meta charset="utf-8"><title>player</title>
<video id="video" muted playsinline width="320" height="240"></video>
<script src="/hls.min.js"></script>`;
let site: Server;
let origin: string;
let browser: Browser | undefined;
before(async () => {
  site = createServer((req, res) => {
    if (req.url === '/hls.min.js')
      readFile(HLS_JS, (err, body) =>
        err ? res.writeHead(500).end() : res.writeHead(200, { 'content-type': 'text/javascript' }).end(body),
      );
    else res.writeHead(200, { 'content-type': 'text/html' }).end(PLAYER);
  });
  site.listen(0, '127.0.0.1');
  await once(site, 'listening');
  origin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
});
after(async () => {
  await browser?.close();
  site.closeAllConnections();
  await new Promise((resolve) => site.close(resolve));
  await rm(root, { recursive: true, force: true });
});

/** Speech at known times: each utterance's start and end in the programme, in seconds. */
interface Spoken {
  startSec: number;
  endSec: number;
}

/** Utterances as WAV files, and where they go in an 8 s programme. */
async function utterances(): Promise<{ files: string[]; spoken: Spoken[] }> {
  const texts = ['Good evening and welcome to the news.', 'The weather today is sunny and warm.'];
  const at = [1, 4.5];
  const files: string[] = [];
  const spoken: Spoken[] = [];
  for (const [i, text] of texts.entries()) {
    const wav = await speechWav(text);
    const file = join(root, `utterance${i}.wav`);
    await writeFile(file, wav);
    files.push(file);
    spoken.push({ startSec: at[i]!, endSec: at[i]! + (wav.length - 44) / 32_000 });
  }
  return { files, spoken };
}

/** Mix the utterances at their times over 8 s of silence; with a test picture when `video`. */
async function programme(name: string, video: boolean): Promise<{ path: string; spoken: Spoken[] }> {
  const { files, spoken } = await utterances();
  const path = join(root, name);
  const delays = spoken.map((s, i) => `[${i + (video ? 1 : 0)}]adelay=${s.startSec * 1000}:all=1[a${i}]`);
  await run('ffmpeg', [
    '-hide_banner',
    '-loglevel',
    'error',
    '-y',
    ...(video ? ['-f', 'lavfi', '-i', 'testsrc2=size=320x240:rate=25'] : []),
    ...files.flatMap((f) => ['-i', f]),
    '-filter_complex',
    `${delays.join(';')};${spoken.map((_, i) => `[a${i}]`).join('')}amix=inputs=${spoken.length}:normalize=0,apad,aresample=44100[a]`,
    ...(video ? ['-map', '0:v'] : []),
    '-map',
    '[a]',
    '-t',
    '8',
    ...(video
      ? ['-c:v', 'libx264', '-preset', 'ultrafast', '-g', '25', '-pix_fmt', 'yuv420p', '-c:a', 'aac']
      : []),
    path,
  ]);
  return { path, spoken };
}

/** `speechpipe caption` running, its HLS URL once it serves, its exit. */
function caption(
  args: string[],
  stdin?: Buffer,
): { child: ChildProcess; hls: Promise<string>; exited: Promise<unknown[]>; stderr: () => string } {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'caption', ...args], {
    cwd: CLI_CWD,
    env: cliEnv(),
    stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  if (stdin) child.stdin!.end(stdin);
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
  const exited = once(child, 'exit');
  const hls = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) =>
      resolve((JSON.parse(line) as { hls: string }).hls),
    );
    child.once('exit', () => reject(new Error(`exited before serving: ${stderr}`)));
  });
  hls.catch(() => {});
  return { child, hls, exited, stderr: () => stderr };
}

/** What the player saw. */
interface Played {
  initPTS: number;
  timescale: number;
  cues: { start: number; end: number; text: string }[];
  videoWidth: number;
  frames: number;
  errors: string[];
}

// In the page: hls.js plays the presentation from its start; the page records hls.js's time
// base (INIT_PTS_FOUND), fatal errors, and the end of playback. (Plain JavaScript: the
// project's types have no DOM.)
const PLAY = (master: string) => `(() => {
  window.__played = { errors: [], initPTS: undefined, timescale: undefined, ended: false };
  const video = document.getElementById('video');
  const hls = new Hls({ startPosition: 0 });
  hls.on(Hls.Events.INIT_PTS_FOUND, (_, d) => {
    if (window.__played.initPTS === undefined) {
      window.__played.initPTS = d.initPTS;
      window.__played.timescale = d.timescale;
    }
  });
  hls.on(Hls.Events.ERROR, (_, d) => { if (d.fatal) window.__played.errors.push(d.type + ': ' + d.details); });
  video.addEventListener('ended', () => { window.__played.ended = true; });
  hls.loadSource(${JSON.stringify(master)});
  hls.attachMedia(video);
  // Twice as fast where the presentation is ahead (an input faster than real time): a quicker test.
  video.playbackRate = 2;
  video.play().catch((e) => window.__played.errors.push('play: ' + e.message));
})()`;

const COLLECT = `(() => {
  const video = document.getElementById('video');
  const cues = [];
  for (const track of video.textTracks)
    for (const cue of track.cues ?? []) cues.push({ start: cue.startTime, end: cue.endTime, text: cue.text });
  return {
    ...window.__played,
    cues,
    videoWidth: video.videoWidth,
    frames: video.getVideoPlaybackQuality().totalVideoFrames,
  };
})()`;

/** Play `master` in Chromium to its end; what the player saw. */
async function play(t: TestContext, master: string): Promise<Played> {
  browser ??= await launchBrowser();
  let page: Page | undefined;
  try {
    page = await browser.newPage();
    await page.goto(`${origin}/`, { waitUntil: 'load' });
    // The presentation is there once its master playlist is.
    for (let i = 0; i < 300 && (await fetch(master)).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 100));
    await page.evaluate(PLAY(master));
    await page.waitForFunction('window.__played.ended || window.__played.errors.length > 0', {
      timeout: 60_000,
      polling: 200,
    });
    const played = (await page.evaluate(COLLECT)) as Played;
    assert.deepEqual(played.errors, [], 'hls.js played without a fatal error');
    return played;
  } catch (err) {
    t.diagnostic(`screenshot: ${await keepScreenshot(page, t.name)}`);
    throw err;
  } finally {
    await page?.close();
  }
}

/** The cues of a WebVTT file: start, end (s) and text. */
function vttCues(vtt: string): { start: number; end: number; text: string }[] {
  const sec = (t: string) => {
    const [h, m, s] = t.split(':');
    return Number(h) * 3600 + Number(m) * 60 + Number(s);
  };
  return [
    ...vtt.matchAll(/(\d\d:\d\d:\d\d\.\d{3}) --> (\d\d:\d\d:\d\d\.\d{3})[^\n]*\n((?:[^\n]+\n?)+)/g),
  ].map((m) => ({ start: sec(m[1]!), end: sec(m[2]!), text: m[3]!.trim() }));
}

const words = (text: string) =>
  text
    .replace(/<[^>]+>/g, ' ')
    .split(/\s+/)
    .filter(Boolean);

/**
 * The streams ffprobe finds in the presentation (ffmpeg's HLS demuxer skips a master playlist's
 * subtitle rendition, so its playlist is read by itself), and the first audio timestamp of the
 * first segment.
 */
async function probePresentation(dir: string): Promise<{ streams: string[]; audioStartPts: number }> {
  const streams: string[] = [];
  for (const playlist of ['master.m3u8', 'subtitles.m3u8']) {
    const { stdout } = await run('ffprobe', [
      '-v',
      'error',
      '-show_entries',
      'stream=codec_type,codec_name',
      '-of',
      'json',
      join(dir, playlist),
    ]);
    for (const s of (JSON.parse(stdout) as { streams: { codec_type: string; codec_name: string }[] }).streams)
      streams.push(`${s.codec_type}:${s.codec_name}`);
  }
  const first = parsePlaylist(await readFileAsync(join(dir, 'media.m3u8'), 'utf8')).segments[0]!.uri;
  const { stdout: packets } = await run('ffprobe', [
    '-v',
    'error',
    '-select_streams',
    'a:0',
    '-show_entries',
    'packet=pts',
    '-read_intervals',
    '%+#1',
    '-of',
    'json',
    join(dir, first),
  ]);
  return { streams, audioStartPts: (JSON.parse(packets) as { packets: { pts: number }[] }).packets[0]!.pts };
}

/**
 * Every caption's words in the player's text track, once each caption, and each cue at its
 * speech: mapped back to the media (hls.js's time base, the first audio timestamp ffprobe
 * reads), it starts within an utterance, the first cue of each within 0.5 s of the speech.
 */
async function checkCaptions(dir: string, outVtt: string, played: Played, spoken: Spoken[]): Promise<void> {
  const made = vttCues(await readFileAsync(outVtt, 'utf8'));
  assert.ok(made.length >= spoken.length, `${made.length} captions made`);
  const { audioStartPts } = await probePresentation(dir);
  const inMedia = played.cues.map((c) => ({
    ...c,
    mediaSec: (played.initPTS + c.start * played.timescale - audioStartPts) / played.timescale,
  }));
  for (const caption of made) {
    const shown = inMedia.find((c) => c.text.replace(/\n/g, ' ') === words(caption.text).join(' '));
    assert.ok(shown, `"${caption.text}" is in the player's text track: ${JSON.stringify(played.cues)}`);
    assert.ok(
      Math.abs(shown.mediaSec - caption.start) < 0.1,
      `"${caption.text}" at ${shown.mediaSec.toFixed(3)} s of the media, made for ${caption.start} s`,
    );
    const said = spoken.find((s) => shown.mediaSec >= s.startSec - 0.5 && shown.mediaSec <= s.endSec + 0.5);
    assert.ok(
      said,
      `"${caption.text}" (${shown.mediaSec.toFixed(2)} s) is shown while its utterance is spoken`,
    );
    assert.ok(shown.mediaSec - said.startSec <= DELAY_SEC, 'within --delay of the speech');
  }
  for (const s of spoken) {
    const first = inMedia.filter((c) => c.mediaSec >= s.startSec - 0.5 && c.mediaSec <= s.endSec + 0.5)[0];
    assert.ok(
      first && Math.abs(first.mediaSec - s.startSec) < 0.5,
      `a caption as the speech at ${s.startSec} s starts`,
    );
  }
  const allMade = made.flatMap((c) => words(c.text));
  const allShown = played.cues.flatMap((c) => words(c.text));
  for (const w of allMade) assert.ok(allShown.includes(w), `"${w}" shown`);
}

test('a programme with video: repackaged with its video, every caption in the player at its speech', {
  skip,
}, async (t) => {
  const { path, spoken } = await programme('news.mp4', true);
  const dir = join(root, 'video-hls');
  const out = join(root, 'video.vtt');
  const cli = caption([
    path,
    '--realtime',
    '--hls',
    dir,
    '--delay',
    String(DELAY_SEC),
    '--port',
    '0',
    '--cors',
    origin,
    '--out',
    out,
  ]);
  try {
    const played = await play(t, await cli.hls);
    // The presentation's end is served a while for players still playing it; a signal stops that.
    cli.child.kill('SIGTERM');
    const [code] = await cli.exited;
    assert.equal(code, 0, cli.stderr());
    assert.match(cli.stderr(), /HLS: video copied, audio copied/);
    // The video is the input's, decoded and shown.
    assert.equal(played.videoWidth, 320);
    assert.ok(played.frames > 25, `${played.frames} frames decoded`);
    const { streams } = await probePresentation(dir);
    assert.deepEqual(streams.sort(), ['audio:aac', 'subtitle:webvtt', 'video:h264']);
    const media = parsePlaylist(await readFileAsync(join(dir, 'media.m3u8'), 'utf8'));
    assert.equal(media.endList, true);
    const total = media.segments.reduce((sum, s) => sum + s.duration, 0);
    assert.ok(Math.abs(total - 8) < 0.2, `${total} s of 8`);
    await checkCaptions(dir, out, played, spoken);
  } catch (err) {
    t.diagnostic(`speechpipe caption said: ${cli.stderr()}`);
    throw err;
  } finally {
    cli.child.kill('SIGKILL');
  }
});

test('audio alone on standard input: encoded to AAC, the subtitle rendition beside it', {
  skip,
}, async (t) => {
  const { path, spoken } = await programme('news.wav', false);
  const dir = join(root, 'audio-hls');
  const out = join(root, 'audio.vtt');
  const cli = caption(
    ['-', '--hls', dir, '--delay', String(DELAY_SEC), '--port', '0', '--cors', '*', '--out', out],
    await readFileAsync(path),
  );
  try {
    const played = await play(t, await cli.hls);
    // The presentation's end is served a while for players still playing it; a signal stops that.
    cli.child.kill('SIGTERM');
    const [code] = await cli.exited;
    assert.equal(code, 0, cli.stderr());
    assert.match(cli.stderr(), /audio encoded to AAC/);
    const { streams } = await probePresentation(dir);
    assert.deepEqual(streams.sort(), ['audio:aac', 'subtitle:webvtt']);
    await checkCaptions(dir, out, played, spoken);
  } catch (err) {
    t.diagnostic(`speechpipe caption said: ${cli.stderr()}`);
    throw err;
  } finally {
    cli.child.kill('SIGKILL');
  }
});
