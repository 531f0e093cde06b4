// Deterministic words for speech regions: drawn from a fixed vocabulary seeded by where the
// region starts (the same audio always gives the same words), or taken from a transcript the
// caller registered. The emulator never pretends to recognise speech.

import type { Language } from '../../protocol/languages.ts';
import type { WordSegment } from '../../protocol/records.ts';
import type { SpeechRegion } from './regions.ts';
import { roundToMs } from './times.ts';

/** Speaking rate of generated words, and the provisional layout of a region in progress. */
export const WORDS_PER_SECOND = 2.5;
export const WORD_SLOT_SEC = 1 / WORDS_PER_SECOND;

// biome-ignore format: a vocabulary reads best as a block
const ENGLISH = [
  'the', 'we', 'you', 'they', 'it', 'is', 'was', 'will', 'can', 'go', 'see', 'make', 'take', 'time',
  'day', 'year', 'people', 'way', 'work', 'world', 'life', 'hand', 'part', 'place', 'week', 'company',
  'system', 'program', 'question', 'number', 'night', 'point', 'home', 'water', 'room', 'morning',
  'city', 'market', 'report', 'plan', 'today', 'after', 'before', 'really', 'good', 'new', 'first',
  'last', 'long', 'great', 'little', 'other', 'old', 'right', 'big', 'high', 'one', 'two', 'three',
  'four', 'five', 'seven', 'ten', 'twenty', 'thirty', 'hundred',
] as const;

// biome-ignore format: a vocabulary reads best as a block
const ARABIC = [
  'في', 'من', 'على', 'إلى', 'هذا', 'هذه', 'كان', 'يوم', 'اليوم', 'الناس', 'العالم', 'الوقت', 'كبير',
  'جديد', 'شكرا', 'مرحبا', 'نعم', 'لا', 'بيت', 'مدينة', 'عمل', 'سوق', 'تقرير', 'صباح', 'مساء', 'ماء',
  'طريق', 'سنة', 'واحد', 'اثنان', 'ثلاثة', 'عشرة',
] as const;

/** A 32-bit integer mix of two integers (murmur3's finalizer over a combined seed). */
export function mix(a: number, b: number): number {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ b;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  h = Math.imul(h ^ (h >>> 15), 0x846ca68b);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The `index`-th generated word of the region starting at `regionStart` seconds. */
export function generatedWord(language: Language, regionStart: number, index: number): string {
  const h = mix(Math.round(regionStart * 1000), index);
  const arabic = language === 'ar' || (language === 'codeswitch' && (h & 0x100) !== 0);
  const list: readonly string[] = arabic ? ARABIC : ENGLISH;
  return list[h % list.length]!;
}

/** How many words a closed region of `seconds` holds. */
export function wordCount(seconds: number): number {
  return Math.max(1, Math.round(seconds * WORDS_PER_SECOND));
}

/** Lay `words` evenly over [start, end], each word in the middle 80% of its slot. */
export function layoutWords(words: readonly string[], start: number, end: number): WordSegment[] {
  const n = words.length;
  if (n === 0) return [];
  const slot = Math.max(0, end - start) / n;
  return words.map((word, k) => ({
    start_time: roundToMs(start + slot * (k + 0.1)),
    end_time: roundToMs(start + slot * (k + 0.9)),
    word,
  }));
}

/** The generated words of a closed region. */
export function regionWords(language: Language, region: SpeechRegion): WordSegment[] {
  const n = wordCount(region.end - region.start);
  const words = Array.from({ length: n }, (_, i) => generatedWord(language, region.start, i));
  return layoutWords(words, region.start, region.end);
}

export function tokenize(text: string): string[] {
  return text.split(/\s+/u).filter((t) => t !== '');
}

/**
 * Words per region for a complete recording: generated, or the registered transcript spread
 * over the regions in proportion to their durations (over the whole recording when it has no
 * speech regions).
 */
export function recordingWords(
  regions: readonly SpeechRegion[],
  duration: number,
  language: Language,
  transcript: string | undefined,
): { region: SpeechRegion; words: WordSegment[] }[] {
  if (transcript === undefined)
    return regions.map((region) => ({ region, words: regionWords(language, region) }));
  const tokens = tokenize(transcript);
  const spans = regions.length > 0 ? regions : duration > 0 ? [{ start: 0, end: duration }] : [];
  if (spans.length === 0) return [];
  const total = spans.reduce((sum, r) => sum + (r.end - r.start), 0);
  let taken = 0;
  let covered = 0;
  return spans.map((region, i) => {
    covered += region.end - region.start;
    const upto =
      i === spans.length - 1 ? tokens.length : Math.floor((tokens.length * covered) / (total || 1));
    const mine = tokens.slice(taken, upto);
    taken = Math.max(taken, upto);
    return { region, words: layoutWords(mine, region.start, region.end) };
  });
}

/** A registered transcript consumed region by region as a live stream goes on. */
export class TranscriptQueue {
  readonly #tokens: string[];
  #next = 0;

  constructor(text: string) {
    this.#tokens = tokenize(text);
  }

  /** The next `n` words, consumed. */
  take(n: number): string[] {
    const out = this.#tokens.slice(this.#next, this.#next + n);
    this.#next += out.length;
    return out;
  }

  /** The next `n` words, not consumed. */
  peek(n: number): string[] {
    return this.#tokens.slice(this.#next, this.#next + n);
  }

  /** Every word left, consumed. */
  rest(): string[] {
    return this.take(this.#tokens.length);
  }
}
