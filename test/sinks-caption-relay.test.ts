// captionRelay(): transcript events in, caption cues out to viewers over Server-Sent Events, the
// overlay page, and the recent cues as WebVTT; a viewer that does not read is dropped.

import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect } from 'node:net';
import { finished } from 'node:stream/promises';
import { test } from 'node:test';
import { captionRelay } from '../src/sinks/caption-relay.ts';
import { readEvents } from './helpers/sse.ts';

const words = (text: string, start: number) =>
  text.split(' ').map((word, i) => ({ word, start_time: start + i * 0.4, end_time: start + i * 0.4 + 0.3 }));

test('utterances become cues at once; partials pass on; the end reaches every viewer', async () => {
  const relay = await captionRelay();
  try {
    let opened!: () => void;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const reading = readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'), opened);
    await open;
    relay.write({ type: 'partial', id: 'a', text: 'Good evening and', words: [] });
    relay.write({
      type: 'utterance',
      id: 'a',
      index: 0,
      text: '',
      words: words('Good evening and welcome.', 0),
    });
    relay.write({
      type: 'utterance',
      id: 'a',
      index: 1,
      text: '',
      words: words('Here is the news.', 3).map((w) => ({ ...w, speaker: 'SPEAKER_01' })),
    });
    relay.end({ type: 'final', id: 'a', text: '', words: [], utterances: [] });
    const events = await reading;
    assert.deepEqual(
      events.map((e) => e.event),
      ['partial', 'cue', 'cue', 'end'],
    );
    assert.deepEqual(events[0]!.data, { text: 'Good evening and', lines: ['Good evening and'] });
    const first = events[1]!.data as { index: number; startMs: number; lines: string[]; speaker: null };
    assert.equal(first.index, 1);
    assert.equal(first.startMs, 0);
    assert.deepEqual(first.lines, ['Good evening and welcome.']);
    const second = events[2]!.data as { startMs: number; speaker: string };
    assert.equal(second.speaker, 'SPEAKER_01');
    assert.equal(second.startMs, 3000);

    const vtt = await (await fetch(`${relay.url}/captions.vtt`)).text();
    assert.match(vtt, /^WEBVTT\n\n00:00:00\.000 --> 00:00:0\d\.\d{3}\nGood evening and welcome\.\n\n/);
    assert.match(vtt, /<v SPEAKER_01>Here is the news\./);
    assert.equal(relay.stats().cues, 2);
  } finally {
    await relay.close();
  }
});

