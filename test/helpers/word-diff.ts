// Words of a run under faults against the words of the same audio without faults, matched by
// time (the pipeline's timeline): which were lost, which came twice, which are extra.

export interface TimedWord {
  start_time: number;
  end_time: number;
  word: string;
}

export interface WordDiff {
  reference: number;
  got: number;
  /** Reference words no word of the run matches. */
  lost: number;
  /**
   * Words of the run said twice: a word whose span holds the midpoint of another word of the
   * run (the same stretch of audio emitted again).
   */
  duplicated: number;
  /**
   * Words of the run that match a reference word another one matched too, without being said
   * twice: the same speech cut into a different number of words (the emulator lays words out
   * by the length of a speech region, and a session that starts mid-stream can see a region end
   * a little earlier or later).
   */
  resegmented: number;
  /** Words of the run matching no reference word. */
  extra: number;
  /** Matched words whose text differs (the emulator's text depends on where a session cut). */
  textDiffers: number;
}

const mid = (w: TimedWord) => (w.start_time + w.end_time) / 2;

/** The reference words no word of `got` matches (as {@link diffWords} matches them). */
export function lostWords(
  reference: readonly TimedWord[],
  got: readonly TimedWord[],
  toleranceSec = 0.25,
): TimedWord[] {
  const { matches } = match(reference, got, toleranceSec);
  return reference.filter((_, i) => matches[i] === 0);
}

/** Each word of `got` is matched to the reference word whose span holds its midpoint (else the nearest within `toleranceSec`). */
export function diffWords(
  reference: readonly TimedWord[],
  got: readonly TimedWord[],
  toleranceSec = 0.25,
): WordDiff {
  const { matches, extra, textDiffers } = match(reference, got, toleranceSec);
  // Said twice: in time order, a word whose midpoint is not after the end of the words before it.
  let duplicated = 0;
  let coveredUntil = Number.NEGATIVE_INFINITY;
  for (const w of [...got].sort((a, b) => a.start_time - b.start_time)) {
    if (mid(w) <= coveredUntil) duplicated++;
    coveredUntil = Math.max(coveredUntil, w.end_time);
  }
  const multiple = matches.reduce((sum, n) => sum + Math.max(0, n - 1), 0);
  return {
    reference: reference.length,
    got: got.length,
    lost: matches.filter((n) => n === 0).length,
    duplicated,
    resegmented: Math.max(0, multiple - duplicated),
    extra,
    textDiffers,
  };
}

/** How many words of `got` each reference word matched, and the words matching none. */
function match(reference: readonly TimedWord[], got: readonly TimedWord[], toleranceSec: number) {
  const matches = new Array<number>(reference.length).fill(0);
  let extra = 0;
  let textDiffers = 0;
  for (const w of got) {
    const m = mid(w);
    let best = -1;
    let bestDistance = Number.POSITIVE_INFINITY;
    for (let i = 0; i < reference.length; i++) {
      const r = reference[i]!;
      const distance = m >= r.start_time && m <= r.end_time ? 0 : Math.abs(mid(r) - m);
      if (distance < bestDistance) {
        best = i;
        bestDistance = distance;
      }
    }
    if (best < 0 || bestDistance > toleranceSec) {
      extra++;
      continue;
    }
    matches[best]!++;
    if (reference[best]!.word !== w.word) textDiffers++;
  }
  return { matches, extra, textDiffers };
}
