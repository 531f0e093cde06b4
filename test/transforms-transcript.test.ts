// assembleTranscript(): partial, utterance and final events from ASR records, and the rule that
// keeps a word from being committed twice when a session restarts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { IncompleteStreamError, ProtocolError } from '../src/protocol/errors.ts';
import type { AsrRecord, WordSegment } from '../src/protocol/records.ts';
import {
  assembleTranscript,
  TranscriptAssembler,
  type TranscriptEvent,
  type UtteranceEvent,
} from '../src/transforms/assemble-transcript.ts';
import { collectObjects } from './helpers/collect.ts';

const A = '6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';
const B = '7f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';

const w = (word: string, start: number, end: number): WordSegment => ({
  word,
  start_time: start,
  end_time: end,
});

function rec(id: string, words: WordSegment[], flags: { speech?: boolean; final?: boolean } = {}): AsrRecord {
  return {
    id,
    seq: 0,
    transcription: words.map((x) => x.word).join(' '),
    words,
    is_speech_final: flags.speech ?? false,
    is_final: flags.final ?? false,
  };
}

function events(records: unknown[]): Promise<TranscriptEvent[]> {
  return collectObjects<TranscriptEvent>(records, assembleTranscript());
}

test('partials replace each other, is_speech_final commits, is_final carries the whole transcript', async () => {
  const out = await events([
    rec(A, [w('ask', 0.1, 0.3)]),
    rec(A, [w('ask', 0.1, 0.3), w('not', 0.35, 0.5)]),
    rec(A, [w('ask', 0.1, 0.3), w('not', 0.35, 0.5)], { speech: true }),
    rec(A, [w('what', 0.9, 1.1)]),
    rec(A, [w('what', 0.9, 1.1), w('your', 1.15, 1.3)], { speech: true }),
    rec(A, [], { final: true }),
  ]);
  assert.deepEqual(
    out.map((e) => [e.type, e.text]),
    [
      ['partial', 'ask'],
      ['partial', 'ask not'],
      ['utterance', 'ask not'],
      ['partial', 'what'],
      ['utterance', 'what your'],
      ['final', 'ask not what your'],
    ],
  );
  const second = out[4] as UtteranceEvent;
  assert.deepEqual([second.index, second.start, second.end], [1, 0.9, 1.3]);
  const final = out[5]!;
  assert.equal(final.type === 'final' && final.utterances, 2);
  assert.equal(final.words.length, 4);
});

test('a final record with words commits them (nothing can replace them after it)', async () => {
  const out = await events([rec(A, [w('done', 0, 0.4)], { final: true })]);
  assert.deepEqual(
    out.map((e) => e.type),
    ['utterance', 'final'],
  );
  assert.equal(out[1]!.text, 'done');
});

test('session restart: words the new session hears again are not committed twice', async () => {
  const out = await events([
    rec(A, [w('one', 4.0, 4.4), w('two', 4.5, 5.2)], { speech: true }),
    // Session B (fresh UUID, times offset to keep increasing) re-hears the boundary.
    rec(B, [w('two', 4.55, 5.2), w('three', 5.3, 5.6)]),
    rec(B, [w('two', 4.55, 5.2), w('three', 5.3, 5.6), w('four', 5.7, 6.0)], { speech: true }),
    rec(B, [w('four', 5.75, 6.0), w('five', 6.1, 6.4)], { speech: true, final: true }),
  ]);
  const committed = out.flatMap((e) => (e.type === 'utterance' ? e.words.map((x) => x.word) : []));
  assert.deepEqual(committed, ['one', 'two', 'three', 'four', 'five']);
  const partial = out.find((e) => e.type === 'partial')!;
  assert.equal(partial.text, 'three', 'a partial never shows committed words again');
  assert.equal(out.at(-1)!.text, 'one two three four five');
});

test('the rule is the midpoint: a word straddling the last committed end counts as new only past it', () => {
  const a = new TranscriptAssembler();
  a.push(rec(A, [w('x', 1.0, 2.0)], { speech: true }));
  const [e] = a.push(rec(B, [w('tail', 1.6, 2.2), w('new', 1.8, 2.6)], { speech: true }));
  assert.deepEqual(
    e!.words.map((x) => x.word),
    ['new'],
  );
  assert.equal(a.committedUntil, 2.6);
});

test('property: however utterances are re-sent across restarts, each word is committed exactly once', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 1, maxLength: 12 }),
      fc.array(fc.nat({ max: 4 }), { minLength: 12, maxLength: 12 }),
      fc.array(fc.boolean(), { minLength: 12, maxLength: 12 }),
      (sizes, replays, partials) => {
        // Words every 0.5 s; utterance u holds sizes[u] words.
        const all: WordSegment[] = [];
        const utterances: WordSegment[][] = [];
        for (const n of sizes) {
          const words = Array.from({ length: n }, () =>
            w(`w${all.length}`, all.length * 0.5, all.length * 0.5 + 0.4),
          );
          for (let i = 0; i < n; i++) all.push(words[i]!);
          utterances.push(words);
        }
        const a = new TranscriptAssembler();
        const committed: string[] = [];
        let sent = 0;
        utterances.forEach((words, u) => {
          // A restart re-sends up to `replays[u]` already committed words, slightly re-timed.
          const replay = all
            .slice(Math.max(0, sent - replays[u]!), sent)
            .map((x) => w(x.word, x.start_time + 0.02, x.end_time));
          const id = u % 2 === 0 ? A : B;
          if (partials[u]) a.push(rec(id, [...replay, ...words.slice(0, 1)]));
          for (const e of a.push(rec(id, [...replay, ...words], { speech: true }))) {
            if (e.type === 'utterance') committed.push(...e.words.map((x) => x.word));
          }
          sent += words.length;
        });
        const [final] = a.push(rec(B, [], { final: true }));
        assert.deepEqual(
          committed,
          all.map((x) => x.word),
        );
        assert.equal(final!.type, 'final');
        assert.equal(final!.words.length, all.length);
      },
    ),
    { numRuns: 200 },
  );
});

test('no final record: IncompleteStreamError; invalid or late records: ProtocolError', async () => {
  await assert.rejects(events([rec(A, [w('a', 0, 1)], { speech: true })]), IncompleteStreamError);
  await assert.rejects(events([{ id: A, words: 'nope' }]), ProtocolError);
  await assert.rejects(events([rec(A, [], { final: true }), rec(A, [])]), ProtocolError);
});

test('an utterance of 150,000 words (hours without a speech boundary) is committed, not a stack overflow', async () => {
  const words = Array.from({ length: 150_000 }, (_, i) => w('la', i * 0.1, i * 0.1 + 0.08));
  const out = await events([rec(A, words, { final: true })]);
  const utterance = out[0] as UtteranceEvent;
  assert.equal(utterance.words.length, 150_000);
  assert.equal(utterance.end, words.at(-1)!.end_time);
});
