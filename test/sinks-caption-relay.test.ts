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
    assert.deepEqual(events[0]!.data, { text: 'Good evening and' });
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
    assert.match(script, /new EventSource\('\/events'\)/);
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

test('the overlay page reconnects after a refusal, and not once the captions ended', async () => {
  const relay = await captionRelay();
  let script: string;
  try {
    script = await (await fetch(`${relay.url}/overlay.js`)).text();
  } finally {
    await relay.close();
  }
  // The page's script against stand-ins for the DOM, EventSource and timers.
  class FakeEventSource {
    static CLOSED = 2;
    static made: FakeEventSource[] = [];
    readyState = 1;
    readonly handlers = new Map<string, (e: { data?: string }) => void>();
    readonly url: string;
    constructor(url: string) {
      this.url = url;
      FakeEventSource.made.push(this);
    }
    addEventListener(type: string, fn: (e: { data?: string }) => void) {
      this.handlers.set(type, fn);
    }
    close() {
      this.readyState = 2;
    }
    fire(type: string, data?: string) {
      this.handlers.get(type)?.({ data });
    }
  }
  const element = () => ({ textContent: '', append() {} });
  const elements = { cue: element(), partial: element() };
  const timers: Array<() => void> = [];
  new Function('document', 'EventSource', 'setTimeout', 'clearTimeout', script)(
    {
      getElementById: (id: 'cue' | 'partial') => elements[id],
      createElement: element,
      createTextNode: () => ({}),
    },
    FakeEventSource,
    (fn: () => void) => timers.push(fn),
    () => {},
  );
  const [first] = FakeEventSource.made;
  assert.equal(first!.url, '/events');
  first!.fire('partial', JSON.stringify({ text: 'hello' }));
  assert.equal(elements.partial.textContent, 'hello');
  // Refused (a 503 closes an EventSource for good): a new one is opened later.
  first!.readyState = FakeEventSource.CLOSED;
  first!.fire('error');
  assert.equal(timers.length, 1);
  timers.shift()!();
  const second = FakeEventSource.made[1]!;
  // A dropped connection the browser retries by itself: nothing to do.
  second.readyState = 0;
  second.fire('error');
  assert.equal(timers.length, 0);
  // The captions ended: no reconnecting.
  second.fire('end', '{}');
  second.fire('error');
  assert.equal(timers.length, 0);
  assert.equal(FakeEventSource.made.length, 2);
});
