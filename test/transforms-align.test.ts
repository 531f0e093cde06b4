// alignSpeakers(): speakers for words by overlap, the V1 force-align rule for words outside every
// segment, and the live stream form that waits for the diarization timeline.

import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import fc from 'fast-check';
import type { WordSegment } from '../src/protocol/records.ts';
import { UNKNOWN_SPEAKER } from '../src/protocol/speaker-rule.ts';
import {
  alignSpeakers,
  alignSpeakersStream,
  SpeakerTimeline,
  type SpeakerUtteranceEvent,
} from '../src/transforms/align-speakers.ts';
import type { UtteranceEvent } from '../src/transforms/assemble-transcript.ts';
import {
  type DiarizationEvent,
  DiarizationMerger,
  mergeDiarization,
  type SpeakerSegment,
} from '../src/transforms/merge-diarization.ts';
import { collectObjects } from './helpers/collect.ts';
import * as arb from './helpers/speaker-arbitraries.ts';
import { reference } from './helpers/speaker-reference.ts';

const w = (word: string, start: number, end: number): WordSegment => ({
  word,
  start_time: start,
  end_time: end,
});
const s = (speaker: string, start: number, end: number): SpeakerSegment => ({
  speaker,
  start_time: start,
  end_time: end,
});
const speakers = (words: WordSegment[], segs: SpeakerSegment[], options = {}) =>
  alignSpeakers(words, segs, options).map((x) => x.speaker);

test('by overlap: the speaker covering most of the word', () => {
  const segs = [s('A', 0, 1.0), s('B', 1.0, 2.0)];
  assert.deepEqual(speakers([w('x', 0.2, 0.8), w('y', 0.9, 1.3), w('z', 0.7, 1.1)], segs), ['A', 'B', 'A']);
  // Overlap adds up per speaker.
  assert.deepEqual(speakers([w('q', 0, 3)], [s('A', 0, 0.8), s('B', 0.8, 1.5), s('A', 1.5, 2.4)]), ['A']);
});

test('V1 force-align: outside every segment, the nearest boundary from the midpoint; ties to the earlier', () => {
  const segs = [s('A', 0, 1.0), s('B', 2.0, 3.0)];
  // Midpoint 1.3: 0.3 from A's end, 0.7 from B's start.
  assert.deepEqual(speakers([w('a', 1.2, 1.4)], segs), ['A']);
  // Midpoint 1.8: nearer B.
  assert.deepEqual(speakers([w('b', 1.7, 1.9)], segs), ['B']);
  // Midpoint 1.5: a tie goes to the earlier segment.
  assert.deepEqual(speakers([w('c', 1.4, 1.6)], segs), ['A']);
  // After the last segment.
  assert.deepEqual(speakers([w('d', 5, 6)], segs), ['B']);
  // Off: UNKNOWN_SPEAKER; inside a segment the speaker stays.
  assert.deepEqual(speakers([w('a', 1.2, 1.4), w('e', 0.1, 0.2)], segs, { forceAlign: false }), [
    UNKNOWN_SPEAKER,
    'A',
  ]);
});

test('no real segments: speaker null (zero-length segments do not count)', () => {
  assert.deepEqual(speakers([w('a', 0, 1)], []), [null]);
  assert.deepEqual(speakers([w('a', 0, 1)], [s('A', 0.5, 0.5)]), [null]);
});

test("mode 'v1': the segment holding the word's start wins, overlap aside", () => {
  const segs = [s('A', 0, 1.0), s('B', 1.0, 2.0)];
  assert.deepEqual(speakers([w('y', 0.95, 1.9)], segs), ['B']);
  assert.deepEqual(speakers([w('y', 0.95, 1.9)], segs, { mode: 'v1' }), ['A']);
});

const utterance = (index: number, words: WordSegment[]): UtteranceEvent => ({
  type: 'utterance',
  id: '5e1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f',
  index,
  text: words.map((x) => x.word).join(' '),
  words,
  start: words[0]!.start_time,
  end: words.at(-1)!.end_time,
});

