// The emulator's deterministic engine: speech regions (any chunking gives the same regions),
// words, speaker turns, ITN, redaction, forced speaker alignment and the live record sequences.

import assert from 'node:assert/strict';
import { describe, mock, test } from 'node:test';
import fc from 'fast-check';
import {
  energyKernel,
  jsEnergyKernel,
  SCRATCH_BYTES,
  scratchSumOfSquares,
} from '../src/emulator/engine/energy.ts';
import { LiveAsrEngine, LiveDiarizationEngine } from '../src/emulator/engine/live.ts';
import { detectRegions, type SpeechRegion, SpeechRegionDetector } from '../src/emulator/engine/regions.ts';
import { SpeakerTurns } from '../src/emulator/engine/speakers.ts';
import { inverseNormalize, redact } from '../src/emulator/engine/text.ts';
import { recordingWords, regionWords } from '../src/emulator/engine/words.ts';
import { alignSpeakers } from '../src/emulator/jobs.ts';
import { PieceCutter } from '../src/emulator/tts-service.ts';
import { validateAsrRecord, validateDiarizationRecord } from '../src/protocol/records.ts';
import { chunksOf, cutsFor, splitAt } from './helpers/chunks.ts';
import { RATE, speechPcm, uuid } from './helpers/emulator-fixtures.ts';

const w = (word: string, start_time: number, end_time: number) => ({ word, start_time, end_time });

/** Regions found by a detector fed `reads` one by one, closed regions taken after each. */
function regionsOfReads(reads: Buffer[]): SpeechRegion[] {
  const d = new SpeechRegionDetector(RATE);
  const got: SpeechRegion[] = [];
  for (const chunk of reads) {
    d.push(chunk);
    got.push(...d.takeClosed());
  }
  got.push(...d.end());
  return got;
}

/**
 * The regions as the detector found them when it took every window's level in dB (a logarithm
 * per window): the reference for the detector, which compares mean squares instead.
 */
function regionsInDecibels(samples: Int16Array, rate: number): SpeechRegion[] {
  const size = Math.max(1, Math.round(rate * 0.02));
  const at = (window: number) => (window * size) / rate;
  const recent: number[] = [];
  let silentRun = 0;
  let above = 0;
  let below = 0;
  let openAt = -1;
  let quietFrom = -1;
  let windows = 0;
  const regions: SpeechRegion[] = [];
  for (let from = 0; from < samples.length; from += size) {
    const n = Math.min(size, samples.length - from);
    let sumSq = 0;
    for (let i = from; i < from + n; i++) sumSq += samples[i]! * samples[i]!;
    const meanSq = sumSq / n;
    const db = meanSq > 0 ? 10 * Math.log10(meanSq / (32768 * 32768)) : -120;
    const index = windows++;
    let counted: number | undefined = db;
    if (db < -70) {
      silentRun++;
      counted = silentRun >= 10 ? -70 : undefined;
    } else silentRun = 0;
    if (counted !== undefined) {
      recent.push(counted);
      if (recent.length > 150) recent.shift();
    }
    const floor = Math.min(-40, ...recent);
    const on = Math.max(-42, floor + 14);
    const off = Math.max(-48, floor + 10);
    if (openAt < 0) {
      above = db > on ? above + 1 : 0;
      if (above >= 2) {
        openAt = index - 1;
        above = 0;
        below = 0;
        quietFrom = -1;
      }
    } else if (db < off) {
      if (below === 0) quietFrom = index;
      below++;
      if (below >= 15) {
        regions.push({ start: at(openAt), end: at(quietFrom) });
        openAt = -1;
        below = 0;
        quietFrom = -1;
      }
    } else {
      below = 0;
      quietFrom = -1;
    }
  }
  if (openAt >= 0) {
    regions.push({
      start: at(openAt),
      end: Math.min(samples.length / rate, at(quietFrom >= 0 ? quietFrom : windows)),
    });
  }
  return regions;
}

/**
 * PCM whose 20 ms windows have about the given mean squares: samples of ±a and ±(a + 1), as
 * many of the larger as bring the window nearest its target.
 */
