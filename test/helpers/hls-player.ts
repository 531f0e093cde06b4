// An HLS viewer for tests and benchmarks: `speechpipe caption --hls` run as a user runs it, and
// a player site on an origin of its own whose page plays a presentation with hls.js (served from
// node_modules) in headless Chromium, recording hls.js's time base, its fatal errors, the end of
// playback, and when each caption cue came on screen (wall clock).

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import type { Page } from 'puppeteer-core';
import { CLI_CWD, cliEnv } from './cli.ts';

const HLS_JS = new URL('../../node_modules/hls.js/dist/hls.min.js', import.meta.url);
const PLAYER = `<!doctype html><meta charset="utf-8"><title>player</title>
<video id="video" muted playsinline width="320" height="240"></video>
<script src="/hls.min.js"></script>`;

/** The player's site: `/` the page, `/hls.min.js` hls.js. */
export async function startPlayerSite(): Promise<{ origin: string; close(): Promise<void> }> {
  const site = createServer((req, res) => {
    if (req.url === '/hls.min.js')
      readFile(HLS_JS, (err, body) =>
        err ? res.writeHead(500).end() : res.writeHead(200, { 'content-type': 'text/javascript' }).end(body),
      );
    else res.writeHead(200, { 'content-type': 'text/html' }).end(PLAYER);
  });
  site.listen(0, '127.0.0.1');
  await once(site, 'listening');
  return {
    origin: `http://127.0.0.1:${(site.address() as AddressInfo).port}`,
    close: async () => {
      site.closeAllConnections();
      await new Promise((resolve) => site.close(resolve));
    },
  };
}

/** `speechpipe caption ...args` running: its HLS URL once it serves, its exit, what it said. */
export function captionCli(
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
export interface Played {
  /** hls.js's time base: player time t is PTS initPTS + t × timescale. */
  initPTS: number;
  timescale: number;
  /** The subtitle track's cues (player time, s). */
  cues: { start: number; end: number; text: string }[];
  /** When each cue first came on screen: its start (player time) and the wall clock (ms). */
  shown: { start: number; text: string; wallMs: number }[];
  videoWidth: number;
  frames: number;
  errors: string[];
}

// In the page: hls.js plays the presentation (from its start with `fromStart`, else at the live
// edge as a viewer joins); the page records hls.js's time base (INIT_PTS_FOUND), fatal errors,
// the end, and each cue's first time on screen. (Plain JavaScript: the project's types have no DOM.)
const play = (master: string, fromStart: boolean) => `(() => {
  window.__played = { errors: [], shown: [], initPTS: undefined, timescale: undefined, ended: false };
  const video = document.getElementById('video');
  const hls = new Hls(${fromStart ? '{ startPosition: 0 }' : '{}'});
  hls.on(Hls.Events.INIT_PTS_FOUND, (_, d) => {
    if (window.__played.initPTS === undefined) {
      window.__played.initPTS = d.initPTS;
      window.__played.timescale = d.timescale;
    }
  });
  hls.on(Hls.Events.ERROR, (_, d) => { if (d.fatal) window.__played.errors.push(d.type + ': ' + d.details); });
  const seen = new Set();
  video.textTracks.addEventListener('addtrack', (e) => {
    e.track.addEventListener('cuechange', () => {
      const wallMs = Date.now();
      for (const cue of e.track.activeCues ?? []) {
        const key = cue.startTime + '|' + cue.text;
        if (seen.has(key)) continue;
        seen.add(key);
        window.__played.shown.push({ start: cue.startTime, text: cue.text, wallMs });
      }
    });
  });
  video.addEventListener('ended', () => { window.__played.ended = true; });
  hls.loadSource(${JSON.stringify(master)});
  hls.attachMedia(video);
  ${fromStart ? '// Twice as fast where the presentation is ahead (an input faster than real time): a quicker test.\n  video.playbackRate = 2;' : ''}
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

/**
 * Play `master` in `page` to its end (once its master playlist exists): from its start, or at
 * the live edge as a viewer joining it. What the player saw.
 */
export async function playHls(
  page: Page,
  site: string,
  master: string,
  options: { fromStart: boolean; timeoutMs?: number },
): Promise<Played> {
  await page.goto(`${site}/`, { waitUntil: 'load' });
  for (let i = 0; i < 600 && (await fetch(master)).status !== 200; i++)
    await new Promise((r) => setTimeout(r, 50));
  await page.evaluate(play(master, options.fromStart));
  await page.waitForFunction('window.__played.ended || window.__played.errors.length > 0', {
    timeout: options.timeoutMs ?? 60_000,
    polling: 200,
  });
  return (await page.evaluate(COLLECT)) as Played;
}