test('stream form: an utterance waits until the timeline has closed past it, then gets final speakers', async () => {
  const timeline = new SpeakerTimeline();
  const stream = alignSpeakersStream({ timeline, maxLagSec: 30 });
  const out: SpeakerUtteranceEvent[] = [];
  stream.on('data', (e: SpeakerUtteranceEvent) => out.push(e));
  stream.write(utterance(0, [w('hello', 0.2, 0.6), w('there', 0.7, 1.2)]));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 0, 'no closed diarization yet');
  timeline.update({ type: 'active', segments: [s('S1', 0, 2)] });
  assert.equal(out.length, 0, 'provisional speakers are not used while within maxLag');
  timeline.update({ type: 'segment', segment: s('S0', 0, 0.65) });
  timeline.update({ type: 'segment', segment: s('S1', 0.65, 1.5) });
  assert.deepEqual(
    out[0]!.words.map((x) => x.speaker),
    ['S0', 'S1'],
  );
  // The transcript ends; the rest waits for the timeline to end, then is labelled.
  stream.end(utterance(1, [w('bye', 1.6, 2.0)]));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 1);
  timeline.update({
    type: 'timeline',
    segments: [s('S0', 0, 0.65), s('S1', 0.65, 1.5), s('S0', 1.5, 2.1)],
    provisional: [],
  });
  await new Promise((resolve) => stream.once('end', resolve));
  assert.deepEqual(
    out[1]!.words.map((x) => x.speaker),
    ['S0'],
  );
});

test('stream form: words running maxLagSec ahead of the timeline are labelled with the provisional tail', async () => {
  const timeline = new SpeakerTimeline();
  const stream = alignSpeakersStream({ timeline, maxLagSec: 5 });
  const out: SpeakerUtteranceEvent[] = [];
  stream.on('data', (e: SpeakerUtteranceEvent) => out.push(e));
  timeline.update({ type: 'active', segments: [s('S2', 0, 20)] });
  stream.write(utterance(0, [w('a', 1, 2)]));
  stream.write(utterance(1, [w('b', 3, 4)]));
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out.length, 0);
  stream.write(utterance(2, [w('c', 7, 8)]));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(
    out.map((e) => e.words[0]!.word),
    ['a'],
    'a waited until the transcript was more than 5 s past it; b has not yet',
  );
  assert.equal(out[0]!.words[0]!.speaker, 'S2');
  timeline.end();
  stream.end();
  await new Promise((resolve) => stream.once('end', resolve));
  assert.equal(out.length, 3);
});

test('stream form: a partial does not overtake an utterance still waiting for the timeline; only the latest waits', async () => {
  // The caption relay clears its partial line on each committed cue: a partial that overtook
  // the waiting utterance blanked the text after it, and hid the utterance's words meanwhile.
  const timeline = new SpeakerTimeline();
  const stream = alignSpeakersStream({ timeline, maxLagSec: 30 });
  const out: Array<{ type: string; text?: string }> = [];
  stream.on('data', (e: { type: string; text?: string }) => out.push(e));
  const partial = (text: string) => ({ type: 'partial' as const, id: 'x', text, words: [] });
  stream.write(partial('hello'));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(
    out.map((e) => e.type),
    ['partial'],
    'nothing waits: at once',
  );
  stream.write(utterance(0, [w('hello', 0.2, 0.6), w('there', 0.7, 1.2)]));
  stream.write(partial('how'));
  stream.write(partial('how are'));
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(
    out.map((e) => e.type),
    ['partial'],
    'the partials wait behind the utterance',
  );
  timeline.update({ type: 'segment', segment: s('S0', 0, 1.5) });
  assert.deepEqual(
    out.map((e) => (e.type === 'partial' ? e.text : e.type)),
    ['hello', 'utterance', 'how are'],
  );
  timeline.end();
  stream.end();
  await new Promise((resolve) => stream.once('end', resolve));
});