test('the overlay page: its script and style from the relay only, text set as text, never HTML', async () => {
  const relay = await captionRelay({ title: '<Evening news>' });
  try {
    const page = await fetch(`${relay.url}/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-security-policy')!, /default-src 'none'; script-src 'self'/);
    const html = await page.text();
    assert.match(html, /<title>&#60;Evening news&#62;<\/title>/);
    assert.match(html, /<script src="\/overlay\.js" defer><\/script>/);
    const script = await (await fetch(`${relay.url}/overlay.js`)).text();
    assert.match(script, /new EventSource\(/);
    assert.doesNotMatch(script, /innerHTML/);
    assert.equal((await fetch(`${relay.url}/nope`)).status, 404);
    assert.equal((await fetch(`${relay.url}/events`, { method: 'POST' })).status, 405);
  } finally {
    await relay.close();
  }
});

test('a late viewer gets the cue on screen; viewers beyond maxViewers are refused', async () => {
  const relay = await captionRelay({ maxViewers: 1 });
  try {
    relay.write({ type: 'utterance', id: 'a', index: 0, text: '', words: words('Already said.', 0) });
    let opened!: () => void;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const reading = readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'), opened);
    await open;
    const refused = await fetch(`${relay.url}/events`);
    assert.equal(refused.status, 503);
    await refused.body?.cancel();
    relay.end();
    const [late, end] = await reading;
    assert.equal(end!.event, 'end');
    assert.equal(late!.event, 'cue');
    assert.deepEqual((late!.data as { lines: string[] }).lines, ['Already said.']);
    assert.equal(relay.stats().refused, 1);
  } finally {
    await relay.close();
  }
});

test('a viewer that stops reading is dropped; the writer is never held back', async () => {
  const relay = await captionRelay({ maxViewerBufferBytes: 16 * 1024 });
  const socket = connect(new URL(relay.url).port === '' ? 80 : Number(new URL(relay.url).port), '127.0.0.1');
  try {
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write('GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    socket.pause(); // a viewer whose tab froze
    for (let i = 0; i < 1000 && relay.stats().viewers === 0; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(relay.stats().viewers, 1, 'the raw viewer connected');
    const text = 'x'.repeat(1000);
    // Writes keep completing (the relay never waits for a viewer) until the viewer is dropped.
    for (let i = 0; i < 100_000 && relay.stats().dropped === 0; i++) {
      await new Promise<void>((resolve, reject) =>
        relay.write({ type: 'partial', id: 'a', text, words: [] }, (err) => (err ? reject(err) : resolve())),
      );
      if (i % 50 === 0) await new Promise((r) => setImmediate(r));
    }
    assert.equal(relay.stats().dropped, 1);
    assert.equal(relay.stats().viewers, 0);
  } finally {
    socket.destroy();
    await relay.close();
  }
});

test('bad input and bad options are typed errors', async () => {
  await assert.rejects(captionRelay({ history: 0 }), { code: 'ERR_INVALID_ARGUMENT' });
  // An empty host would have listen() bind every interface.
  await assert.rejects(captionRelay({ host: '' }), { code: 'ERR_INVALID_ARGUMENT' });
  await assert.rejects(captionRelay({ host: ' ' }), { code: 'ERR_INVALID_ARGUMENT' });
  const relay = await captionRelay();
  try {
    await assert.rejects(
      new Promise<void>((resolve, reject) => {
        relay.once('error', reject);
        relay.write(42, (err) => (err ? reject(err) : resolve()));
      }),
      { code: 'ERR_INVALID_ARGUMENT' },
    );
  } finally {
    await relay.close();
  }
  // A word without times: a typed error from the write, no cue with NaN times relayed.
  const other = await captionRelay();
  try {
    const utterance = { type: 'utterance', words: [{ word: 'hello' }] };
    await assert.rejects(
      new Promise<void>((resolve, reject) => {
        other.once('error', reject);
        other.write(utterance, (err) => (err ? reject(err) : resolve()));
      }),
      { code: 'ERR_INVALID_ARGUMENT' },
    );
    assert.equal(other.stats().cues, 0);
  } finally {
    await other.close();
  }
});

test('/cues.json keeps the last `history` cues; HEAD /events takes no viewer slot', async () => {
  const relay = await captionRelay({ history: 2, maxViewers: 1 });
  try {
    for (let i = 0; i < 5; i++)
      relay.write({ type: 'utterance', id: 'a', index: i, text: '', words: words(`Sentence ${i}.`, i * 10) });
    const cues = (await (await fetch(`${relay.url}/cues.json`)).json()) as {
      index: number;
      lines: string[];
    }[];
    assert.deepEqual(
      cues.map((c) => [c.index, c.lines[0]]),
      [
        [4, 'Sentence 3.'],
        [5, 'Sentence 4.'],
      ],
    );
    const head = await fetch(`${relay.url}/events`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(relay.stats().viewers, 0);
    const vtt = await (await fetch(`${relay.url}/captions.vtt`)).text();
    assert.equal(vtt.match(/ --> /g)!.length, 2);
  } finally {
    await relay.close();
  }
});

test('requests addressed to another host name are refused (a rebound DNS name cannot read the captions)', async () => {
  const relay = await captionRelay();
  try {
    const port = new URL(relay.url).port;
    const ask = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port, path: '/cues.json', headers: { host } }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        });
        req.once('error', reject);
        req.end();
      });
    assert.equal(await ask(`evil.example:${port}`), 421);
    assert.equal(await ask(`localhost:${port}`), 200);
    assert.equal(await ask(`127.0.0.1:${port}`), 200);
  } finally {
    await relay.close();
  }
  const open = await captionRelay({ allowedHosts: ['captions.example'] });
  try {
    assert.equal((await fetch(`${open.url}/cues.json`)).status, 421);
  } finally {
    await open.close();
  }
});

test('a request target that is no URL is answered 400; the relay serves on', async () => {
  const relay = await captionRelay();
  try {
    const ask = (target: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(relay.url).port), '127.0.0.1');
        let got = '';
        socket.setEncoding('latin1');
        socket.on('data', (d: string) => (got += d));
        socket.once('error', reject);
        socket.once('close', () => resolve(got.split('\r\n')[0]!));
        socket.end(`GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
      });
    assert.equal(await ask('http://['), 'HTTP/1.1 400 Bad Request');
    assert.equal(await ask('http://a:b@/x'), 'HTTP/1.1 400 Bad Request');
    assert.equal(await ask('/cues.json'), 'HTTP/1.1 200 OK');
  } finally {
    await relay.close();
  }
});

