// The caption overlay as a viewer sees it: the relay's page in a real headless Chromium, fed a
// known cue sequence with bursts; what the page's DOM showed, and when, is recorded in the page
// and checked against the reading-time rules. On failure a screenshot is kept (its path is in
// the test's diagnostics).

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type TestContext, test } from 'node:test';
import type { Browser, Page } from 'puppeteer-core';
import { type CaptionRelay, type CaptionRelayOptions, captionRelay } from '../src/sinks/caption-relay.ts';
import { browserSkip, keepScreenshot, launchBrowser } from './helpers/browser.ts';

const skip = browserSkip();

const words = (text: string, start: number) =>
  text.split(' ').map((word, i) => ({ word, start_time: start + i * 0.4, end_time: start + i * 0.4 + 0.3 }));

/** What the page showed: each change of the cue line and of the partial line, timed in the page. */
interface Shown {
  t: number;
  text: string;
  /** Lines as laid out by the browser (rendered height / line height). */
  rendered: number;
}

// Runs in the page before its own script: records every change of #cue and #partial, and any
// CSP violation. (Plain JavaScript: the project's types have no DOM.)
const RECORDER = `
  window.__csp = [];
  document.addEventListener('securitypolicyviolation', (e) => __csp.push(e.violatedDirective + ' ' + e.blockedURI));
  const watch = (id) => {
    const log = (window['__' + id] = []);
    const el = document.getElementById(id);
    const record = () => {
      // The time first: the layout read below takes longer for some texts than others, and a
      // time taken after it made a cue's measured screen time short by the difference.
      const t = performance.now();
      const text = el.textContent;
      if (text === (log.at(-1)?.text ?? '')) return;
      const lineHeight = parseFloat(getComputedStyle(el).lineHeight);
      const rendered = text === '' ? 0 : Math.round(el.getBoundingClientRect().height / lineHeight);
      log.push({ t, text, rendered });
    };
    new MutationObserver(record).observe(el, { childList: true, subtree: true, characterData: true });
  };
  document.addEventListener('DOMContentLoaded', () => {
    watch('cue');
    watch('partial');
  });
`;

/** Evaluate a JavaScript expression in the page. */
const inPage = <T>(page: Page, expression: string) => page.evaluate(expression) as Promise<T>;

interface Overlay {
  relay: CaptionRelay;
  page: Page;
  shown(id: 'cue' | 'partial'): Promise<Shown[]>;
  /** Console errors, page errors and CSP violations so far. */
  problems(): Promise<string[]>;
}

/** The relay's overlay open in Chromium; everything closed on every path, a screenshot kept on failure. */
async function withOverlay(
  t: TestContext,
  options: CaptionRelayOptions,
  body: (overlay: Overlay) => Promise<void>,
): Promise<void> {
  let relay: CaptionRelay | undefined;
  let browser: Browser | undefined;
  let page: Page | undefined;
  try {
    relay = await captionRelay(options);
    browser = await launchBrowser();
    page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 720 });
    const errors: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(`console: ${m.text()}`);
    });
    page.on('pageerror', (e) => errors.push(`page error: ${(e as Error).message}`));
    await page.evaluateOnNewDocument(RECORDER);
    await page.goto(`${relay.url}/`, { waitUntil: 'load' });
    // The page is a viewer before anything is written (a late viewer sees only the last cue).
    const r = relay;
    for (let i = 0; i < 500 && r.stats().viewers === 0; i++) await new Promise((ok) => setTimeout(ok, 10));
    assert.equal(r.stats().viewers, 1, 'the page connected to /events');
    const p = page;
    await body({
      relay: r,
      page: p,
      shown: (id) => inPage<Shown[]>(p, `window.__${id}`),
      problems: async () => [
        ...errors,
        ...(await inPage<string[]>(p, 'window.__csp')).map((v) => `CSP: ${v}`),
      ],
    });
  } catch (err) {
    t.diagnostic(`screenshot: ${await keepScreenshot(page, t.name)}`);
    throw err;
  } finally {
    await browser?.close();
    await relay?.close();
  }
}

