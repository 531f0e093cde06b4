// A long captioned run through every output at once, counted against the transcript: the
// `speechpipe caption` command plays speech at real time (`--realtime`, a WAV of the news-like
// sentences, 5 s of silence first so that the viewers are there before the first cue) to the
// overlay page (open in headless Chromium, every change of its cue line recorded), Server-Sent
// Events (a reader to the `end`), `--out` (WebVTT), `--hls` (the subtitle playlist read as a
// player does, every WebVTT segment fetched while it is listed), OBS (a real OBS Studio under
// xvfb-run, streaming to nginx-rtmp; the captions decoded from what nginx received) and a
// YouTube caption receiver (which checks the format and seq rules). The transcript is the `--out` file's words;
// each output's words must be the same, in the same order. Without OBS installed, its row is
// left out (said).
//
//   node bench/caption-outputs-run.ts [--minutes 10]

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { encodeWav } from '../src/index.ts';
import { findChromium, launchBrowser } from '../test/helpers/browser.ts';
import { startCaptionReceiver } from '../test/helpers/caption-receiver.ts';
import { captionsOfFlv, newLines } from '../test/helpers/flv.ts';
import { obsMissing, onAir } from '../test/helpers/obs.ts';
import { readEvents } from '../test/helpers/sse.ts';
import { vttWords } from '../test/helpers/utterances.ts';
import { newsSpeech } from './helpers/realtime-audio.ts';

const { values } = parseArgs({ options: { minutes: { type: 'string', default: '10' } } });
const minutes = Number(values.minutes);
const dir = await mkdtemp(join(tmpdir(), 'speechpipe-outputs-run-'));
const wav = join(dir, 'news.wav');
await writeFile(
  wav,
  encodeWav(Buffer.concat([Buffer.alloc(5 * 32000), await newsSpeech(minutes * 60)]), 16000),
);

const missing = obsMissing();
const air = await onAir(dir);
const studio = air?.studio;
const receiver = await startCaptionReceiver();
const out = join(dir, 'run.vtt');
const passwordFile = join(dir, 'obs-password');
if (studio) await writeFile(passwordFile, studio.password);

const began = Date.now();
const cli = spawn(
  process.execPath,
  [
    'src/cli/main.ts',
    'caption',
    wav,
    '--realtime',
    '--port',
    '0',
    '--out',
    out,
    '--hls',
    join(dir, 'hls'),
    '--youtube',
    receiver.url,
    ...(studio ? ['--obs', studio.url, '--obs-password-file', passwordFile] : []),
  ],
  { cwd: new URL('..', import.meta.url), stdio: ['ignore', 'pipe', 'pipe'] },
);
let stderr = '';
cli.stderr!.on('data', (d: Buffer) => {
  stderr += d.toString();
});
const exited = once(cli, 'exit');
const [line] = (await once(createInterface({ input: cli.stdout! }), 'line')) as [string];
const { url } = JSON.parse(line) as { url: string };

// The viewers: the overlay page in Chromium, and an SSE reader, both before the first cue.
const chromium = findChromium();
const browser = chromium ? await launchBrowser() : undefined;
const page = await browser?.newPage();
await page?.evaluateOnNewDocument(`
  window.__cues = [];
  document.addEventListener('DOMContentLoaded', () => {
    const el = document.getElementById('cue');
    new MutationObserver(() => {
      if (el.textContent !== '' && el.textContent !== window.__cues.at(-1)) window.__cues.push(el.textContent);
    }).observe(el, { childList: true, subtree: true, characterData: true });
  });
`);
await page?.goto(`${url}/`, { waitUntil: 'load' });
const sse = readEvents(`${url}/events`, (events) => events.some((e) => e.event === 'end'));

/**
 * The HLS subtitle rendition as a player reads it: the playlist every second, each WebVTT
 * segment listed fetched once; a cue carried in two segments (it spans their border) counted
 * once. Until the playlist ends.
 */