test('close() before the captions ended: connections close without `end` (overlays reconnect), then the relay stops', async () => {
  const relay = await captionRelay();
  let opened!: () => void;
  const open = new Promise<void>((resolve) => (opened = resolve));
  const reading = readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'), opened);
  await open;
  await relay.close();
  assert.deepEqual(await reading, [], 'the stream closed with no end event');
  await assert.rejects(fetch(`${relay.url}/cues.json`));
});

test('the writes ended, then close(): viewers got `end`, and a late viewer gets it too', async () => {
  const relay = await captionRelay();
  let opened!: () => void;
  const open = new Promise<void>((resolve) => (opened = resolve));
  const reading = readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'), opened);
  await open;
  relay.end();
  await finished(relay);
  assert.deepEqual(
    (await reading).map((e) => e.event),
    ['end'],
  );
  const late = await readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'));
  assert.deepEqual(
    late.map((e) => e.event),
    ['end'],
  );
  await relay.close();
});

test('every cue event has its index (and the relay) as id; a viewer back with Last-Event-ID gets the cues it missed', async () => {
  const relay = await captionRelay({ history: 4 });
  try {
    for (let i = 0; i < 6; i++)
      relay.write({
        type: 'utterance',
        id: 'a',
        index: i,
        text: '',
        words: words(`Sentence ${i + 1}.`, i * 10),
      });
    relay.write({ type: 'partial', id: 'a', text: 'and now', words: [] });
    relay.end();
    await finished(relay);
    const toEnd = (e: { event: string }[]) => e.some((x) => x.event === 'end');
    const read = async (query: string, headers?: Record<string, string>) =>
      (await readEvents(`${relay.url}/events${query}`, toEnd, undefined, headers)).filter(
        (e) => e.event === 'cue',
      );
    const seen = async (query: string, headers?: Record<string, string>) =>
      (await read(query, headers)).map((e) => (e.data as { index: number }).index);
    // New: the cue on screen only; its id is its index and the relay's name.
    const [onScreen] = await read('');
    assert.equal((onScreen!.data as { index: number }).index, 6);
    const [, name] = /^6@(\w+)$/.exec(onScreen!.id!)!;
    // Back after cue 4 (the browser's reconnection sends the header): 5 and 6, with their ids.
    assert.deepEqual(
      (await read('', { 'last-event-id': `4@${name}` })).map((e) => e.id),
      [`5@${name}`, `6@${name}`],
    );
    // A page opening a new EventSource says it in the query; the header wins when both are sent.
    assert.deepEqual(await seen(`?lastEventId=5@${name}`), [6]);
    assert.deepEqual(await seen(`?lastEventId=1@${name}`, { 'last-event-id': `5@${name}` }), [6]);
    // A bare index is taken as this relay's.
    assert.deepEqual(await seen('?lastEventId=5'), [6]);
    // Back after a cue no longer kept: what is kept.
    assert.deepEqual(await seen(`?lastEventId=1@${name}`), [3, 4, 5, 6]);
    // An id another relay gave (this one restarted and numbers from 1 again): every kept cue.
    assert.deepEqual(await seen('?lastEventId=5@before'), [3, 4, 5, 6]);
    assert.deepEqual(await seen('?lastEventId=40'), [3, 4, 5, 6]);
    assert.deepEqual(await seen(`?lastEventId=6@${name}`), []);
    assert.deepEqual(await seen('?lastEventId=nonsense'), [6], 'an id that is none: a new viewer');
  } finally {
    await relay.close();
  }
});