test('every cue of a burst is shown, in order, each for at least its minimum time', { skip }, async (t) => {
  await withOverlay(t, {}, async ({ relay, page, shown, problems }) => {
    const first = ['Good evening and welcome.', 'Here is the news at nine.', 'First the weather.'];
    const second = ['Rain all day.', 'Then sun.', 'That is all from us tonight.'];
    relay.write({ type: 'partial', id: 'a', text: 'Good evening and', words: [] });
    // Each utterance is committed as three cues at once: a burst.
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words(first.join(' '), 0) });
    await new Promise((ok) => setTimeout(ok, 300));
    relay.write({ type: 'utterance', id: 'a', index: 1, text: '', words: words(second.join(' '), 5) });
    const expected = [...first, ...second];
    // Until the last cue has come and gone (its hold, then the linger).
    await page.waitForFunction(
      `__cue.some((s) => s.text === ${JSON.stringify(expected.at(-1))}) && __cue.at(-1).text === ''`,
      { timeout: 40_000, polling: 100 },
    );
    const log = await shown('cue');
    const cues = log.filter((s) => s.text !== '');
    assert.deepEqual(
      cues.map((s) => s.text),
      expected,
      'every cue shown once, in order',
    );
    for (let i = 0; i < cues.length; i++) {
      const until = log[log.indexOf(cues[i]!) + 1]!.t;
      const ms = until - cues[i]!.t;
      // The minimum is 1 s; the page's timers never fire early, so this bound is safe.
      assert.ok(ms >= 990, `cue ${i + 1} (${cues[i]!.text}) was on screen ${Math.round(ms)} ms`);
    }
    // A backlog catches up: six cues whose own timing spans 8 s are through in about 7 s (not
    // stuck, nor each lingering its full time); a generous bound for a loaded machine.
    const span = cues.at(-1)!.t - cues[0]!.t;
    assert.ok(span < 15_000, `the burst took ${Math.round(span)} ms`);
    const partials = (await shown('partial')).filter((s) => s.text !== '');
    assert.deepEqual(
      partials.map((s) => s.text),
      ['Good evening and'],
    );
    assert.deepEqual(await problems(), [], 'no console error, no CSP violation');
  });
});

test('bursts of 30 and more cues at once: every word on screen, in order', { skip }, async (t) => {
  // A short minimum time keeps the test quick; the catch-up rules are the same at any minimum.
  await withOverlay(t, { minDurationMs: 300 }, async ({ relay, page, problems }) => {
    const sentences = (from: number, n: number) =>
      Array.from({ length: n }, (_, i) => `Number ${from + i} is here.`);
    // One utterance of 32 sentences is committed as 32 cues at once; then another burst of 30
    // while the first is still being caught up.
    const first = sentences(1, 32);
    const second = sentences(33, 30);
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words(first.join(' '), 0) });
    await new Promise((ok) => setTimeout(ok, 500));
    relay.write({ type: 'utterance', id: 'a', index: 1, text: '', words: words(second.join(' '), 60) });
    assert.equal(relay.stats().cues, 62, 'one cue a sentence');
    await page.waitForFunction(`__cue.some((s) => s.text.endsWith('Number 62 is here.'))`, {
      timeout: 60_000,
      polling: 100,
    });
    const shownWords = (await inPage<Shown[]>(page, 'window.__cue'))
      .filter((s) => s.text !== '')
      .flatMap((s) => s.text.split(/\s+/));
    assert.deepEqual(shownWords, [...first, ...second].join(' ').split(' '), 'every word, once, in order');
    assert.deepEqual(await problems(), [], 'no console error, no CSP violation');
  });
});

