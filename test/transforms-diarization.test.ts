// mergeDiarization(): closed segments emitted once and never changed, same-speaker neighbours
// merged, the provisional tail replaced, and the whole timeline at the end.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { IncompleteStreamError } from '../src/protocol/errors.ts';
import type { DiarizationRecord, LiveDiarizationSegment } from '../src/protocol/records.ts';
import { alignSpeakers } from '../src/transforms/align-speakers.ts';
import {
  type DiarizationEvent,
  DiarizationMerger,
  mergeDiarization,
  type SpeakerSegment,
} from '../src/transforms/merge-diarization.ts';
import { collectObjects } from './helpers/collect.ts';

const ID = '5e1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f';
const seg = (speaker: string, start: number, end?: number): LiveDiarizationSegment =>
  end === undefined ? { speaker, start_time: start } : { speaker, start_time: start, end_time: end };
const rec = (
  closed: LiveDiarizationSegment[],
  active: LiveDiarizationSegment[],
  final = false,
): DiarizationRecord => ({
  id: ID,
  final_segments: closed,
  active_segments: active,
  is_final: final,
});

function run(records: DiarizationRecord[], options = {}): Promise<DiarizationEvent[]> {
  return collectObjects<DiarizationEvent>(records, mergeDiarization(options));
}

const closedOf = (events: DiarizationEvent[]) =>
  events.flatMap((e) => (e.type === 'segment' ? [e.segment] : []));

test('closed same-speaker neighbours merge; a turn is emitted once the next speaker closes', async () => {
  const out = await run([
    rec([seg('S0', 0, 1.0)], [seg('S0', 1.0, 1.4)]),
    rec([seg('S0', 1.0, 2.0)], [seg('S1', 2.0, 2.5)]),
    rec([seg('S1', 2.0, 3.0), seg('S1', 3.0, 3.5)], [seg('S0', 3.6, 4.0)]),
    rec([seg('S0', 3.6, 5.0)], [seg('S1', 5.0, 5.2)], true),
  ]);
  assert.deepEqual(closedOf(out), [
    { start_time: 0, end_time: 2.0, speaker: 'S0' },
    { start_time: 2.0, end_time: 3.5, speaker: 'S1' },
    { start_time: 3.6, end_time: 5.0, speaker: 'S0' },
  ]);
  const timeline = out.at(-1)!;
  assert.equal(timeline.type, 'timeline');
  if (timeline.type === 'timeline') {
    assert.deepEqual(timeline.segments, closedOf(out));
    assert.deepEqual(timeline.provisional, [{ start_time: 5.0, end_time: 5.2, speaker: 'S1' }]);
  }
  // Each 'active' event is the whole provisional tail: the open turn, then the active segments.
  const actives = out.filter((e) => e.type === 'active');
  assert.deepEqual(actives[0], {
    type: 'active',
    segments: [
      { start_time: 0, end_time: 1.0, speaker: 'S0' },
      { start_time: 1.0, end_time: 1.4, speaker: 'S0' },
    ],
    closedUntil: 1.0,
  });
  // How far the closed segments reach, emitted or not (S0's turn is still open here).
  assert.deepEqual(
    actives.map((e) => e.type === 'active' && e.closedUntil),
    [1.0, 2.0, 3.5],
  );
});

test('segments without end_time end where the next one starts; the last one at the stream end', async () => {
  const records = [
    rec([seg('A', 0), seg('B', 1.5)], [seg('A', 2.5)]),
    rec([seg('B', 1.5 + 0.5)], [], false),
    rec([seg('A', 2.5)], [], true),
  ];
  assert.deepEqual(closedOf(await run(records, { streamEndSec: 3.2 })), [
    { start_time: 0, end_time: 1.5, speaker: 'A' },
    { start_time: 1.5, end_time: 2.5, speaker: 'B' },
    { start_time: 2.5, end_time: 3.2, speaker: 'A' },
  ]);
  // The stream end may be known only at the end (e.g. the audio sent so far): a function.
  let sent = 0;
  const late = run(records, { streamEndSec: () => sent });
  sent = 4;
  assert.equal(closedOf(await late).at(-1)!.end_time, 4);
});

