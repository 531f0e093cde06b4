// The live stream's policies, each alone: frame joining, the restart budget, rotation, session
// time and the watermark of emitted words. No stream, no service: clocks are injected.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { localServiceError, SpeechServiceError } from '../src/protocol/errors.ts';
import type { AsrRecord, DiarizationRecord } from '../src/protocol/records.ts';
import { FrameJoiner } from '../src/transforms/live-joiner.ts';
import { RestartBudget } from '../src/transforms/live-restarts.ts';
import { Rotation } from '../src/transforms/live-rotation.ts';
import { continuedDiarization, EmittedWatermark, SessionClock } from '../src/transforms/live-timeline.ts';
import type { AudioFrame } from '../src/transforms/to-frames.ts';

const frame = (bytes: number, isFinal = false, language: AudioFrame['language'] = 'en'): AudioFrame => ({
  pcm: Buffer.alloc(bytes, bytes & 0xff),
  language,
  isFinal,
});

test('FrameJoiner: short frames are joined up to the target; a final one is never held; nothing is lost or reordered', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 0, max: 20 }).map((n) => n * 320),
      fc.array(
        fc.integer({ min: 1, max: 400 }).map((n) => n * 160),
        { minLength: 1, maxLength: 40 },
      ),
      (target, sizes) => {
        const joiner = new FrameJoiner(target);
        const input = sizes.map((n, i) => ({
          ...frame(n, i === sizes.length - 1),
          pcm: Buffer.alloc(n, i & 0xff),
        }));
        const out = input.flatMap((f) => joiner.push(f));
        assert.equal(joiner.holding, false, 'the final frame takes what is held with it');
        assert.ok(Buffer.concat(out.map((f) => f.pcm)).equals(Buffer.concat(input.map((f) => f.pcm))));
        assert.deepEqual(
          out.map((f) => f.isFinal),
          out.map((_, i) => i === out.length - 1),
        );
        // Every frame but the last reached the target (short ones were joined), or goes before
        // one that did by itself, which is not joined.
        for (let i = 0; i < out.length - 1; i++) {
          const size = out[i]!.pcm.length;
          assert.ok(size >= target || out[i + 1]!.pcm.length >= target, `${size} < ${target}`);
        }
        // Joining makes no frame larger than twice the target or the largest frame given: a
        // frame within the service's size limit stays within it.
        const bound = Math.max(2 * target, ...sizes);
        for (const f of out) assert.ok(f.pcm.length <= bound, `${f.pcm.length} > ${bound}`);
      },
    ),
  );
});

test('FrameJoiner: a change of language sends what is held first; flush() gives the rest as one non-final frame', () => {
  const joiner = new FrameJoiner(32_000);
  assert.deepEqual(joiner.push(frame(3200, false, 'en')), []);
  assert.deepEqual(joiner.push(frame(3200, false, 'en')), []);
  const out = joiner.push(frame(3200, false, 'ar'));
  assert.equal(out.length, 1);
  assert.equal(out[0]!.language, 'en');
  assert.equal(out[0]!.pcm.length, 6400);
  const rest = joiner.flush()!;
  assert.deepEqual([rest.language, rest.pcm.length, rest.isFinal], ['ar', 3200, false]);
  assert.equal(joiner.flush(), undefined);
});

function budget(options: ConstructorParameters<typeof RestartBudget>[0] = {}) {
  let now = 0;
  const b = new RestartBudget({ ...options, now: () => now, random: () => 0.5 });
  return { b, advance: (ms: number) => (now += ms) };
}

const failure = localServiceError('ASR_TRANSCRIPTION_FAILED', 'failed');

test('RestartBudget: time a session spent taking audio (waiting for its final record) is not outage', () => {
  const { b, advance } = budget({ withinMs: 60_000 });
  // Two final records lost in a row: each session took the audio, then waited 60 s in vain.
  for (let i = 0; i < 2; i++) {
    b.accepted(); // the replayed audio was taken: the service answers
    advance(60_000);
    assert.notEqual(b.failed(failure), undefined, `restart ${i + 1} refused after a final wait`);
    advance(500); // the pause before the next session
  }
  assert.ok(b.downMs <= 1_000, `${b.downMs} ms counted as outage`);
});

test('RestartBudget: an outage (no session takes audio) is bounded by withinMs; progress makes it whole', () => {
  const { b, advance } = budget({ withinMs: 10_000 });
  let restarts = 0;
  while (b.failed(failure) !== undefined) {
    restarts++;
    advance(2_000);
  }
  assert.equal(restarts, 6, 'failures at 0, 2, ... 10 s; the one at 12 s is past the bound');
  const fresh = budget({ withinMs: 10_000 });
  fresh.b.failed(failure);
  fresh.advance(8_000);
  fresh.b.accepted();
  fresh.b.progress(); // new source audio
  fresh.advance(9_000);
  assert.notEqual(fresh.b.failed(failure), undefined, 'counted from the latest failure after progress');
});

