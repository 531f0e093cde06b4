// Speaker segments indexed once for many lookups: the V1 speaker rule (speaker-rule.ts) and the
// segments that can overlap a word, in O(log segments) a lookup (plus the segments visited)
// instead of a scan of every segment per word. The answers are exactly the scans', ties included
// (test/protocol-speaker-rule.test.ts compares them). Internal: the package does not export it.

import { type Segment, type Timed, UNKNOWN_SPEAKER } from './speaker-rule.ts';

/** Index of the first of `count` positions where `test` holds; `test` must hold from some position on. */
function firstWhere(count: number, test: (position: number) => boolean, from = 0): number {
  let lo = from;
  let hi = count;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (test(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** A tree leaf of a removed segment: below every end and every minus segment number. */
const REMOVED = Number.NEGATIVE_INFINITY;
const present = (value: number) => value > REMOVED;

/**
 * A max segment tree over a list of numbers: a value changed, the maximum of a range, and the
 * members of a range whose value passes a test holding from some value on (a subtree whose
 * maximum fails holds none), each in O(log length) (a found member).
 */
class MaxTree {
  readonly #leaves: number;
  /** Node k covers the union of nodes 2k and 2k + 1; position i is node `#leaves + i`. */
  readonly #node: Float64Array;

  constructor(values: ArrayLike<number>) {
    let leaves = 1;
    while (leaves < values.length) leaves *= 2;
    this.#leaves = leaves;
    this.#node = new Float64Array(2 * leaves).fill(REMOVED);
    for (let i = 0; i < values.length; i++) this.#node[leaves + i] = values[i]!;
    for (let k = leaves - 1; k > 0; k--) this.#pull(k);
  }

  set(position: number, value: number): void {
    let k = this.#leaves + position;
    this.#node[k] = value;
    for (k >>>= 1; k > 0; k >>>= 1) this.#pull(k);
  }

  /** The largest value at positions [from, to); REMOVED for an empty range. */
  max(from: number, to: number): number {
    let best = REMOVED;
    for (let lo = from + this.#leaves, hi = to + this.#leaves; lo < hi; lo >>>= 1, hi >>>= 1) {
      if (lo & 1) best = Math.max(best, this.#node[lo++]!);
      if (hi & 1) best = Math.max(best, this.#node[--hi]!);
    }
    return best;
  }

  /**
   * Call `visit` with each position in [from, to) whose value passes `passes`, in order (last to
   * first when `backwards`), until it returns true.
   */
  each(
    from: number,
    to: number,
    passes: (value: number) => boolean,
    visit: (position: number) => boolean | undefined,
    backwards = false,
  ): void {
    const walk = (k: number, lo: number, hi: number): boolean => {
      if (hi <= from || lo >= to || !passes(this.#node[k]!)) return false;
      if (k >= this.#leaves) return visit(k - this.#leaves) === true;
      const mid = (lo + hi) >>> 1;
      return backwards
        ? walk(2 * k + 1, mid, hi) || walk(2 * k, lo, mid)
        : walk(2 * k, lo, mid) || walk(2 * k + 1, mid, hi);
    };
    walk(1, 0, this.#leaves);
  }

  /** The first position in [from, to) (the last, `backwards`) whose value passes, or -1. */
  find(from: number, to: number, passes: (value: number) => boolean, backwards = false): number {
    let found = -1;
    this.each(
      from,
      to,
      passes,
      (position) => {
        found = position;
        return true;
      },
      backwards,
    );
    return found;
  }

  #pull(k: number): void {
    this.#node[k] = Math.max(this.#node[2 * k]!, this.#node[2 * k + 1]!);
  }
}

/**
 * Speaker segments indexed for many lookups: the real ones (`realSegments`: positive length,
 * ordered by start) less any removed since. Overlapping and nested segments are fine (a long
 * segment holding short ones); each lookup answers as a scan of `realSegments` of the segments
 * given, less those removed, would.
 */
export class SegmentIndex<S extends Segment = Segment> {
  /** The real segments when built, in `realSegments` order (by start, stable); removed ones included. */
  readonly real: readonly S[];
  #size: number;
  /** `real` position of each segment given (-1: not real). */
  readonly #position: Int32Array;
  /** `real[i].start_time`: non-decreasing, so a binary search finds the segments starting before a time. */
  readonly #starts: Float64Array;
  /** `real[i].end_time` by i (REMOVED once removed): of the segments starting before a time, those reaching it. */
  readonly #reach: MaxTree;
  /** Every end time, sorted, for the boundary nearest a time. */
  readonly #ends: Float64Array;
  /** `#ends` position of `real[i]`'s end. */
  readonly #endPosition: Int32Array;
  /**
   * Minus the `real` position of each `#ends` position's segment (REMOVED once removed): the
   * maximum over a range is the earliest segment ending there, of any number sharing one end.
   */
  readonly #endOwner: MaxTree;

  constructor(segments: readonly S[]) {
    // As realSegments orders them, keeping where each came from (for remove()).
    const given = segments
      .map((_, i) => i)
      .filter((i) => segments[i]!.end_time > segments[i]!.start_time)
      .sort((a, b) => segments[a]!.start_time - segments[b]!.start_time || a - b);
    this.real = given.map((i) => segments[i]!);
    const n = given.length;
    this.#size = n;
    this.#position = new Int32Array(segments.length).fill(-1);
    given.forEach((input, i) => {
      this.#position[input] = i;
    });
    this.#starts = Float64Array.from(this.real, (s) => s.start_time);
    const ends = Float64Array.from(this.real, (s) => s.end_time);
    this.#reach = new MaxTree(ends);
    const byEnd = Array.from({ length: n }, (_, i) => i).sort((a, b) =>
      ends[a]! < ends[b]! ? -1 : ends[a]! > ends[b]! ? 1 : a - b,
    );
    this.#ends = Float64Array.from(byEnd, (i) => ends[i]!);
    this.#endPosition = new Int32Array(n);
    byEnd.forEach((i, at) => {
      this.#endPosition[i] = at;
    });
    this.#endOwner = new MaxTree(byEnd.map((i) => -i));
  }

  /** Leave out `segments[input]` (of the segments given) from every later lookup. */
  remove(input: number): void {
    const i = this.#position[input] ?? -1;
    if (i < 0 || !present(this.#reach.max(i, i + 1))) return;
    this.#reach.set(i, REMOVED);
    this.#endOwner.set(this.#endPosition[i]!, REMOVED);
    this.#size--;
  }

  /** Real segments not removed. */
  get size(): number {
    return this.#size;
  }

  /**
   * Visit, in `real` order, the segments whose start passes `startsBefore` and whose end passes
   * `reaches`, until `visit` returns true. `startsBefore` must hold up to some time and `reaches`
   * from some time on (as `start < t` and `end > t` do); the cost is O(log n) a visited segment.
   */
  each(
    startsBefore: (start: number) => boolean,
    reaches: (end: number) => boolean,
    visit: (segment: S) => boolean | undefined,
  ): void {
    const count = firstWhere(this.real.length, (i) => !startsBefore(this.#starts[i]!));
    this.#reach.each(
      0,
      count,
      (end) => present(end) && reaches(end),
      (i) => visit(this.real[i]!),
    );
  }

  /** `segmentHolding(time, real)`: the first real segment holding `time`, boundaries included. */
  holding(time: number): S | undefined {
    let found: S | undefined;
    this.each(
      (start) => start <= time,
      (end) => end >= time,
      (s) => {
        found = s;
        return true;
      },
    );
    return found;
  }

  /**
   * `nearestBoundarySpeaker(word, real)`: the speaker of the boundary nearest the word's midpoint,
   * in whole microseconds, ties to the earliest segment. Call only while `size > 0`.
   */
  nearestBoundarySpeaker(word: Timed): string {
    const n = this.real.length;
    const reach = this.#reach;
    const owner = this.#endOwner;
    const mid = (word.start_time + word.end_time) / 2;
    // The scan keeps its first segment unless a distance is below Infinity: never for a NaN or
    // infinite midpoint.
    if (!Number.isFinite(mid)) return this.real[reach.find(0, n, present)]!.speaker;
    // The scan's distance of one boundary. It never grows as a boundary nears the midpoint (each
    // step rounds monotonically), so over sorted boundaries it falls, then rises.
    const distance = (boundary: number) => Math.round(Math.abs(mid - boundary) * 1e6);
    const starts = this.#starts;
    const ends = this.#ends;
    const startsAbove = firstWhere(n, (i) => starts[i]! >= mid);
    const endsAbove = firstWhere(n, (i) => ends[i]! >= mid);
    // The least distance is that of a (present) boundary next to the midpoint.
    let least = Number.POSITIVE_INFINITY;
    for (const [values, at] of [
      [starts, reach.find(0, startsAbove, present, true)],
      [starts, reach.find(startsAbove, n, present)],
      [ends, owner.find(0, endsAbove, present, true)],
      [ends, owner.find(endsAbove, n, present)],
    ] as const)
      if (at >= 0) least = Math.min(least, distance(values[at]!));
    // Every boundary at the least distance (several: shared boundaries, times equal in whole
    // microseconds, a midpoint halfway between two) is in one run of each sorted list; the
    // earliest present segment with one wins. Starts are in segment order: the run's first.
    const run = (values: Float64Array, above: number): [number, number] => [
      firstWhere(above, (i) => distance(values[i]!) <= least),
      firstWhere(n, (i) => distance(values[i]!) > least, above),
    ];
    const [startFrom, startTo] = run(starts, startsAbove);
    const [endFrom, endTo] = run(ends, endsAbove);
    const byStart = reach.find(startFrom, startTo, present);
    const byEnd = owner.max(endFrom, endTo);
    const first = Math.min(byStart < 0 ? n : byStart, present(byEnd) ? -byEnd : n);
    return this.real[first]!.speaker;
  }

  /** `v1Speaker(word, real, forceAlign)`: the V1 lookup's speaker; null with no real segment. */
  v1Speaker(word: Timed, forceAlign: boolean): string | null {
    if (this.#size === 0) return null;
    const holder = this.holding(word.start_time);
    if (holder) return holder.speaker;
    return forceAlign ? this.nearestBoundarySpeaker(word) : UNKNOWN_SPEAKER;
  }
}