test('stream form: the timeline can be fed as a Writable of mergeDiarization events', async () => {
  const timeline = new SpeakerTimeline();
  const sink = timeline.writable();
  sink.write({ type: 'segment', segment: s('A', 0, 4) });
  sink.end();
  await new Promise((resolve) => sink.once('finish', resolve));
  assert.ok(timeline.ended);
  assert.deepEqual(
    timeline.segments().map((x) => x.speaker),
    ['A'],
  );
});

test('stream form: with mergeDiarization keepTimeline false, the closed segments survive the end', async () => {
  const ID = '5e1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';
  const records = [
    { id: ID, final_segments: [s('A', 0, 2)], active_segments: [s('B', 2, 3)], is_final: false },
    { id: ID, final_segments: [s('B', 2, 4)], active_segments: [], is_final: true },
  ];
  const timeline = new SpeakerTimeline();
  await pipeline(Readable.from(records), mergeDiarization({ keepTimeline: false }), timeline.writable());
  assert.ok(timeline.ended);
  const out = await collectObjects<SpeakerUtteranceEvent>(
    [utterance(0, [w('one', 0.5, 1)]), utterance(1, [w('two', 2.5, 3)])],
    alignSpeakersStream({ timeline, keepWords: false }),
  );
  assert.deepEqual(
    out.map((e) => e.words[0]!.speaker),
    ['A', 'B'],
  );
  assert.deepEqual(timeline.segments(), [s('A', 0, 2), s('B', 2, 4)]);
});

test('by overlap: equal overlaps in decimal seconds tie (to the earlier segment) despite float noise', () => {
  // 1.2 - 1.1 and 1.3 - 1.2 differ in binary floating point; in whole microseconds they are equal.
  assert.deepEqual(speakers([w('x', 1.1, 1.3)], [s('A', 0, 1.2), s('B', 1.2, 3)]), ['A']);
  assert.deepEqual(speakers([w('y', 0.7, 0.9)], [s('A', 0, 0.8), s('B', 0.8, 3)]), ['A']);
  // Summed per speaker: A 0.1 + 0.2 against B 0.3 is a tie, which goes to A, whose segment is
  // earlier (in floating point A's sum is 0.29999999999999993); a real difference still wins.
  assert.deepEqual(speakers([w('z', 0.1, 0.7)], [s('A', 0, 0.2), s('B', 0.2, 0.5), s('A', 0.5, 1)]), ['A']);
  assert.deepEqual(speakers([w('z', 0.1, 0.7)], [s('A', 0, 0.2), s('B', 0.2, 0.55), s('A', 0.55, 1)]), ['B']);
});

test('stream form: a long single-speaker stretch labels each utterance once diarization has closed past it', async () => {
  const ID = '5e1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';
  const merger = new DiarizationMerger();
  const timeline = new SpeakerTimeline();
  const stream = alignSpeakersStream({ timeline });
  const out: SpeakerUtteranceEvent[] = [];
  stream.on('data', (e: SpeakerUtteranceEvent) => out.push(e));
  // 20 s of speaker A, closed a second at a time: no other speaker ever closes a turn.
  for (let i = 0; i < 20; i++) {
    const record = {
      id: ID,
      final_segments: [{ speaker: 'A', start_time: i, end_time: i + 1 }],
      active_segments: [{ speaker: 'A', start_time: i + 1, end_time: i + 1.5 }],
      is_final: false,
    };
    for (const event of merger.push(record)) timeline.update(event);
    stream.write(utterance(i, [w(`w${i}`, i + 0.2, i + 0.8)]));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(out.length, i + 1, `utterance ${i} is labelled as soon as A is closed past it`);
    assert.equal(out[i]!.words[0]!.speaker, 'A');
  }
  for (const event of merger.push({ id: ID, final_segments: [], active_segments: [], is_final: true }))
    timeline.update(event);
  stream.end();
  await new Promise((resolve) => stream.once('end', resolve));
});