function windowsOfLevels(meanSquares: number[], rate: number): Int16Array {
  const size = Math.round(rate * 0.02);
  const out = new Int16Array(meanSquares.length * size);
  meanSquares.forEach((target, w) => {
    const a = Math.min(32766, Math.floor(Math.sqrt(target)));
    const larger = Math.min(size, Math.round(((target - a * a) * size) / (2 * a + 1)));
    for (let i = 0; i < size; i++) out[w * size + i] = (i < larger ? a + 1 : a) * (i % 2 === 0 ? 1 : -1);
  });
  return out;
}

describe('speech regions', () => {
  const pcm = speechPcm([
    { silence: 0.5 },
    { speech: 1.2 },
    { silence: 0.8 },
    { speech: 0.6 },
    { silence: 0.4 },
  ]);

  test('follow the audio: one region per burst, pauses between', () => {
    const regions = detectRegions(pcm, RATE);
    assert.equal(regions.length, 2);
    assert.ok(Math.abs(regions[0]!.start - 0.5) <= 0.04, `start ${regions[0]!.start}`);
    assert.ok(Math.abs(regions[0]!.end - 1.7) <= 0.04, `end ${regions[0]!.end}`);
    assert.ok(Math.abs(regions[1]!.start - 2.5) <= 0.04);
    assert.ok(Math.abs(regions[1]!.end - 3.1) <= 0.04);
  });

  test('a pause shorter than the hangover does not split a region', () => {
    const short = speechPcm([{ speech: 0.5 }, { silence: 0.2 }, { speech: 0.5 }]);
    assert.equal(detectRegions(short, RATE).length, 1);
  });

  test('silence has no region; speech running to the end is closed at the end', () => {
    assert.deepEqual(detectRegions(Buffer.alloc(RATE * 2), RATE), []);
    const open = detectRegions(speechPcm([{ silence: 0.2 }, { speech: 0.7 }]), RATE);
    assert.equal(open.length, 1);
    assert.ok(Math.abs(open[0]!.end - 0.9) < 0.001);
  });

  test('any chunking (odd byte splits included) gives the same regions', () => {
    const expected = detectRegions(pcm, RATE);
    fc.assert(
      fc.property(cutsFor(pcm.length), (cuts) => {
        assert.deepEqual(regionsOfReads(splitAt(pcm, cuts)), expected);
      }),
      { numRuns: 40 },
    );
  });

  test('a recording longer than the scratch area, at an odd byte offset, in odd-sized reads: the same regions', () => {
    const long = speechPcm(
      Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? { speech: 0.9 + i / 10 } : { silence: 0.7 })),
    );
    assert.ok(long.length > 4 * SCRATCH_BYTES);
    const expected = detectRegions(long, RATE);
    assert.equal(expected.length, 6);
    const odd = Buffer.alloc(long.length + 1).subarray(1);
    long.copy(odd);
    assert.deepEqual(detectRegions(odd, RATE), expected);
    for (const size of [1, 3, 4097, SCRATCH_BYTES - 1, SCRATCH_BYTES + 3]) {
      assert.deepEqual(regionsOfReads(chunksOf(odd, size)), expected, `reads of ${size} bytes`);
    }
    const samples = new SpeechRegionDetector(RATE);
    samples.pushSamples(new Int16Array(long.buffer, long.byteOffset, long.length / 2));
    assert.deepEqual([...samples.takeClosed(), ...samples.end()], expected, 'pushSamples');
  });

  test('the levels compare as they do in dB, within a hair of every threshold too', () => {
    const sq = (db: number) => 32768 * 32768 * 10 ** (db / 10);
    // Windows at a floor, at the floor's start and end margins above it, at the absolute
    // thresholds and the silence level, each moved by a few parts in 1e3 or less (where the
    // levels in dB decide), and anywhere.
    const level = (floorDb: number) =>
      fc.oneof(
        fc
          .constantFrom(floorDb, floorDb + 14, floorDb + 10, -42, -48, -70, -40)
          .chain((db) => fc.double({ min: -3e-3, max: 3e-3, noNaN: true }).map((e) => sq(db) * (1 + e))),
        fc.double({ min: 0, max: sq(-10), noNaN: true }),
        fc.constant(0),
      );
    fc.assert(
      fc.property(
        fc.constantFrom(8_000, RATE, 22_050, 48_000),
        fc.double({ min: -75, max: -35, noNaN: true }).chain((floorDb) =>
          fc.array(fc.tuple(level(floorDb), fc.integer({ min: 1, max: 40 })), {
            minLength: 1,
            maxLength: 30,
          }),
        ),
        fc.integer({ min: 0, max: 300 }),
        (rate, runs, partial) => {
          const levels = runs.flatMap(([meanSq, count]) => Array<number>(count).fill(meanSq));
          const samples = windowsOfLevels(levels, rate);
          // Some recordings end inside a window.
          const pcm = samples.subarray(0, Math.max(1, samples.length - partial));
          const bytes = Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength);
          assert.deepEqual(detectRegions(bytes, rate), regionsInDecibels(pcm, rate));
        },
      ),
      { numRuns: 300 },
    );
  });

  for (const [name, make] of [
    ['the vectorised', energyKernel],
    ['the JS fallback (no WebAssembly)', jsEnergyKernel],
  ] as const)
    test(`${name} sum of squares is the plain sum, extremes included`, () => {
      const kernel = make();
      fc.assert(
        fc.property(
          fc.array(fc.oneof(fc.integer({ min: -32768, max: 32767 }), fc.constantFrom(-32768, 32767)), {
            maxLength: 200,
          }),
          fc.integer({ min: 0, max: SCRATCH_BYTES / 2 - 200 }),
          (values, from) => {
            kernel.samples.set(values, from);
            const plain = values.reduce((sum, v) => sum + v * v, 0);
            assert.equal(scratchSumOfSquares(kernel, from, values.length), plain);
          },
        ),
        { numRuns: 300 },
      );
      kernel.samples.fill(-32768);
      assert.equal(scratchSumOfSquares(kernel, 0, SCRATCH_BYTES / 2), (SCRATCH_BYTES / 2) * 2 ** 30);
    });
});