test('cors: another origin may read /events, /cues.json and /captions.vtt (a preflight too), nothing else', async () => {
  await assert.rejects(captionRelay({ cors: 'player.example' }), { code: 'ERR_INVALID_ARGUMENT' });
  await assert.rejects(captionRelay({ cors: 'https://player.example/' }), { code: 'ERR_INVALID_ARGUMENT' });
  await assert.rejects(captionRelay({ cors: 'ftp://player.example' }), { code: 'ERR_INVALID_ARGUMENT' });
  const origin = 'https://player.example:8443';
  const headers = { origin };
  const relay = await captionRelay({ cors: origin });
  try {
    for (const path of ['/cues.json', '/captions.vtt', '/events']) {
      const res = await fetch(`${relay.url}${path}`, { headers });
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get('access-control-allow-origin'), origin, path);
      await res.body?.cancel();
      // An EventSource coming back sends Last-Event-ID: a preflight.
      const preflight = await fetch(`${relay.url}${path}`, {
        method: 'OPTIONS',
        headers: {
          ...headers,
          'access-control-request-method': 'GET',
          'access-control-request-headers': 'last-event-id',
        },
      });
      assert.equal(preflight.status, 204, path);
      assert.equal(preflight.headers.get('access-control-allow-origin'), origin);
      assert.match(preflight.headers.get('access-control-allow-headers')!, /last-event-id/);
    }
    for (const path of ['/', '/overlay.js']) {
      const res = await fetch(`${relay.url}${path}`, { headers });
      assert.equal(res.headers.get('access-control-allow-origin'), null, path);
      await res.body?.cancel();
      assert.equal((await fetch(`${relay.url}${path}`, { method: 'OPTIONS' })).status, 405, path);
    }
  } finally {
    await relay.close();
  }
  const closed = await captionRelay();
  try {
    const res = await fetch(`${closed.url}/cues.json`, { headers });
    assert.equal(res.headers.get('access-control-allow-origin'), null, 'no cors: no other origin');
    await res.body?.cancel();
    assert.equal((await fetch(`${closed.url}/cues.json`, { method: 'OPTIONS' })).status, 405);
  } finally {
    await closed.close();
  }
});

test('the page says the captions language; each line takes its direction from its text; labels count in the line', async () => {
  await assert.rejects(captionRelay({ lang: 'not a tag' }), { code: 'ERR_INVALID_ARGUMENT' });
  const relay = await captionRelay({ lang: 'ar' });
  try {
    const html = await (await fetch(`${relay.url}/`)).text();
    assert.match(html, /<html lang="ar">/);
    assert.match(html, /<p id="cue" class="cue" dir="auto">/);
    assert.match(html, /<p id="partial" class="partial" dir="auto">/);
    const script = await (await fetch(`${relay.url}/overlay.js`)).text();
    assert.match(script, /who\.dir = 'auto'/, "a speaker's label takes its own direction");
    // Broadcast limits: 42 characters a line, two lines, with the label written into the first.
    const said = 'Mmm, we were making my mum warm woollen mittens when Wimbledon was women only now';
    relay.write({
      type: 'utterance',
      id: 'a',
      index: 0,
      text: '',
      words: words(said, 0).map((w) => ({ ...w, speaker: 'SPEAKER_01' })),
    });
    const cues = (await (await fetch(`${relay.url}/cues.json`)).json()) as {
      lines: string[];
      speaker: string;
    }[];
    for (const c of cues) {
      assert.ok(c.lines.length <= 2, JSON.stringify(c.lines));
      const shown = [`${c.speaker}: ${c.lines[0]}`, ...c.lines.slice(1)];
      assert.ok(
        shown.every((l) => l.length <= 42),
        JSON.stringify(shown),
      );
    }
    assert.equal(cues.flatMap((c) => c.lines).join(' '), said);
  } finally {
    await relay.close();
  }
  const unsaid = await captionRelay();
  try {
    assert.match(await (await fetch(`${unsaid.url}/`)).text(), /<html>/, 'no language said: no lang');
  } finally {
    await unsaid.close();
  }
});

