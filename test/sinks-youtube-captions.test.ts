// youtubeCaptions() and `caption --youtube` against a local receiver that checks every POST
// against YouTube's documented caption format and seq rules, with failures injected (error
// statuses, answers that never come, connections reset before and after the captions were taken):
// no caption is repeated, reordered or lost, and the URL's key is never shown.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { inspect } from 'node:util';
import {
  redactCaptionUrl,
  type YoutubeCaptions,
  youtubeCaptions,
  youtubeTime,
} from '../src/sinks/youtube-captions.ts';
import type { UtteranceEvent } from '../src/transforms/assemble-transcript.ts';
import { type CaptionReceiver, type Fault, startCaptionReceiver } from './helpers/caption-receiver.ts';
import { runCli } from './helpers/cli.ts';
import { speechWav } from './helpers/speech.ts';
import { collectDeliveries, utterance, vttWords } from './helpers/utterances.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-youtube-'));
after(() => rm(root, { recursive: true, force: true }));

/** `n` sentences, 4 s apart: one cue each. */
const sentences = (n: number, from = 0) =>
  Array.from({ length: n }, (_, k) => utterance(`Caption number ${from + k} is here.`, (from + k) * 4));

async function run(sink: YoutubeCaptions, events: UtteranceEvent[]): Promise<void> {
  for (const e of events) assert.ok(sink.write(e) || sink.writableLength > 0);
  sink.end();
  await once(sink, 'finish');
}

async function withReceiver(
  fault: ((seq: number, attempt: number) => Fault | undefined) | undefined,
  body: (receiver: CaptionReceiver) => Promise<void>,
): Promise<void> {
  const receiver = await startCaptionReceiver(fault);
  try {
    await body(receiver);
  } finally {
    await receiver.close();
  }
}

test('the documented format: time and text lines, <br> between lines, seq counting posts, times from the speech', async () => {
  await withReceiver(undefined, async (receiver) => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const timersBefore = timers();
    const origin = Date.now() - 60_000;
    const sink = youtubeCaptions({ url: receiver.url, timeOrigin: origin });
    const { delivered } = collectDeliveries(sink);
    const events = [
      utterance('Good evening and welcome to the late news from the river city tonight.', 0, 'SPEAKER_00'),
      utterance('Thank you.', 5, 'SPEAKER_01'),
    ];
    sink.write(events[0]);
    while (delivered.length === 0) await once(sink, 'delivered');
    await run(sink, [events[1]!]);
    assert.deepEqual(receiver.violations, []);
    assert.deepEqual(
      receiver.captions.map((c) => c.text),
      ['Good evening and welcome to the late news<br>from the river city tonight.', '>> Thank you.'],
    );
    assert.deepEqual(
      receiver.captions.map((c) => c.time),
      [youtubeTime(origin), youtubeTime(origin + 5000)],
      'each stamped with when its first word was said',
    );
    assert.deepEqual(
      receiver.attempts.map((a) => a.seq),
      [1, 2],
    );
    const stats = sink.stats();
    assert.equal(stats.delivered, 2);
    assert.equal(stats.posts, 2);
    assert.deepEqual(stats.words, { made: 15, delivered: 15 });
    assert.equal(delivered[0]!.end, 12 * 0.3 + 0.25, 'a cue ends with its last word');
    assert.equal(timers(), timersBefore, 'ended, it leaves no timer behind (the end would hold the process)');
  });
});

