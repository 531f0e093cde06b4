// Deterministic inverse text normalization (English number words to digits) and redaction
// (e-mail addresses and words with digits masked, with labels) over word segments.

import type { WordSegment } from '../../protocol/records.ts';

// biome-ignore format: a table reads best as a block
const SMALL: Record<string, number> = {
  zero: 0, one: 1, two: 2, three: 3, four: 4, five: 5, six: 6, seven: 7, eight: 8, nine: 9, ten: 10,
  eleven: 11, twelve: 12, thirteen: 13, fourteen: 14, fifteen: 15, sixteen: 16, seventeen: 17,
  eighteen: 18, nineteen: 19,
};
// biome-ignore format: a table reads best as a block
const TENS: Record<string, number> = {
  twenty: 20, thirty: 30, forty: 40, fifty: 50, sixty: 60, seventy: 70, eighty: 80, ninety: 90,
};
const SCALES: Record<string, number> = { thousand: 1_000, million: 1_000_000 };

type Kind = 'small' | 'tens' | 'hundred' | 'scale';

function classify(word: string): { kind: Kind; value: number; punct: string } | undefined {
  const m = /^([a-z]+)([.,!?;:]*)$/i.exec(word);
  if (!m) return undefined;
  const w = m[1]!.toLowerCase();
  const punct = m[2]!;
  if (Object.hasOwn(SMALL, w)) return { kind: 'small', value: SMALL[w]!, punct };
  if (Object.hasOwn(TENS, w)) return { kind: 'tens', value: TENS[w]!, punct };
  if (w === 'hundred') return { kind: 'hundred', value: 100, punct };
  if (Object.hasOwn(SCALES, w)) return { kind: 'scale', value: SCALES[w]!, punct };
  return undefined;
}

/** Whether a word of `kind` can continue a number whose last word was `last`. */
function continues(last: Kind | undefined, kind: Kind, lastValue: number, value: number): boolean {
  switch (kind) {
    case 'small':
      return (
        last === undefined ||
        last === 'hundred' ||
        last === 'scale' ||
        (last === 'tens' && value < 10 && value > 0 && lastValue % 10 === 0)
      );
    case 'tens':
      return last === undefined || last === 'hundred' || last === 'scale';
    case 'hundred':
      return last === 'small' && lastValue > 0;
    case 'scale':
      return last !== undefined && last !== 'scale';
  }
}

/** Number words to digits: `twenty three` → `23`; the merged word spans its source words. */
export function inverseNormalize(words: readonly WordSegment[]): WordSegment[] {
  const out: WordSegment[] = [];
  let i = 0;
  while (i < words.length) {
    const first = classify(words[i]!.word);
    if (!first || first.kind === 'hundred' || first.kind === 'scale') {
      out.push({ ...words[i]! });
      i++;
      continue;
    }
    let total = 0;
    let current = 0;
    let last: Kind | undefined;
    let lastValue = 0;
    let j = i;
    let punct = '';
    while (j < words.length) {
      const c = classify(words[j]!.word);
      if (!c || !continues(last, c.kind, lastValue, c.value)) break;
      if (c.kind === 'small' || c.kind === 'tens') current += c.value;
      else if (c.kind === 'hundred') current *= 100;
      else {
        total += current * c.value;
        current = 0;
      }
      last = c.kind;
      lastValue = c.value;
      j++;
      punct = c.punct;
      if (punct !== '') break; // punctuation ends the number
    }
    out.push({
      start_time: words[i]!.start_time,
      end_time: words[j - 1]!.end_time,
      word: `${total + current}${punct}`,
    });
    i = j;
  }
  return out;
}

const EMAIL = /[^\s@]+@[^\s@]+\.[^\s@]+/u;
const DIGIT = /\p{Nd}/u;

export interface Redaction {
  words: WordSegment[];
  /** Labels of what was masked, comma-separated, sorted; empty when nothing was. */
  labels: string;
}

/** Mask e-mail addresses (`[EMAIL]`) and words holding digits (`[NUMBER]`). */
export function redact(words: readonly WordSegment[]): Redaction {
  const labels = new Set<string>();
  const out = words.map((w) => {
    if (EMAIL.test(w.word)) {
      labels.add('EMAIL');
      return { ...w, word: '[EMAIL]' };
    }
    if (DIGIT.test(w.word)) {
      labels.add('NUMBER');
      return { ...w, word: '[NUMBER]' };
    }
    return { ...w };
  });
  return { words: out, labels: [...labels].sort().join(',') };
}

export const joinWords = (words: readonly WordSegment[]): string => words.map((w) => w.word).join(' ');