describe('words', () => {
  test('generated words are deterministic, at a plausible rate, inside their region', () => {
    const region = { start: 1, end: 3 };
    const a = regionWords('en', region);
    assert.deepEqual(regionWords('en', region), a);
    assert.equal(a.length, 5);
    for (const word of a)
      assert.ok(word.start_time >= 1 && word.end_time <= 3 && word.end_time > word.start_time);
    assert.notDeepEqual(
      regionWords('en', { start: 1.5, end: 3.5 }).map((x) => x.word),
      a.map((x) => x.word),
    );
    assert.ok(regionWords('ar', region).every((x) => /[\u0600-\u06FF]/.test(x.word)));
  });

  test('a registered transcript is spread over the regions by duration, every word once', () => {
    const regions = [
      { start: 0, end: 1 },
      { start: 2, end: 5 },
    ];
    const parts = recordingWords(regions, 5, 'en', 'one two three four five six seven eight');
    assert.deepEqual(
      parts.map((p) => p.words.map((x) => x.word)),
      [
        ['one', 'two'],
        ['three', 'four', 'five', 'six', 'seven', 'eight'],
      ],
    );
    const none = recordingWords([], 4, 'en', 'hello world');
    assert.equal(none.length, 1);
    assert.deepEqual(none[0]!.region, { start: 0, end: 4 });
  });
});