test('a long partial keeps to two lines of the cue limits, shown apart from the cue', { skip }, async (t) => {
  await withOverlay(t, {}, async ({ relay, page, shown, problems }) => {
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words('Good evening.', 0) });
    // A 14 s utterance still being spoken: 35 words of provisional text, growing.
    const spoken =
      'so the council met again this morning to talk about the new bridge over the river which has been closed since the storm last winter and nobody knows when it will open again for traffic';
    const all = spoken.split(' ');
    for (let n = 5; n <= all.length; n += 10) {
      relay.write({ type: 'partial', id: 'a', text: all.slice(0, n).join(' '), words: [] });
      await new Promise((ok) => setTimeout(ok, 50));
    }
    relay.write({ type: 'partial', id: 'a', text: spoken, words: [] });
    await page.waitForFunction(`document.getElementById('partial').textContent.endsWith('for traffic')`, {
      timeout: 10_000,
      polling: 50,
    });
    const partials = (await shown('partial')).filter((s) => s.text !== '');
    assert.ok(partials.length >= 2);
    for (const p of partials) {
      const lines = p.text.split('\n');
      assert.ok(lines.length <= 2 && lines.every((l) => l.length <= 42), JSON.stringify(lines));
      assert.ok(p.rendered <= 2, `rendered as ${p.rendered} lines: ${JSON.stringify(p.text)}`);
    }
    assert.ok(spoken.endsWith(partials.at(-1)!.text.replace('\n', ' ')), 'the tail of what is said');
    // Distinct from a final cue: its own class and look.
    type Look = { className: string; fontStyle: string; opacity: string };
    const look = await inPage<{ cue: Look; partial: Look }>(
      page,
      `(() => {
        const style = (id) => {
          const el = document.getElementById(id);
          const s = getComputedStyle(el);
          return { className: el.className, fontStyle: s.fontStyle, opacity: s.opacity };
        };
        return { cue: style('cue'), partial: style('partial') };
      })()`,
    );
    assert.equal(look.partial.className, 'partial');
    assert.equal(look.partial.fontStyle, 'italic');
    assert.notEqual(look.cue.fontStyle, 'italic');
    assert.ok(Number(look.partial.opacity) < Number(look.cue.opacity));
    assert.deepEqual(await problems(), [], 'no console error, no CSP violation');
  });
});

test('an open overlay picks up a restarted relay by itself, after the end of the last one', {
  skip,
}, async (t) => {
  await withOverlay(t, {}, async ({ relay, page, problems }) => {
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words('Before the break.', 0) });
    relay.end();
    await page.waitForFunction(`__cue.some((s) => s.text === 'Before the break.')`, { timeout: 10_000 });
    await relay.close();
    // A new relay on the same address, numbering its cues from 1 again; it has a cue before
    // the page is back, and more after.
    const again = await captionRelay({ port: Number(new URL(relay.url).port) });
    try {
      again.write({ type: 'utterance', id: 'b', index: 0, text: '', words: words('After the break.', 0) });
      await page.waitForFunction(`__cue.some((s) => s.text === 'After the break.')`, { timeout: 30_000 });
      again.write({ type: 'utterance', id: 'b', index: 1, text: '', words: words('And the rest.', 5) });
      await page.waitForFunction(`__cue.some((s) => s.text === 'And the rest.')`, { timeout: 10_000 });
      // Knocking on a closed port while the relay was down is expected; nothing else is.
      const unexpected = (await problems()).filter((p) => !/ERR_CONNECTION_REFUSED/.test(p));
      assert.deepEqual(unexpected, [], 'no other console error, no CSP violation');
    } finally {
      await again.close();
    }
  });
});