test('150,000 words in one utterance, and a timeline of 150,000 segments given at once: labelled, not a stack overflow', async () => {
  const n = 150_000;
  const many = new SpeakerTimeline();
  const segments = Array.from({ length: n }, (_, i) => s(i % 2 ? 'B' : 'A', i, i + 1));
  many.update({ type: 'timeline', segments, provisional: [] });
  assert.equal(many.segments().length, n);
  const words = Array.from({ length: n }, (_, i) => w('la', i * 0.2, i * 0.2 + 0.1));
  const timeline = new SpeakerTimeline();
  timeline.update({ type: 'timeline', segments: [s('A', 0, n * 0.2)], provisional: [] });
  const final = { type: 'final', id: 'x', text: '', words, utterances: 1 };
  const out = await collectObjects<SpeakerUtteranceEvent>(
    [utterance(0, words), final],
    alignSpeakersStream({ timeline }),
  );
  assert.equal(out.length, 2);
  assert.equal(out[0]!.words.length, n);
  assert.equal(out[1]!.words.length, n);
  assert.equal(out[0]!.words.at(-1)!.speaker, 'A');
});

test('alignSpeakers equals the scan of every segment: random words and overlapping, nested, zero-length segments, both modes, forceAlign on and off', () => {
  fc.assert(
    fc.property(
      arb.words,
      arb.segments,
      fc.constantFrom(undefined, 'overlap' as const, 'v1' as const),
      fc.constantFrom(undefined, true, false),
      (words, segments, mode, forceAlign) => {
        const options = { ...(mode ? { mode } : {}), ...(forceAlign === undefined ? {} : { forceAlign }) };
        assert.deepStrictEqual(
          alignSpeakers(words, segments, options),
          reference.alignSpeakers(words, segments, options),
        );
      },
    ),
    { numRuns: 1000 },
  );
});

test('alignSpeakers equals the scan for a long segment holding many short ones, and words between and beyond them', () => {
  const segments = [s('L', 0, 100)];
  for (let i = 0; i < 200; i++) segments.push(s(i % 2 ? 'A' : 'B', i * 0.5, i * 0.5 + 0.3));
  segments.push(s('C', 10, 10.2), s('C', 10, 10.2), s('A', 150, 160));
  const words = Array.from({ length: 800 }, (_, i) => w('x', i * 0.21, i * 0.21 + (i % 5) * 0.07));
  for (const mode of ['overlap', 'v1'] as const)
    for (const forceAlign of [true, false])
      assert.deepStrictEqual(
        alignSpeakers(words, segments, { mode, forceAlign }),
        reference.alignSpeakers(words, segments, { mode, forceAlign }),
      );
});

/** SpeakerTimeline's segments as it kept them before its index: every segment scanned at each label. */
class ReferenceTimeline {
  closed: SpeakerSegment[] = [];
  received = 0;
  tail: SpeakerSegment[] = [];
  update(event: DiarizationEvent): void {
    if (event.type === 'segment') {
      this.closed.push(event.segment);
      this.received++;
    } else if (event.type === 'active') this.tail = event.segments;
    else {
      for (let i = this.received; i < event.segments.length; i++) this.closed.push(event.segments[i]!);
      this.received = Math.max(this.received, event.segments.length);
      this.tail = event.provisional;
    }
  }
  prune(seconds: number): void {
    this.closed = this.closed.filter((s) => s.end_time >= seconds);
  }
  segments(): SpeakerSegment[] {
    return [...this.closed, ...this.tail];
  }
}

test('SpeakerTimeline labels as the scan of its segments through segments coming, tails replaced and prunes, in any order', () => {
  const one = arb.segments.map((segments) => segments[0] ?? s('A', 0, 1));
  const step = fc.oneof(
    { weight: 4, arbitrary: one.map((segment) => ({ type: 'segment' as const, segment })) },
    { weight: 2, arbitrary: arb.segments.map((segments) => ({ type: 'active' as const, segments })) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(arb.segments, arb.segments)
        .map(([segments, provisional]) => ({ type: 'timeline' as const, segments, provisional })),
    },
    { weight: 3, arbitrary: arb.time.map((seconds) => ({ type: 'prune' as const, seconds })) },
    {
      weight: 4,
      arbitrary: fc
        .tuple(arb.words, fc.constantFrom('overlap' as const, 'v1' as const), fc.boolean())
        .map(([words, mode, forceAlign]) => ({
          type: 'label' as const,
          words,
          options: { mode, forceAlign },
        })),
    },
  );
  fc.assert(
    fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
      const timeline = new SpeakerTimeline();
      const model = new ReferenceTimeline();
      for (const x of steps) {
        if (x.type === 'prune') {
          timeline.prune(x.seconds);
          model.prune(x.seconds);
        } else if (x.type === 'label') {
          assert.deepStrictEqual(
            timeline.label(x.words, x.options),
            reference.alignSpeakers(x.words, model.segments(), x.options),
          );
        } else {
          timeline.update(x);
          model.update(x);
        }
        assert.deepStrictEqual(timeline.segments(), model.segments());
      }
    }),
    { numRuns: 500 },
  );
});