describe('inverse text normalization and redaction', () => {
  test('number words become digits spanning their words', () => {
    const out = inverseNormalize([
      w('call', 0, 0.2),
      w('twenty', 0.3, 0.5),
      w('three', 0.6, 0.8),
      w('times', 0.9, 1),
      w('one', 1.1, 1.2),
      w('hundred', 1.3, 1.4),
      w('five', 1.5, 1.6),
      w('two', 1.7, 1.8),
      w('thousand.', 1.9, 2),
      w('hundred', 2.1, 2.2),
    ]);
    assert.deepEqual(
      out.map((x) => x.word),
      ['call', '23', 'times', '105', '2000.', 'hundred'],
    );
    assert.deepEqual(out[1], w('23', 0.3, 0.8));
  });

  test('redaction masks e-mail addresses and digits and lists the labels', () => {
    const r = redact([w('mail', 0, 1), w('ann@example.com', 1, 2), w('at', 2, 3), w('1905', 3, 4)]);
    assert.deepEqual(
      r.words.map((x) => x.word),
      ['mail', '[EMAIL]', 'at', '[NUMBER]'],
    );
    assert.equal(r.labels, 'EMAIL,NUMBER');
    assert.equal(redact([w('hello', 0, 1)]).labels, '');
  });
});

describe('V1 speaker alignment (diarization_force_align)', () => {
  const segments = [
    { start_time: 1, end_time: 2, speaker: 'A' },
    { start_time: 4, end_time: 5, speaker: 'B' },
  ];

  test('a word starting inside a segment takes its speaker', () => {
    const [o] = alignSpeakers([w('x', 1.5, 2.5)], segments, true);
    assert.equal(o!.speaker, 'A');
  });

  test('outside every segment: the boundary nearest the word midpoint, ties to the earlier segment', () => {
    // midpoint 2.6: nearest boundary is A's end (0.6) rather than B's start (1.4)
    assert.equal(alignSpeakers([w('x', 2.4, 2.8)], segments, true)[0]!.speaker, 'A');
    // the word starts outside (3.2) and its midpoint 3.7 is nearest B's start
    assert.equal(alignSpeakers([w('x', 3.2, 4.2)], segments, true)[0]!.speaker, 'B');
    // midpoint 3.0 is 1.0 from A's end and 1.0 from B's start: the earlier segment wins
    assert.equal(alignSpeakers([w('x', 2.5, 3.5)], segments, true)[0]!.speaker, 'A');
    // before the first segment
    assert.equal(alignSpeakers([w('x', 0.1, 0.3)], segments, true)[0]!.speaker, 'A');
  });

  test('without force-align such words are UNKNOWN_SPEAKER; with no real segment the speaker is null', () => {
    assert.equal(alignSpeakers([w('x', 2.4, 2.8)], segments, false)[0]!.speaker, 'UNKNOWN_SPEAKER');
    assert.equal(alignSpeakers([w('x', 1.5, 1.8)], segments, false)[0]!.speaker, 'A');
    assert.equal(alignSpeakers([w('x', 1, 2)], [], true)[0]!.speaker, null);
    assert.equal(
      alignSpeakers([w('x', 1, 2)], [{ start_time: 3, end_time: 3, speaker: 'Z' }], true)[0]!.speaker,
      null,
    );
  });
});

describe('speaker turns', () => {
  test('the turn changes at a long pause and labels cycle', () => {
    const turns = new SpeakerTurns({ speakers: 2, turnGapSec: 0.6 });
    assert.equal(turns.assign({ start: 0, end: 1 }), 'SPEAKER_00');
    assert.equal(turns.assign({ start: 1.3, end: 2 }), 'SPEAKER_00');
    assert.equal(turns.peek(3), 'SPEAKER_01');
    assert.equal(turns.assign({ start: 3, end: 4 }), 'SPEAKER_01');
    assert.equal(turns.assign({ start: 5, end: 6 }), 'SPEAKER_00');
  });
});