async function readHlsCues(base: string): Promise<{ segments: number; cues: string[] }> {
  const fetched = new Set<string>();
  const seen = new Set<string>();
  const cues: string[] = [];
  for (;;) {
    const res = await fetch(`${base}/hls/subtitles.m3u8`).catch(() => undefined);
    const playlist = res?.ok ? await res.text() : '';
    for (const name of playlist.split('\n').filter((l) => l.endsWith('.vtt'))) {
      if (fetched.has(name)) continue;
      fetched.add(name);
      const vtt = await (await fetch(`${base}/hls/${name}`)).text();
      for (const block of vtt.split('\n\n')) {
        const [timing, ...text] = block.split('\n');
        if (!timing?.includes(' --> ')) continue;
        const key = `${timing}\n${text.join('\n')}`;
        if (seen.has(key)) continue;
        seen.add(key);
        cues.push(
          text
            .join(' ')
            .replace(/<[^>]*>/g, '')
            .replace(/&lt;/g, '<')
            .replace(/&gt;/g, '>')
            .replace(/&amp;/g, '&'),
        );
      }
    }
    // The end, or the command gone (what was read is what a player got).
    if (playlist.includes('#EXT-X-ENDLIST') || (!res?.ok && cli.exitCode !== null))
      return { segments: fetched.size, cues };
    await new Promise((r) => setTimeout(r, 1000));
  }
}
const hls = readHlsCues(url);

const [code] = await exited;
const seconds = (Date.now() - began) / 1000;
const sseEvents = await sse;
const hlsRead = await hls;
// The overlay holds its last cue a moment after the end.
await new Promise((r) => setTimeout(r, 3000));
const overlayCues = (await page?.evaluate('window.__cues')) as string[] | undefined;
await browser?.close();
let obsLines: string[] | undefined;
if (air) {
  // OBS puts its last caption into the next frame: a moment before the stream stops.
  await new Promise((r) => setTimeout(r, 1000));
  await air.stopStreaming();
  const recordings = await air.rtmp.recordings();
  const all = await Promise.all(recordings.map((f) => captionsOfFlv(f)));
  obsLines = newLines(all.flatMap((r) => r.captions));
}
await receiver.close();
await air?.close();

const transcript = await vttWords(out);
const fileCues = ((await readFile(out, 'utf8')).match(/ --> /g) ?? []).length;
const words = (texts: string[]) => texts.join(' ').split(/\s+/).filter(Boolean);
const rows: [string, number, string[] | undefined, string][] = [
  ['--out (WebVTT)', fileCues, transcript, 'cues in the file'],
  [
    'Server-Sent Events',
    sseEvents.filter((e) => e.event === 'cue').length,
    words(
      sseEvents.filter((e) => e.event === 'cue').map((e) => (e.data as { lines: string[] }).lines.join(' ')),
    ),
    'cue events',
  ],
  ['overlay page (Chromium)', overlayCues?.length ?? 0, overlayCues && words(overlayCues), 'cues shown'],
  ['HLS subtitles (WebVTT)', hlsRead.cues.length, words(hlsRead.cues), `cues, ${hlsRead.segments} segs`],
  [
    'OBS (CEA-608 in the stream)',
    obsLines?.length ?? 0,
    obsLines && words(obsLines).filter((w) => w !== '>>'),
    'lines decoded',
  ],
  [
    'YouTube receiver',
    receiver.captions.length,
    words(receiver.captions.map((c) => c.text.replace(/<br>/g, ' '))),
    'cues taken',
  ],
];
console.log(
  `${minutes} min of speech, run in ${seconds.toFixed(0)} s, exit ${code}; transcript: ${transcript.length} words (--out)`,
);
for (const [name, count, got, unit] of rows) {
  if (!got) {
    console.log(`${name.padEnd(30)} left out: ${name.startsWith('OBS') ? missing : 'no Chromium'}`);
    continue;
  }
  const same = got.length === transcript.length && got.every((w, i) => w === transcript[i]);
  const first = got.findIndex((w, i) => w !== transcript[i]);
  console.log(
    `${name.padEnd(30)} ${String(count).padStart(5)} ${unit.padEnd(16)} ${String(got.length).padStart(6)} words  ${same ? 'all, in order' : `DIFFERS at word ${first}: ${got.slice(first, first + 5).join(' ')} / ${transcript.slice(first, first + 5).join(' ')}`}`,
  );
}
console.log(`YouTube receiver: ${receiver.violations.length} format or seq violations`);
console.log(
  stderr
    .split('\n')
    .filter((l) => /^(OBS|YouTube|the input ended|warning)/.test(l))
    .join('\n'),
);
await rm(dir, { recursive: true, force: true });