test('SpeakerTimeline: a prune after labelling leaves out just the segments it prunes, with pruned ones not yet dropped', () => {
  const timeline = new SpeakerTimeline();
  for (const segment of [s('P', 0, 0.5), s('A', 1, 2), s('B', 2, 3), s('C', 3, 4)])
    timeline.update({ type: 'segment', segment });
  // P goes; three of four are left, so the timeline keeps P's place for now.
  timeline.prune(0.6);
  const words = [w('a', 1.2, 1.4), w('b', 2.2, 2.4), w('c', 3.2, 3.4)];
  assert.deepEqual(
    timeline.label(words, {}).map((x) => x.speaker),
    ['A', 'B', 'C'],
  );
  // A goes, from the index made before it: B and C stay.
  timeline.prune(2.5);
  assert.deepEqual(
    timeline.label(words, {}).map((x) => x.speaker),
    ['B', 'B', 'C'],
  );
  assert.deepEqual(
    timeline.segments().map((x) => x.speaker),
    ['B', 'C'],
  );
});

/** `count` segments whose times count their reads: the work of labelling, without timing it. */
function countedSegments(count: number) {
  const reads = { n: 0 };
  const segment = (speaker: string, start: number, end: number): SpeakerSegment => ({
    speaker,
    get start_time() {
      reads.n++;
      return start;
    },
    get end_time() {
      reads.n++;
      return end;
    },
  });
  const segments = Array.from({ length: count }, (_, i) =>
    segment(i % 2 ? 'A' : 'B', i, i + (i % 7 === 0 ? 0.5 : 1.2)),
  );
  // A long segment holding a stretch of short ones.
  segments.push(segment('L', 100, 1500));
  return { segments, reads };
}

test('alignSpeakers reads segment times O((words + segments) log segments) times, not words x segments (100,000 words x 10,000 segments took 6.6 s)', () => {
  const n = 2000;
  const words = Array.from({ length: 2 * n }, (_, i) => w('x', i * 0.5, i * 0.5 + 0.3));
  for (const mode of ['overlap', 'v1'] as const) {
    const { segments, reads } = countedSegments(n);
    alignSpeakers(words, segments, { mode });
    // The scan read 4 times a word per segment: 32 million here.
    assert.ok(reads.n < 4 * (words.length + n) * Math.log2(n), `${mode}: ${reads.n} reads`);
  }
});

test('alignSpeakersStream indexes a timeline known ahead once, not for every utterance', async () => {
  const n = 2000;
  const { segments, reads } = countedSegments(n);
  const timeline = new SpeakerTimeline();
  timeline.update({ type: 'timeline', segments, provisional: [] });
  const utterances = Array.from({ length: 1000 }, (_, u) =>
    utterance(
      u,
      Array.from({ length: 4 }, (_, k) => w('x', (4 * u + k) * 0.5, (4 * u + k) * 0.5 + 0.3)),
    ),
  );
  const out = await collectObjects<SpeakerUtteranceEvent>(
    utterances,
    alignSpeakersStream({ timeline, keepWords: false }),
  );
  assert.equal(out.length, utterances.length);
  // Sorting and scanning every segment for each utterance read them 14 million times.
  assert.ok(reads.n < 4 * (4 * utterances.length + n) * Math.log2(n), `${reads.n} reads`);
});