describe('live engines', () => {
  const pcm = speechPcm([{ speech: 1.2 }, { silence: 0.8 }, { speech: 1.0 }, { silence: 0.5 }]);

  test('ASR: provisional records grow, a speech-final record at each pause, the final record last', () => {
    const id = uuid();
    const engine = new LiveAsrEngine(id, 'en');
    const records = [];
    for (let at = 0; at < pcm.length; at += 3200) records.push(...engine.push(pcm.subarray(at, at + 3200)));
    records.push(...engine.finish());
    for (const r of records) assert.ok(validateAsrRecord(r).ok);
    assert.equal(records.filter((r) => r.is_final).length, 1);
    assert.equal(records.at(-1)!.is_final, true);
    assert.equal(records.filter((r) => r.is_speech_final).length, 3, 'one per region, and the final record');
    const provisional = records.filter((r) => !r.is_speech_final);
    assert.ok(provisional.length >= 2);
    // A provisional record never shows more words than the committed record that replaces it.
    const firstCommit = records.find((r) => r.is_speech_final)!;
    const before = records.slice(0, records.indexOf(firstCommit));
    for (const r of before) assert.ok(r.words.length <= firstCommit.words.length);
  });

  test('ASR: a registered transcript is used word for word, leftovers in the final record', () => {
    const engine = new LiveAsrEngine(
      uuid(),
      'en',
      'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda',
    );
    const records = [...engine.push(pcm), ...engine.finish()];
    const committed = records.filter((r) => r.is_speech_final).flatMap((r) => r.words.map((x) => x.word));
    assert.equal(committed.join(' '), 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda');
  });

  test('diarization: closed segments once each, an active snapshot, the final record last', () => {
    const engine = new LiveDiarizationEngine(uuid());
    const records = [];
    for (let at = 0; at < pcm.length; at += 3200) records.push(...engine.push(pcm.subarray(at, at + 3200)));
    records.push(...engine.finish());
    for (const r of records) assert.ok(validateDiarizationRecord(r).ok);
    const finals = records.flatMap((r) => r.final_segments);
    assert.equal(finals.length, 2);
    assert.deepEqual(
      finals.map((s) => s.speaker),
      ['SPEAKER_00', 'SPEAKER_01'],
    );
    assert.ok(records.some((r) => r.active_segments.length === 1 && !r.is_final));
    assert.equal(records.at(-1)!.is_final, true);
  });

  test('diarization: a short region still open at the end stays provisional in the final record', () => {
    const engine = new LiveDiarizationEngine(uuid());
    engine.push(speechPcm([{ speech: 1 }, { silence: 1 }, { speech: 0.3 }]));
    const [last] = engine.finish();
    assert.equal(last!.is_final, true);
    assert.equal(last!.active_segments.length, 1);
  });
});

describe('TTS helpers', () => {
  test('PCM is cut into pieces of varying size, nothing lost', () => {
    const cutter = new PieceCutter(16_000);
    const pieces = [...cutter.push(Buffer.alloc(10_000)), ...cutter.push(Buffer.alloc(7_000))];
    const rest = cutter.flush();
    assert.equal(pieces.reduce((n, p) => n + p.length, 0) + rest.length, 17_000);
    assert.ok(new Set(pieces.map((p) => p.length)).size > 1);
    for (const p of pieces) assert.equal(p.length % 2, 0);
  });

  test('a chunk of many pieces is cut without copying it once per piece (the same bytes, in order)', () => {
    // The synthetic voice gives a word without spaces (1000 code points of Japanese) as one
    // chunk of megabytes: joined again for every piece, it held the event loop for seconds.
    const pcm = Buffer.alloc(1_000_000);
    for (let i = 0; i < pcm.length; i++) pcm[i] = (i * 7) & 0xff;
    const concat = mock.method(Buffer, 'concat');
    let copied = 0;
    let pieces: Buffer[];
    let rest: Buffer;
    try {
      const cutter = new PieceCutter(16_000);
      pieces = [...cutter.push(pcm.subarray(0, 999)), ...cutter.push(pcm.subarray(999))];
      rest = cutter.flush();
      for (const call of concat.mock.calls) copied += (call.result as Buffer).length;
    } finally {
      concat.mock.restore();
    }
    assert.ok(pieces.length > 200, `${pieces.length} pieces`);
    assert.ok(copied <= 2 * pcm.length, `${copied} bytes copied to cut ${pcm.length}`);
    assert.ok(Buffer.concat([...pieces, rest]).equals(pcm));
    const sizes = pieces.map((p) => p.length);
    assert.deepEqual(sizes.slice(0, 7), [3200, 4800, 1600, 6400, 2400, 4000, 3200]);
  });
});