/** The page's script against stand-ins for the DOM, EventSource and a virtual clock. */
async function fakeOverlay() {
  const relay = await captionRelay();
  let script: string;
  try {
    script = await (await fetch(`${relay.url}/overlay.js`)).text();
  } finally {
    await relay.close();
  }
  class FakeEventSource {
    static CLOSED = 2;
    static made: FakeEventSource[] = [];
    readyState = 1;
    readonly handlers = new Map<string, (e: { data?: string; lastEventId?: string }) => void>();
    readonly url: string;
    constructor(url: string) {
      this.url = url;
      FakeEventSource.made.push(this);
    }
    addEventListener(type: string, fn: (e: { data?: string; lastEventId?: string }) => void) {
      this.handlers.set(type, fn);
    }
    close() {
      this.readyState = 2;
    }
    fire(type: string, data?: unknown) {
      // As a browser does: a cue's id (its index and the relay's name) as lastEventId.
      const index = (data as { index?: number } | undefined)?.index;
      this.handlers.get(type)?.({
        data: data === undefined ? undefined : JSON.stringify(data),
        lastEventId: index === undefined ? '' : `${index}@relay1`,
      });
    }
  }
  const element = () => ({
    textContent: '',
    append(...nodes: { textContent: string }[]) {
      this.textContent += nodes.map((n) => n.textContent).join('');
    },
  });
  const elements = { cue: element(), partial: element() };
  let now = 0;
  let nextId = 1;
  const timers = new Map<number, { at: number; fn: () => void }>();
  /** What the cue line showed, from when (virtual ms). */
  const shown: { at: number; text: string }[] = [];
  const record = () => {
    if (elements.cue.textContent !== (shown.at(-1)?.text ?? ''))
      shown.push({ at: now, text: elements.cue.textContent });
  };
  const clock = {
    get now() {
      return now;
    },
    pending: () => timers.size,
    /** Run the timers due within `ms`, in time order, recording the cue line after each. */
    advance(ms: number) {
      const until = now + ms;
      for (;;) {
        let due: [number, { at: number; fn: () => void }] | undefined;
        for (const entry of timers)
          if (entry[1].at <= until && (!due || entry[1].at < due[1].at)) due = entry;
        if (!due) break;
        timers.delete(due[0]);
        now = Math.max(now, due[1].at);
        due[1].fn();
        record();
      }
      now = until;
    },
  };
  new Function('document', 'EventSource', 'setTimeout', 'clearTimeout', 'performance', script)(
    {
      getElementById: (id: 'cue' | 'partial') => elements[id],
      createElement: element,
      createTextNode: (textContent: string) => ({ textContent }),
    },
    FakeEventSource,
    (fn: () => void, ms = 0) => {
      timers.set(nextId, { at: now + Math.max(0, ms), fn });
      return nextId++;
    },
    (id: number | undefined) => {
      if (id !== undefined) timers.delete(id);
    },
    { now: () => now },
  );
  const fire = (type: string, data?: unknown) => {
    FakeEventSource.made.at(-1)!.fire(type, data);
    record();
  };
  return { FakeEventSource, elements, clock, shown, fire };
}

const cue = (index: number, text: string, startMs: number, endMs: number) => ({
  index,
  startMs,
  endMs,
  lines: [text],
  speaker: null,
});

test('the overlay queues a burst of cues: each on screen for its reading time, in order', async () => {
  const { clock, shown, fire } = await fakeOverlay();
  // One utterance committed as three cues, at once (the relay sends them within milliseconds).
  fire('cue', cue(1, 'Good evening.', 0, 1200));
  fire('cue', cue(2, 'Here is the news at nine from the studio.', 1200, 3600));
  fire('cue', cue(3, 'Rain.', 3600, 4000));
  clock.advance(20_000);
  assert.deepEqual(
    shown.map((s) => s.text),
    ['Good evening.', 'Here is the news at nine from the studio.', 'Rain.', ''],
    'every cue shown, in order, then cleared',
  );
  const held = shown.slice(1).map((s, i) => s.at - shown[i]!.at);
  // Behind others, a cue gets its reading time: max(1 s, chars / 17).
  assert.equal(held[0], 1000);
  assert.equal(held[1], (41 * 1000) / 17);
  // The last, alone: its own duration at least (400 ms here, so 1 s), then it lingers 1.5 s.
  assert.equal(held[2], 1000 + 1500);
});