test('RestartBudget: maxRestarts counts restarts in a row without progress; the pause grows, Retry-After wins', () => {
  const { b } = budget({ maxRestarts: 3, backoff: { baseMs: 100, maxMs: 1_000 } });
  const pauses = [b.failed(failure), b.failed(failure), b.failed(failure)];
  assert.deepEqual(pauses, [50, 100, 200]);
  assert.equal(b.failed(failure), undefined);
  b.progress();
  const busy = new SpeechServiceError({
    status: 503,
    code: 'SERVER_DEPENDENCY_FAILURE',
    retryable: true,
    retryAfterMs: 4_000,
  });
  assert.ok(b.failed(busy)! >= 4_000);
});

test('RestartBudget: a Retry-After that would take the outage past withinMs ends the stream at once', () => {
  const later = (retryAfterMs: number) =>
    new SpeechServiceError({ status: 503, code: 'SERVER_DEPENDENCY_FAILURE', retryable: true, retryAfterMs });
  assert.equal(
    budget({ withinMs: 60_000 }).b.failed(later(3_600_000)),
    undefined,
    'an hour for a 60 s bound',
  );
  const { b, advance } = budget({ withinMs: 60_000 });
  assert.ok(b.failed(later(30_000))! >= 30_000);
  advance(40_000);
  assert.equal(b.failed(later(30_000)), undefined, '40 s of outage and 30 s more is past the bound');
});

test('Rotation: due at the first speech boundary after afterSec, or at forceAfterSec regardless', () => {
  const r = new Rotation({ afterSec: 10, forceAfterSec: 20 });
  r.heard(true); // a boundary before rotation is due does not count
  r.accepted(9, false);
  assert.equal(r.due(9), false);
  r.accepted(11, false);
  assert.equal(r.due(11), false, 'due, but no boundary heard since');
  r.heard(false);
  assert.equal(r.due(12), false);
  r.heard(true);
  assert.equal(r.due(12), true);
  r.reset();
  r.accepted(15, false);
  r.heard(false);
  assert.equal(r.due(19), false);
  assert.equal(r.due(20), true, 'forced');
  r.reset();
  r.accepted(30, true);
  assert.equal(r.due(30), false, 'the final frame starts no rotation');
});

test('SessionClock: keepalive silence is taken out of record times; a later session is offset', () => {
  const clock = new SessionClock(100);
  clock.accepted(2, false);
  clock.accepted(1, true); // keepalive
  clock.accepted(2, false);
  assert.equal(clock.sec, 5);
  assert.equal(clock.toPipeline(1), 101);
  assert.equal(clock.toPipeline(2.5), 102, 'inside the filler: where it began');
  assert.equal(clock.toPipeline(4), 103);
  const record: AsrRecord = {
    id: 'x',
    seq: 0,
    transcription: 'a',
    words: [{ word: 'a', start_time: 3.5, end_time: 4 }],
    is_speech_final: true,
    is_final: false,
  };
  assert.deepEqual(clock.shiftAsr(record).words[0], { word: 'a', start_time: 102.5, end_time: 103 });
  const diarization: DiarizationRecord = {
    id: 'x',
    final_segments: [{ start_time: 0, end_time: 1, speaker: 'SPEAKER_00' }],
    active_segments: [],
    is_final: false,
  };
  assert.equal(clock.shiftDiarization(diarization, 2).final_segments[0]!.speaker, 'SPEAKER_00#2');
  const closed = continuedDiarization(
    { ...diarization, active_segments: [{ start_time: 4, speaker: 'SPEAKER_01' }] },
    4.5,
  );
  assert.deepEqual(closed.active_segments, []);
  assert.deepEqual(closed.final_segments.at(-1), { start_time: 4, end_time: 4.5, speaker: 'SPEAKER_01' });
});

test('EmittedWatermark: words heard again after a restart are not emitted twice; provisional words do not move it', () => {
  const w = new EmittedWatermark();
  const asr = (words: [number, number][], speechFinal: boolean): AsrRecord => ({
    id: 'x',
    seq: 0,
    transcription: '',
    words: words.map(([s, e]) => ({ word: `w${s}`, start_time: s, end_time: e })),
    is_speech_final: speechFinal,
    is_final: false,
  });
  assert.equal(w.newWords(asr([[0, 1]], false)).words.length, 1);
  assert.equal(w.until, Number.NEGATIVE_INFINITY, 'a provisional word commits nothing');
  assert.equal(
    w.newWords(
      asr(
        [
          [0, 1],
          [1, 2],
        ],
        true,
      ),
    ).words.length,
    2,
  );
  assert.equal(w.until, 2);
  const again = w.newWords(
    asr(
      [
        [1.1, 1.9],
        [2, 3],
      ],
      true,
    ),
  );
  assert.deepEqual(
    again.words.map((x) => x.start_time),
    [2],
  );
  assert.equal(again.transcription, 'w2');
});