test('failures of every kind: each post retried unchanged, nothing repeated, reordered or lost', async () => {
  // Per seq, the faults of its first attempts; the next attempt is taken.
  const plan: Record<number, Fault[]> = {
    1: [{ status: 503 }, { status: 500 }],
    2: ['hang'],
    3: ['reset-before'],
    4: ['reset-after'],
    5: [{ takeThenStatus: 502 }],
    6: [{ status: 429, retryAfter: '0' }, 'hang', { status: 504 }],
  };
  await withReceiver(
    (seq, attempt) => plan[seq]?.[attempt - 1],
    async (receiver) => {
      // At most 5 cues a post: the 30 captions make 7 posts.
      const sink = youtubeCaptions({
        url: receiver.url,
        timeoutMs: 300,
        retry: { baseMs: 20, maxMs: 100 },
        maxCuesPerPost: 5,
      });
      const { warnings } = collectDeliveries(sink);
      const events = sentences(30);
      // Writes never wait for YouTube: every one is taken at once, posts still failing.
      for (const e of events) sink.write(e);
      assert.equal(sink.writableLength, 0);
      assert.ok(receiver.captions.length < events.length);
      sink.end();
      await once(sink, 'finish');
      assert.deepEqual(receiver.violations, []);
      assert.deepEqual(
        receiver.captions.map((c) => c.text),
        events.map((e) => e.text),
        'every caption once, in order',
      );
      const seqs = receiver.captions.map((c) => c.seq);
      assert.deepEqual(
        seqs,
        [...seqs].sort((a, b) => a - b),
      );
      const stats = sink.stats();
      assert.equal(stats.delivered, 30);
      assert.equal(stats.retries, 9);
      assert.equal(stats.posts, 7);
      assert.deepEqual(stats.undelivered, { 'not-streaming': 0, refused: 0, overflow: 0, unsent: 0 });
      assert.deepEqual(
        warnings.map((w) => w.code),
        Array(warnings.length).fill('ERR_YOUTUBE_RETRYING'),
      );
      for (const w of warnings) assert.ok(!inspect(w).includes(receiver.cid), inspect(w));
    },
  );
});

test('a refused URL (4xx): said once, the refused captions counted, the next ones still tried; the key never shown', async () => {
  let refusing = true;
  await withReceiver(
    () => (refusing ? { status: 403 } : undefined),
    async (receiver) => {
      const sink = youtubeCaptions({ url: receiver.url });
      const { warnings } = collectDeliveries(sink);
      for (const e of sentences(3)) sink.write(e);
      while (sink.stats().undelivered.refused < 3) await new Promise((r) => setTimeout(r, 10));
      refusing = false;
      await run(sink, sentences(2, 3));
      assert.deepEqual(
        warnings.map((w) => w.code),
        ['ERR_YOUTUBE_REFUSED'],
      );
      assert.match(warnings[0]!.message, /HTTP 403/);
      assert.match(warnings[0]!.message, /\/closedcaption\?\[redacted\]/);
      assert.ok(!inspect(warnings).includes(receiver.cid));
      assert.deepEqual(
        receiver.captions.map((c) => c.text),
        ['Caption number 3 is here.', 'Caption number 4 is here.'],
      );
      assert.deepEqual(receiver.violations, []);
      const stats = sink.stats();
      assert.equal(stats.undelivered.refused, 3);
      assert.equal(stats.delivered, 2);
      assert.ok(!JSON.stringify(stats).includes(receiver.cid));
    },
  );
});

test('a queue past its bound drops the oldest, counted and said; the rest go in order once YouTube answers', async () => {
  let down = true;
  await withReceiver(
    () => (down ? { status: 503 } : undefined),
    async (receiver) => {
      const sink = youtubeCaptions({ url: receiver.url, maxQueuedCues: 4, retry: { baseMs: 20, maxMs: 50 } });
      const { warnings } = collectDeliveries(sink);
      for (const e of sentences(10)) sink.write(e);
      // One post in flight (caption 0), 4 waiting (6 to 9): 1 to 5 went over the bound.
      assert.equal(sink.stats().undelivered.overflow, 5);
      down = false;
      sink.end();
      await once(sink, 'finish');
      assert.deepEqual(
        receiver.captions.map((c) => c.text),
        [0, 6, 7, 8, 9].map((n) => `Caption number ${n} is here.`),
      );
      assert.ok(warnings.some((w) => w.code === 'ERR_CAPTIONS_UNDELIVERED'));
      const stats = sink.stats();
      assert.equal(stats.made, stats.delivered + stats.undelivered.overflow);
    },
  );
});

test('at the end, captions a dead URL cannot take are counted unsent after endTimeoutMs; destroy releases all', async () => {
  await withReceiver(
    () => 'hang',
    async (receiver) => {
      const sink = youtubeCaptions({ url: receiver.url, endTimeoutMs: 300, timeoutMs: 5000 });
      await run(sink, sentences(3));
      const stats = sink.stats();
      assert.equal(stats.undelivered.unsent, 3);
      assert.equal(stats.pending, 0);
      // Another, destroyed with a post in flight.
      const cut = youtubeCaptions({ url: receiver.url });
      cut.write(sentences(1)[0]);
      cut.destroy();
      await once(cut, 'close');
      assert.equal(cut.stats().undelivered.unsent, 1);
    },
  );
});

