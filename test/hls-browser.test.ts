// `speechpipe caption --hls` as a viewer sees it: a programme with video (ffmpeg's lavfi test
// picture and espeak-ng speech at known times) and one of audio alone (a WAV on standard input)
// are captioned into a live HLS presentation; hls.js plays it in a real headless Chromium from
// another origin (--cors); its subtitle text track must hold every caption's words, each at the
// time of its speech in the media; the video must still be video. ffprobe and m3u8-parser read
// the presentation the run left behind.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile as readFileAsync, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, type TestContext, test } from 'node:test';
import { promisify } from 'node:util';
import type { Browser, Page } from 'puppeteer-core';
import { browserSkip, keepScreenshot, launchBrowser } from './helpers/browser.ts';
import { parsePlaylist } from './helpers/hls.ts';
import { captionCli, type Played, playHls, startPlayerSite } from './helpers/hls-player.ts';
import { speechWav } from './helpers/speech.ts';

const skip = browserSkip();
const run = promisify(execFile);
const DELAY_SEC = 3;
const root = await mkdtemp(join(tmpdir(), 'speechpipe-hls-'));

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

let site: { origin: string; close(): Promise<void> };
let browser: Browser | undefined;
before(async () => {
  site = await startPlayerSite();
});
after(async () => {
  await browser?.close();
  await site.close();
  await rm(root, { recursive: true, force: true });
});

/** Play `master` in Chromium from its start to its end; what the player saw. */
async function play(t: TestContext, master: string): Promise<Played> {
  browser ??= await launchBrowser();
  let page: Page | undefined;
  try {
    page = await browser.newPage();
    const played = await playHls(page, site.origin, master, { fromStart: true });
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

/**
 * Caption `input` into a presentation in `name`-hls (with `args`), play it in Chromium from its
 * start to its end, stop the command (it serves the end a while for players still playing it)
 * and check it said how it took the audio and exited 0. What the player saw, and where.
 */
async function captionAndPlay(
  t: TestContext,
  name: string,
  input: string,
  args: string[],
  options: { stdin?: Buffer; audio: RegExp },
): Promise<{ played: Played; dir: string; out: string }> {
  const dir = join(root, `${name}-hls`);
  const out = join(root, `${name}.vtt`);
  const cli = captionCli(
    [input, '--hls', dir, '--delay', String(DELAY_SEC), '--port', '0', '--out', out, ...args],
    options.stdin,
  );
  try {
    const played = await play(t, await cli.hls);
    cli.child.kill('SIGTERM');
    const [code] = await cli.exited;
    assert.equal(code, 0, cli.stderr());
    assert.match(cli.stderr(), options.audio);
    return { played, dir, out };
  } catch (err) {
    t.diagnostic(`speechpipe caption said: ${cli.stderr()}`);
    throw err;
  } finally {
    cli.child.kill('SIGKILL');
  }
}

test('a programme with video: repackaged with its video, every caption in the player at its speech', {
  skip,
}, async (t) => {
  const { path, spoken } = await programme('news.mp4', true);
  const { played, dir, out } = await captionAndPlay(t, 'video', path, ['--realtime', '--cors', site.origin], {
    audio: /HLS: video copied, audio copied/,
  });
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
});

test('audio alone on standard input: encoded to AAC, the subtitle rendition beside it', {
  skip,
}, async (t) => {
  const { path, spoken } = await programme('news.wav', false);
  const { played, dir, out } = await captionAndPlay(t, 'audio', '-', ['--cors', '*'], {
    stdin: await readFileAsync(path),
    audio: /audio encoded to AAC/,
  });
  const { streams } = await probePresentation(dir);
  assert.deepEqual(streams.sort(), ['audio:aac', 'subtitle:webvtt']);
  await checkCaptions(dir, out, played, spoken);
});