test('cors: a player page on another origin reads the cues, the VTT and the events', { skip }, async (t) => {
  // The player's site: another port is another origin.
  const site = createServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>player</title>'),
  );
  site.listen(0, '127.0.0.1');
  await once(site, 'listening');
  const origin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  let browser: Browser | undefined;
  let page: Page | undefined;
  const relays: CaptionRelay[] = [];
  try {
    const open = await captionRelay({ cors: origin });
    const closed = await captionRelay();
    relays.push(open, closed);
    for (const relay of relays)
      relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words('Read from afar.', 0) });
    browser = await launchBrowser();
    page = await browser.newPage();
    await page.goto(`${origin}/`);
    const read = (relay: CaptionRelay) =>
      inPage<{ cues: { lines: string[] }[]; vtt: string; cue: { lines: string[] }; id: string }>(
        page!,
        `(async (relay) => {
          const cues = await (await fetch(relay + '/cues.json')).json();
          const vtt = await (await fetch(relay + '/captions.vtt')).text();
          const [cue, id] = await new Promise((resolve, reject) => {
            const events = new EventSource(relay + '/events');
            events.addEventListener('cue', (e) => { events.close(); resolve([JSON.parse(e.data), e.lastEventId]); });
            events.addEventListener('error', () => { events.close(); reject(new Error('EventSource failed')); });
          });
          return { cues, vtt, cue, id };
        })(${JSON.stringify(relay.url)})`,
      );
    const got = await read(open);
    assert.deepEqual(got.cues[0]!.lines, ['Read from afar.']);
    assert.match(got.vtt, /Read from afar\./);
    assert.deepEqual(got.cue.lines, ['Read from afar.']);
    assert.match(got.id, /^1@/);
    // Without cors the browser keeps the captions from the other origin.
    await assert.rejects(read(closed), /Failed to fetch/);
  } catch (err) {
    t.diagnostic(`screenshot: ${await keepScreenshot(page, t.name)}`);
    throw err;
  } finally {
    await browser?.close();
    for (const relay of relays) await relay.close();
    site.closeAllConnections();
    await new Promise((resolve) => site.close(resolve));
  }
});

test('Arabic captions read right to left with lang; a two-line cue stays two lines at any size', {
  skip,
}, async (t) => {
  await withOverlay(t, { lang: 'ar' }, async ({ relay, page, problems }) => {
    assert.equal(await inPage(page, 'document.documentElement.lang'), 'ar');
    const arabic = 'مساء الخير وأهلا بكم في نشرة الأخبار.';
    relay.write({ type: 'partial', id: 'a', text: 'مساء الخير', words: [] });
    await page.waitForFunction(`document.getElementById('partial').textContent !== ''`, { timeout: 10_000 });
    assert.equal(await inPage(page, `document.getElementById('partial').matches(':dir(rtl)')`), true);
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words(arabic, 0) });
    await page.waitForFunction(`__cue.some((s) => s.text === ${JSON.stringify(arabic)})`, {
      timeout: 10_000,
    });
    assert.equal(await inPage(page, `document.getElementById('cue').matches(':dir(rtl)')`), true);
    // English in the same overlay reads left to right: the direction follows each line's text.
    // Two full lines (wide letters, up to the 42 a line the CaptionBuilder keeps to by default).
    const english = 'Mmm, we were making my mum warm woollen mittens when Wimbledon was';
    const spoken = words(english, 20).map((w) => ({ ...w, speaker: 'SPEAKER_01' }));
    relay.write({ type: 'utterance', id: 'a', index: 1, text: '', words: spoken });
    await page.waitForFunction(`__cue.some((s) => s.text.startsWith('SPEAKER_01: Mmm'))`, {
      timeout: 15_000,
    });
    assert.equal(await inPage(page, `document.getElementById('cue').matches(':dir(ltr)')`), true);
    const text = await inPage<string>(page, `document.getElementById('cue').textContent`);
    // The speaker's label is written into the first line, and counts there.
    const lines = text.split('\n');
    assert.equal(lines.length, 2);
    assert.ok(lines.every((l) => l.length <= 42) && lines[1]!.length >= 38, JSON.stringify(lines));
    // As laid out by the browser, at a broadcast's sizes and at a small browser source.
    for (const [width, height] of [
      [1920, 1080],
      [1280, 720],
      [640, 360],
    ] as const) {
      await page.setViewport({ width, height });
      const box = await inPage<{ lines: number; left: number; right: number }>(
        page,
        `(() => {
          const el = document.getElementById('cue');
          const box = el.getBoundingClientRect();
          return { lines: Math.round(box.height / parseFloat(getComputedStyle(el).lineHeight)), left: box.left, right: box.right };
        })()`,
      );
      assert.equal(box.lines, 2, `${width}x${height}: ${box.lines} lines`);
      assert.ok(box.left >= 0 && box.right <= width, `${width}x${height}: within the screen`);
    }
    assert.deepEqual(await problems(), [], 'no console error, no CSP violation');
  });
});