test('an unknown end is never taken from provisional (active) segments', async () => {
  // Closed A@0 while B looks active from 5; then B closes at 3: A ends at 3, not 5.
  const out = await run([rec([seg('A', 0)], [seg('B', 5)]), rec([seg('B', 3, 6)], [], true)]);
  assert.deepEqual(closedOf(out), [
    { start_time: 0, end_time: 3, speaker: 'A' },
    { start_time: 3, end_time: 6, speaker: 'B' },
  ]);
});

test('the last turn without end_time keeps its words (it is not cut to zero length and dropped)', async () => {
  const records = [rec([seg('A', 0), seg('B', 3)], []), rec([], [], true)];
  const withEnd = closedOf(await run(records, { streamEndSec: 6 }));
  assert.deepEqual(withEnd.at(-1), { start_time: 3, end_time: 6, speaker: 'B' });
  const words = [{ word: 'late', start_time: 4, end_time: 4.5 }];
  assert.equal(alignSpeakers(words, withEnd)[0]!.speaker, 'B');
  // No stream end given: as far as the closed segments reach (here A's overlapping turn).
  const overlap = [rec([seg('A', 0, 5.5), seg('B', 3)], []), rec([], [], true)];
  assert.deepEqual(closedOf(await run(overlap)).at(-1), { start_time: 3, end_time: 5.5, speaker: 'B' });
});

test('maxGapSec keeps same-speaker turns apart across a long pause', async () => {
  const segments = [seg('A', 0, 1), seg('A', 5, 6), seg('B', 6, 7)];
  assert.equal(closedOf(await run([rec(segments, [], true)])).length, 2);
  assert.equal(closedOf(await run([rec(segments, [], true)], { maxGapSec: 2 })).length, 3);
});

test('property: however the closed segments are spread over records, the emitted timeline is the same', () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.constantFrom('S0', 'S1', 'S2'), fc.integer({ min: 1, max: 30 }), fc.boolean()), {
        minLength: 1,
        maxLength: 40,
      }),
      fc.array(fc.integer({ min: 0, max: 40 }), { maxLength: 10 }),
      (turns, cuts) => {
        let t = 0;
        // Some segments without end_time (the interface guarantees only start_time and speaker).
        const segments = turns.map(([speaker, len, ended]) => {
          const s = seg(speaker, t / 10, ended ? (t + len) / 10 : undefined);
          t += len;
          return s;
        });
        const emitted = (records: DiarizationRecord[]) => {
          const m = new DiarizationMerger({ streamEndSec: t / 10 });
          const out: SpeakerSegment[] = [];
          for (const r of records) for (const e of m.push(r)) if (e.type === 'segment') out.push(e.segment);
          return out;
        };
        const whole = emitted([rec(segments, [], true)]);
        const points = [...new Set(cuts.filter((c) => c < segments.length))].sort((a, b) => a - b);
        const records: DiarizationRecord[] = [];
        let prev = 0;
        for (const p of points) {
          records.push(rec(segments.slice(prev, p), [seg('S9', p)]));
          prev = p;
        }
        records.push(rec(segments.slice(prev), [], true));
        assert.deepEqual(emitted(records), whole);
        // Merged: no two neighbours share a speaker, and together they cover the input.
        for (let i = 1; i < whole.length; i++) assert.notEqual(whole[i]!.speaker, whole[i - 1]!.speaker);
        assert.equal(whole[0]!.start_time, 0);
        assert.equal(whole.at(-1)!.end_time, t / 10);
      },
    ),
    { numRuns: 200 },
  );
});

test('records must end with is_final', async () => {
  await assert.rejects(run([rec([seg('A', 0, 1)], [])]), IncompleteStreamError);
});