test('the overlay: a cue alone stays its own duration; a backlog catches up, down to 1 s a cue', async () => {
  const { clock, shown, fire } = await fakeOverlay();
  fire('cue', cue(1, 'A long sentence spoken slowly.', 0, 5000));
  clock.advance(1200);
  // Ten cues arrive while the first is up: the first gives way at once (it has been read),
  // and the backlog goes by at 1 s a cue until two are left, then at reading time.
  const texts = Array.from({ length: 10 }, (_, i) => `Cue number ${i + 2} with some words.`);
  for (const [i, t] of texts.entries()) fire('cue', cue(i + 2, t, 5000 + i * 2000, 7000 + i * 2000));
  assert.equal(shown.at(-1)!.text, 'A long sentence spoken slowly.');
  clock.advance(0);
  assert.equal(shown.at(-1)!.text, texts[0], 'the cue on screen was shortened to its reading time');
  clock.advance(60_000);
  const seen = shown.map((s) => s.text).filter((t) => t !== '');
  assert.deepEqual(seen, ['A long sentence spoken slowly.', ...texts]);
  const starts = shown.filter((s) => s.text !== '').map((s) => s.at);
  const held = starts.slice(1).map((at, i) => at - starts[i]!);
  assert.ok(
    held.every((ms) => ms >= 1000),
    `each cue at least 1 s: ${held}`,
  );
  // Natural timing would take 10 × 2 s for the backlog; it went by in well under that.
  const backlogMs = starts.at(-1)! - starts[1]!;
  assert.ok(backlogMs < 15_000, `backlog shown in ${backlogMs} ms`);
  assert.equal(held[1], 1000, 'deep in the backlog, a cue gets the minimum');
});

test('a burst far past 12 waiting: every cue shown, in order, joined on fewer screens, none dropped', async () => {
  const { clock, shown, fire } = await fakeOverlay();
  for (let i = 1; i <= 40; i++) fire('cue', cue(i, `Cue ${i}.`, i * 1000, i * 1000 + 900));
  clock.advance(120_000);
  const screens = shown.filter((s) => s.text !== '');
  // Every cue on screen, each once, in order: the screens' lines are the cues.
  assert.deepEqual(
    screens.flatMap((s) => s.text.split('\n')),
    Array.from({ length: 40 }, (_, i) => `Cue ${i + 1}.`),
  );
  // Joined while far behind (at most 3 a screen), alone again once 12 or fewer wait.
  const sizes = screens.map((s) => s.text.split('\n').length);
  assert.ok(
    sizes.every((n) => n >= 1 && n <= 3),
    `cues per screen: ${sizes}`,
  );
  assert.ok(
    sizes.some((n) => n > 1),
    `joined to catch up: ${sizes}`,
  );
  assert.deepEqual(sizes.slice(-12), Array(12).fill(1), 'the last 12 alone');
  const starts = screens.map((s) => s.at);
  const held = starts.slice(1).map((at, i) => at - starts[i]!);
  assert.ok(
    held.every((ms) => ms >= 1000),
    `each screen at least 1 s: ${held}`,
  );
  // One cue a second would take 40 s; joining catches up faster.
  assert.ok(starts.at(-1)! - starts[0]! < 30_000, `the burst took ${starts.at(-1)! - starts[0]!} ms`);
  assert.equal(clock.pending(), 0, 'nothing left scheduled once the queue is empty');
});

test('joined cues keep their speakers: a label where the speaker changes', async () => {
  const { clock, shown, fire } = await fakeOverlay();
  const speakers = ['SPEAKER_00', 'SPEAKER_00', 'SPEAKER_01'];
  for (let i = 1; i <= 30; i++)
    fire('cue', { ...cue(i, `Cue ${i}.`, i * 1000, i * 1000 + 900), speaker: speakers[i % 3] });
  clock.advance(120_000);
  const lines = shown.filter((s) => s.text !== '').flatMap((s) => s.text.split('\n'));
  assert.equal(lines.length, 30);
  // Within a screen a line says its speaker only when it differs from the line before.
  const joined = shown.find((s) => s.text.includes('\n'))!.text.split('\n');
  assert.match(joined[0]!, /^SPEAKER_0[01]: Cue \d+\.$/);
  for (const [i, line] of joined.entries()) {
    if (i === 0) continue;
    const n = Number(/Cue (\d+)/.exec(line)![1]);
    const changed = speakers[n % 3] !== speakers[(n - 1) % 3];
    assert.equal(line.startsWith(`${speakers[n % 3]}: `), changed, line);
  }
});

