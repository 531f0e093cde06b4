// Caption latency of `speechpipe caption --hls`, as a viewer sees it: a programme (a test
// picture and espeak-ng sentences at known times) is played as a broadcast (--realtime) into a
// live HLS presentation, and hls.js in headless Chromium joins it at the live edge as a viewer
// does. For every utterance: the moment the caption holding its last word came on screen in the
// player, minus the moment that word was spoken in the broadcast (the programme's clock,
// anchored by the first segment's EXT-X-PROGRAM-DATE-TIME). It is the delay line (--delay) plus
// hls.js's distance from the live edge plus what the service takes, less nothing: a caption is
// on screen with its speech, and its speech is that late.
//
//   node bench/hls-latency.ts [--seconds 40] [--delay 4]

import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { encodeWav } from '../src/index.ts';
import { MPEG_CLOCK } from '../src/sinks/ts-segmenter.ts';
import { launchBrowser } from '../test/helpers/browser.ts';
import { parsePlaylist } from '../test/helpers/hls.ts';
import { captionCli, playHls, startPlayerSite } from '../test/helpers/hls-player.ts';
import { NEWS_SENTENCES, speechPcm } from '../test/helpers/speech.ts';

const run = promisify(execFile);
const { values } = parseArgs({
  options: { seconds: { type: 'string', default: '40' }, delay: { type: 'string', default: '4' } },
});
const seconds = Number(values.seconds);
const delay = Number(values.delay);
const sentences = NEWS_SENTENCES;

// The speech, and where each utterance ends in it (seconds).
const PAUSE_MS = 900;
const parts: Buffer[] = [];
const ends: { startSec: number; endSec: number }[] = [];
let bytes = 32_000; // a second of silence first
for (let i = 0; bytes < (seconds - 3) * 32_000; i++) {
  const speech = await speechPcm(sentences[i % sentences.length]!);
  ends.push({ startSec: bytes / 32_000, endSec: (bytes + speech.length) / 32_000 });
  parts.push(speech, Buffer.alloc(Math.round((PAUSE_MS / 1000) * 16_000) * 2));
  bytes += speech.length + Math.round((PAUSE_MS / 1000) * 16_000) * 2;
}
const root = await mkdtemp(join(tmpdir(), 'speechpipe-hls-bench-'));
const site = await startPlayerSite();
const browser = await launchBrowser();
try {
  const wav = join(root, 'speech.wav');
  await writeFile(wav, encodeWav(Buffer.concat([Buffer.alloc(32_000), ...parts]), 16_000));
  const programme = join(root, 'programme.mp4');
  await run('ffmpeg', [
    ...['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=25'],
    ...[
      '-i',
      wav,
      '-af',
      'apad',
      '-t',
      String(seconds),
      '-c:v',
      'libx264',
      '-preset',
      'ultrafast',
      '-g',
      '50',
    ],
    ...['-pix_fmt', 'yuv420p', '-c:a', 'aac', '-ar', '44100', programme],
  ]);
  const dir = join(root, 'hls');
  const cli = captionCli([
    programme,
    '--realtime',
    '--hls',
    dir,
    '--delay',
    String(delay),
    '--port',
    '0',
    '--cors',
    site.origin,
  ]);
  const master = await cli.hls;
  // The programme's clock: its first segment's wall time and first audio timestamp, read before
  // the window slides past it.
  const mediaPlaylist = master.replace('master.m3u8', 'media.m3u8');
  let first: { uri: string; programDateTime: number } | undefined;
  const waitFirst = (async () => {
    while (!first) {
      const res = await fetch(mediaPlaylist);
      if (res.status === 200) {
        const s = parsePlaylist(await res.text()).segments[0];
        if (s?.programDateTime !== undefined) first = { uri: s.uri, programDateTime: s.programDateTime };
      }
      if (!first) await new Promise((r) => setTimeout(r, 50));
    }
    const probe = async (stream: string) => {
      const { stdout } = await run('ffprobe', [
        ...['-v', 'error', '-select_streams', stream, '-show_entries', 'packet=pts'],
        ...['-read_intervals', '%+#1', '-of', 'json', join(dir, first!.uri)],
      ]);
      return (JSON.parse(stdout) as { packets: { pts: number }[] }).packets[0]!.pts;
    };
    // The segment starts at its keyframe; the captions' clock at the first audio sample.
    return { ...first, videoPts: await probe('v:0'), audioPts: await probe('a:0') };
  })();
  const page = await browser.newPage();
  const played = await playHls(page, site.origin, master, {
    fromStart: false,
    timeoutMs: (seconds + 60) * 1000,
  });
  cli.child.kill('SIGTERM');
  await cli.exited;
  const clock = await waitFirst;
  if (played.errors.length > 0) throw new Error(`hls.js: ${played.errors.join(', ')}`);
  // Wall time at which the broadcast spoke media time m (s from the first audio sample).
  const spokenAt = (m: number) =>
    clock.programDateTime + (m - (clock.videoPts - clock.audioPts) / MPEG_CLOCK) * 1000;
  const latencies: number[] = [];
  // Every cue: on screen minus its first word spoken (the presentation's own delay).
  const behind = played.shown
    .map((c) => {
      const media = (played.initPTS + c.start * played.timescale - clock.audioPts) / MPEG_CLOCK;
      return (c.wallMs - spokenAt(media)) / 1000;
    })
    .sort((a, b) => a - b);
  for (const u of ends) {
    // The captions of this utterance, as the player showed them (media time of each).
    const shown = played.shown
      .map((c) => ({
        ...c,
        media: (played.initPTS + c.start * played.timescale - clock.audioPts) / MPEG_CLOCK,
      }))
      .filter((c) => c.media >= u.startSec - 0.3 && c.media <= u.endSec + 0.3);
    if (shown.length === 0) continue; // before the viewer joined
    const last = shown.reduce((a, b) => (b.media > a.media ? b : a));
    latencies.push((last.wallMs - spokenAt(u.endSec)) / 1000);
  }
  latencies.sort((a, b) => a - b);
  const pct = (p: number) =>
    latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]!;
  console.log(
    `HLS caption latency (last word spoken -> caption on screen in hls.js at the live edge), ${seconds} s, --delay ${delay}:`,
  );
  console.log(
    `  n=${latencies.length} of ${ends.length} utterances  p50 ${pct(50).toFixed(2)} s  p90 ${pct(90).toFixed(2)} s  min ${latencies[0]!.toFixed(2)} s  max ${latencies.at(-1)!.toFixed(2)} s`,
  );
  console.log(
    `  each cue on screen after its first word was spoken: p50 ${behind[Math.floor(behind.length / 2)]!.toFixed(2)} s (the delay line and hls.js's distance from the live edge)`,
  );
  await page.close();
} finally {
  await browser.close();
  await site.close();
  await rm(root, { recursive: true, force: true });
}
