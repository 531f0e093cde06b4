// The archive run's display on a terminal: files, audio hours, speed, ETA and the files in
// flight, redrawn in place (log-update), with names printed escaped.

import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { ArchiveProgress, countsText } from '../src/cli/archive-progress.ts';
import type { AudioFile } from '../src/sources/files.ts';

function terminal(): {
  stream: Writable & { isTTY: boolean; columns: number; rows: number };
  text: () => string;
} {
  const chunks: string[] = [];
  const stream = Object.assign(
    new Writable({
      write(chunk, _encoding, callback) {
        chunks.push(String(chunk));
        callback();
      },
    }),
    { isTTY: true, columns: 120, rows: 40 },
  );
  return { stream, text: () => chunks.join('') };
}

const file = (relative: string): AudioFile => ({ path: `/a/${relative}`, relative, size: 1, mtimeMs: 1 });

test('the terminal display shows counts, audio hours, speed, ETA and the files in flight', () => {
  const { stream, text } = terminal();
  const progress = new ArchiveProgress('tty', stream);
  const a = file('one.wav');
  const b = file('two\u001b[31m.wav');
  progress.event({ type: 'queued', file: a });
  progress.event({ type: 'queued', file: b });
  progress.event({ type: 'probed', file: a, durationSec: 1800 });
  progress.event({ type: 'probed', file: b, durationSec: 1800 });
  progress.event({ type: 'started', file: a, attempt: 0 });
  progress.event({ type: 'started', file: b, attempt: 0 });
  progress.event({ type: 'done', file: a, outputs: [], words: 10, audioSeconds: 1800, elapsedMs: 5 });
  progress.event({ type: 'failed', file: b, error: { code: 'ERR_X', message: 'bad' } });
  progress.close();
  const out = text();
  assert.match(out, /2\/2 files · 1 done · 1 failed · 0 skipped/);
  assert.match(out, /audio 0\.50\/1\.00 h · [\d.]+× real time · ETA \S+/);
  assert.match(out, /done {4}one\.wav \(10 words/);
  assert.match(out, /failed {2}two\\x1b\[31m\.wav: ERR_X: bad/);
  assert.ok(!out.includes('two\u001b[31m'), 'a terminal escape in a name is never written raw');
});

test('the files in flight are listed while they run', () => {
  const { stream, text } = terminal();
  const progress = new ArchiveProgress('tty', stream);
  progress.event({ type: 'queued', file: file('long.wav') });
  progress.event({ type: 'started', file: file('long.wav'), attempt: 0 });
  progress.log('a line above the display');
  progress.close();
  assert.match(text(), /▸ long\.wav/);
  assert.match(text(), /a line above the display/);
});

test('plain lines tell a queue nobody serves from a service that does not answer', () => {
  const { stream, text } = terminal();
  stream.isTTY = false;
  const progress = new ArchiveProgress('plain', stream);
  progress.event({
    type: 'paused',
    reason: { code: 'NO_WORKER', message: '2 job(s) waiting and no worker' },
  });
  progress.event({ type: 'resumed', pausedMs: 3000 });
  progress.event({ type: 'paused', reason: { code: 'ERR_SERVICE_UNREACHABLE', message: 'ECONNREFUSED' } });
  progress.event({ type: 'resumed', pausedMs: 2000 });
  progress.close();
  const lines = text().split('\n');
  assert.ok(lines.includes('waiting: 2 job(s) waiting and no worker'), text());
  assert.match(text(), /resumed: a worker serves the queue \(after 3(\.0)? ?s\)/);
  assert.match(text(), /paused: the service does not answer \(ECONNREFUSED\); waiting for it/);
  assert.match(text(), /resumed: the service answers again \(after 2(\.0)? ?s\)/);
});

test("a done line says the audio's length and how long the input took, each named", () => {
  const { stream, text } = terminal();
  stream.isTTY = false;
  const progress = new ArchiveProgress('plain', stream);
  const live = file('en/jfk.wav');
  const fast = file('fast.wav');
  progress.event({ type: 'done', file: live, outputs: [], words: 20, audioSeconds: 11.04, elapsedMs: 730 });
  progress.event({ type: 'done', file: fast, outputs: [], words: 7, elapsedMs: 250 });
  progress.close();
  const lines = text().split('\n');
  assert.ok(lines.includes('done    en/jfk.wav (20 words, 11.0 s of audio, took 0.7 s)'), text());
  assert.ok(lines.includes('done    fast.wav (7 words, took 0.3 s)'), 'no length when the mode reports none');
});

test('inputs done in an earlier run are counted as already done, not as skipped', () => {
  const { stream, text } = terminal();
  const progress = new ArchiveProgress('tty', stream);
  const done = file('done.wav');
  const hidden = file('.hidden.wav');
  progress.event({ type: 'queued', file: done });
  progress.event({ type: 'queued', file: hidden });
  progress.event({
    type: 'skipped',
    file: done,
    reason: { code: 'ALREADY_DONE', message: 'done in an earlier run, unchanged' },
  });
  progress.event({ type: 'skipped', file: hidden, reason: { code: 'ERR_HIDDEN', message: 'hidden' } });
  progress.close();
  assert.match(text(), /2\/2 files · 0 done · 0 failed · 1 skipped · 1 already done/);
  assert.deepEqual(progress.counts(), { total: 2, done: 0, failed: 0, skipped: 1, alreadyDone: 1 });
});

test('the counts in words: already done when there are any, and what is left when asked', () => {
  const counts = { total: 10, done: 3, failed: 1, skipped: 0, alreadyDone: 0 };
  assert.equal(countsText(counts), '3 done, 1 failed, 0 skipped');
  assert.equal(countsText(counts, { left: true }), '3 done, 1 failed, 0 skipped, 6 left');
  assert.equal(
    countsText({ ...counts, skipped: 1, alreadyDone: 4 }, { left: true }),
    '3 done, 1 failed, 1 skipped, 4 already done, 1 left',
  );
});