test('partials keep to the cue line limits (the tail) and show apart from cues', async () => {
  const relay = await captionRelay();
  try {
    let opened!: () => void;
    const open = new Promise<void>((resolve) => (opened = resolve));
    const reading = readEvents(`${relay.url}/events`, (e) => e.some((x) => x.event === 'end'), opened);
    await open;
    const long = Array.from({ length: 35 }, (_, i) => `word${i + 1}`).join(' ');
    relay.write({ type: 'partial', id: 'a', text: long, words: [] });
    relay.end();
    const [partial] = await reading;
    const data = partial!.data as { text: string; lines: string[] };
    assert.equal(data.text, long);
    assert.equal(data.lines.length, 2);
    assert.ok(
      data.lines.every((l) => l.length <= 42),
      JSON.stringify(data.lines),
    );
    assert.match(data.lines[1]!, /word35$/, 'the tail: the latest words');
    assert.equal(
      long.endsWith(data.lines.join(' ')),
      true,
      'the lines are the end of the text, none skipped',
    );
    const html = await (await fetch(`${relay.url}/`)).text();
    assert.match(html, /<p id="partial" class="partial"[ >]/);
    const css = await (await fetch(`${relay.url}/overlay.css`)).text();
    assert.match(css, /\.partial \{[^}]*font-style: italic/);
  } finally {
    await relay.close();
  }
});

test('the overlay page reconnects after a refusal and after the end, ever less often, to pick up a restarted relay', async () => {
  const { FakeEventSource, elements, clock, fire } = await fakeOverlay();
  const [first] = FakeEventSource.made;
  assert.equal(first!.url, '/events');
  fire('partial', { text: 'hello there', lines: ['hello there'] });
  assert.equal(elements.partial.textContent, 'hello there');
  fire('cue', cue(7, 'Seen.', 0, 1000));
  /** Virtual ms until the page opens its next EventSource (at most `within`). */
  const untilReconnect = (within: number) => {
    const made = FakeEventSource.made.length;
    const from = clock.now;
    for (let ms = 0; ms <= within; ms += 10) {
      if (FakeEventSource.made.length > made) return clock.now - from;
      clock.advance(10);
    }
    return Infinity;
  };
  // Refused (a 503 closes an EventSource for good): a new one is opened within a second, saying
  // which cue the page saw last (a new EventSource would not send Last-Event-ID).
  first!.readyState = FakeEventSource.CLOSED;
  fire('error');
  fire('error');
  assert.ok(untilReconnect(1000) <= 1000);
  assert.equal(FakeEventSource.made.length, 2, 'one reconnection for two errors');
  const second = FakeEventSource.made[1]!;
  assert.equal(second.url, `/events?lastEventId=${encodeURIComponent('7@relay1')}`);
  // A dropped connection the browser retries by itself: nothing to do.
  second.readyState = 0;
  fire('error');
  assert.equal(untilReconnect(30_000), Infinity);
  // The captions ended: the page still comes back (a relay restarted on the same address is
  // picked up), ever less often while nothing new comes: 2 s, 4 s, 8 s, then every 15 s at most.
  const gaps: number[] = [];
  for (let i = 0; i < 6; i++) {
    fire('end', {});
    assert.equal(FakeEventSource.made.at(-1)!.readyState, FakeEventSource.CLOSED);
    gaps.push(untilReconnect(20_000));
  }
  const bounds = [2000, 4000, 8000, 15_000, 15_000, 15_000];
  assert.ok(
    gaps.every((g, i) => g <= bounds[i]! && g >= bounds[i]! / 2 - 10),
    `gaps ${gaps}`,
  );
  // Captions again (a new relay): the pace starts over.
  fire('cue', cue(1, 'From the new relay.', 0, 1000));
  fire('end', {});
  assert.ok(untilReconnect(1000) <= 1000);
});