test('redaction: the caption URL shown without its query', () => {
  assert.equal(
    redactCaptionUrl('http://upload.youtube.com/closedcaption?cid=abcd-efgh-ijkl'),
    'http://upload.youtube.com/closedcaption?[redacted]',
  );
  assert.throws(
    () => youtubeCaptions({ url: 'ftp://x/closedcaption?cid=k3y' }),
    (err: Error) => {
      assert.equal((err as { code?: string }).code, 'ERR_INVALID_ARGUMENT');
      assert.ok(!err.message.includes('k3y'));
      return true;
    },
  );
});

test('caption --youtube: the receiver gets the words of the captions file; a refused URL is said once; the key never shown', async () => {
  const wav = join(root, 'news.wav');
  await writeFile(
    wav,
    await speechWav('Good evening. Here is the news at nine. That is all.', { pauseMs: 500 }),
  );
  await withReceiver(undefined, async (receiver) => {
    const out = join(root, 'news.vtt');
    const run = await runCli(['caption', wav, '--port', '0', '--out', out, '--youtube', receiver.url]);
    assert.equal(run.code, 0, run.stderr);
    assert.ok(!run.stderr.includes(receiver.cid) && !run.stdout.includes(receiver.cid));
    assert.deepEqual(receiver.violations, []);
    const words = await vttWords(out);
    assert.ok(words.length > 0);
    assert.deepEqual(
      receiver.captions
        .map((c) => c.text.replace(/<br>/g, ' '))
        .join(' ')
        .split(/\s+/),
      words,
    );
    assert.match(
      run.stderr,
      new RegExp(`YouTube: ${receiver.captions.length} of ${receiver.captions.length} cues delivered`),
    );
  });
  await withReceiver(
    () => ({ status: 404 }),
    async (receiver) => {
      const run = await runCli(['caption', wav, '--port', '0', '--youtube', receiver.url]);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stderr.match(/YouTube refused/g)?.length, 1, run.stderr);
      assert.match(run.stderr, /YouTube: 0 of (\d+) cues delivered \(not delivered: \1 refused\)/);
      assert.ok(!run.stderr.includes(receiver.cid));
    },
  );
  const bad = await runCli(['caption', wav, '--youtube', 'upload.youtube.com/closedcaption?cid=s3cr3t']);
  assert.equal(bad.code, 2);
  assert.ok(!bad.stderr.includes('s3cr3t'));
});

test('caption --youtube-file: the URL read from a file (never on the command line); a bad file is bad usage and never shown', async () => {
  const wav = join(root, 'file-url.wav');
  await writeFile(wav, await speechWav('Good evening. Here is the news.', { pauseMs: 400 }));
  await withReceiver(undefined, async (receiver) => {
    const urlFile = join(root, 'youtube-url.txt');
    await writeFile(urlFile, `${receiver.url}\nsecond line ignored\n`);
    const run = await runCli(['caption', wav, '--port', '0', '--youtube-file', urlFile]);
    assert.equal(run.code, 0, run.stderr);
    assert.ok(receiver.captions.length > 0, run.stderr);
    assert.deepEqual(receiver.violations, []);
    assert.ok(!run.stderr.includes(receiver.cid) && !run.stdout.includes(receiver.cid));
    const both = await runCli(['caption', wav, '--youtube', receiver.url, '--youtube-file', urlFile]);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--youtube or --youtube-file/);
    assert.ok(!both.stderr.includes(receiver.cid));
  });
  const notUrl = join(root, 'not-a-url.txt');
  await writeFile(notUrl, 'upload.youtube.com/closedcaption?cid=s3cr3t\n');
  const bad = await runCli(['caption', wav, '--youtube-file', notUrl]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--youtube-file must hold/);
  assert.ok(!bad.stderr.includes('s3cr3t'));
  const missing = await runCli(['caption', wav, '--youtube-file', join(root, 'no-such-file')]);
  assert.equal(missing.code, 2);
  assert.match(missing.stderr, /cannot read --youtube-file: ENOENT/);
});
