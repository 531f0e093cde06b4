// toCaptions(): words in (live utterance events, or a batch of word segments or a V2 `done`
// job), SRT or WebVTT text out. Cues break at speaker changes, sentence ends and pauses, fit the
// line limits, and stay on screen long enough to be read.

import { Transform, type TransformCallback } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { JobV2Done } from '../protocol/jobs.ts';
import type { WordSegment } from '../protocol/records.ts';
import { alignSpeakers, type SpeakerWord } from './align-speakers.ts';

/** How words are laid out as captions: format, line length, cue timing. */
export interface CaptionOptions {
  /** SubRip or WebVTT. */
  format: 'srt' | 'vtt';
  /** Characters per line at most. Default 42. */
  maxCharsPerLine?: number;
  /** Lines per cue at most. Default 2. */
  maxLines?: number;
  /** Reading speed: a cue stays up at least chars / this seconds (when the next cue allows). Default 17. */
  maxCharsPerSecond?: number;
  /** Shortest time a cue stays up (when the next cue allows), in milliseconds. Default 1000. */
  minDurationMs?: number;
  /** Longest a cue lasts, in milliseconds, unless its words take longer. Default 7000. */
  maxDurationMs?: number;
  /** A pause longer than this between words starts a new cue. Default 1500. */
  maxPauseMs?: number;
  /**
   * Show speakers (VTT `<v Speaker>`, SRT `Speaker: ` prefix) when words carry them. Default true.
   * The label takes no room from the words: both formats lay out and time the same words alike.
   */
  speakerLabels?: boolean;
  /** The audio's length in milliseconds, when known: no cue ends after it. */
  audioDurationMs?: number;
  /**
   * Live (utterance events): the longest a cue stays up after its last word is spoken, the next
   * cue not being known yet. A later cue never overlaps it, so this bounds how late a cue can
   * start after its first word, however fast the speech. Default 1000.
   */
  liveHoldMs?: number;
}

/** One caption cue. */
export interface Cue {
  /** Milliseconds from the start of the audio. */
  startMs: number;
  /** Milliseconds from the start of the audio. */
  endMs: number;
  /** The cue's text, one string per line. */
  lines: string[];
  /** The speaker of its words, when known. */
  speaker: string | null;
}

/** A word to lay out as captions: its times in seconds, and its speaker when known. */
export type CaptionWord = WordSegment & { speaker?: string | null };

interface Layout {
  maxCharsPerLine: number;
  maxLines: number;
  cps: number;
  minMs: number;
  maxMs: number;
  maxPauseMs: number;
  liveHoldMs: number;
  labels: boolean;
  /** A speaker label takes room on the first line (on an overlay, which writes it there). */
  labelsInText: boolean;
  /** No cue ends after this (the audio's end), when known. */
  audioEndMs: number | undefined;
}

const SENTENCE_END = /[.!?…。؟]["'”’»)\]]*$/u;

function positive(name: string, value: number): number {
  if (!(value > 0) || !Number.isFinite(value))
    throw new InvalidArgumentError(`toCaptions: ${name} must be positive`);
  return value;
}

function nonNegative(name: string, value: number): number {
  if (!(value >= 0) || !Number.isFinite(value))
    throw new InvalidArgumentError(`toCaptions: ${name} must be a number of milliseconds >= 0`);
  return value;
}

function resolveLayout(options: CaptionOptions): Layout {
  if (options.format !== 'srt' && options.format !== 'vtt') {
    throw new InvalidArgumentError(
      `toCaptions: format must be 'srt' or 'vtt', got ${JSON.stringify(options.format)}`,
    );
  }
  const layout: Layout = {
    maxCharsPerLine: positive('maxCharsPerLine', options.maxCharsPerLine ?? 42),
    maxLines: positive('maxLines', options.maxLines ?? 2),
    cps: positive('maxCharsPerSecond', options.maxCharsPerSecond ?? 17),
    minMs: positive('minDurationMs', options.minDurationMs ?? 1000),
    maxMs: positive('maxDurationMs', options.maxDurationMs ?? 7000),
    maxPauseMs: positive('maxPauseMs', options.maxPauseMs ?? 1500),
    liveHoldMs: positive('liveHoldMs', options.liveHoldMs ?? 1000),
    labels: options.speakerLabels ?? true,
    labelsInText: false,
    audioEndMs:
      options.audioDurationMs === undefined
        ? undefined
        : nonNegative('audioDurationMs', options.audioDurationMs),
  };
  if (layout.minMs > layout.maxMs)
    throw new InvalidArgumentError('toCaptions: minDurationMs exceeds maxDurationMs');
  return layout;
}

/** Greedy wrap of words into lines of at most `width` characters (a longer word gets its own line). */
function wrap(words: readonly string[], width: number, firstLinePrefix: number): string[] {
  const lines: string[] = [];
  let line = '';
  let room = width - firstLinePrefix;
  for (const w of words) {
    if (line === '') line = w;
    else if (line.length + 1 + w.length <= room) line += ` ${w}`;
    else {
      lines.push(line);
      line = w;
      room = width;
    }
  }
  if (line !== '') lines.push(line);
  return lines;
}

/**
 * Provisional text (a partial result) laid out as a cue would be, keeping its tail: the last
 * `maxLines` lines of the greedy wrap, so that a long utterance rolls up instead of growing.
 */
export function tailLines(text: string, maxCharsPerLine: number, maxLines: number): string[] {
  const words = text
    .trim()
    .split(/\s+/)
    .filter((w) => w !== '');
  return wrap(words, maxCharsPerLine, 0).slice(-maxLines);
}

/**
 * Pure core: words in time order to timed cues. A cue never overlaps the one before it; within
 * one `add` call a cue's end is held back to the next cue's start. Live, more words follow in
 * later calls: the last cue of a call stays at most `liveHoldMs` past its last word, or each
 * cue would push the next one later without bound when speech outpaces the reading speed.
 */
export class CaptionBuilder {
  /** @internal */
  readonly layout: Layout;
  #prevEndMs = 0;

  /** `labelsInText`: lay out as if speaker labels were written into the first line (an overlay). */
  constructor(options: CaptionOptions, { labelsInText = false }: { labelsInText?: boolean } = {}) {
    this.layout = resolveLayout(options);
    if (labelsInText) this.layout.labelsInText = true;
  }

  /**
   * Lay out one batch of words: an utterance (`live`: more will follow), or a whole transcript.
   * @throws InvalidArgumentError when a word is not `{ word: string, start_time, end_time }`
   * with finite times (nothing is laid out then).
   */
  add(words: readonly CaptionWord[], options: { live?: boolean } = {}): Cue[] {
    checkWords(words);
    const L = this.layout;
    const groups: { words: CaptionWord[]; speaker: string | null }[] = [];
    let current: { words: CaptionWord[]; speaker: string | null } | undefined;
    const prefixFor = (speaker: string | null) =>
      L.labelsInText && L.labels && speaker ? speaker.length + 2 : 0;
    for (const raw of words) {
      // White space inside a word (a newline, a blank line) would end the cue block early.
      const text = raw.word.trim().replace(/\s+/g, ' ');
      if (text === '') continue;
      const w = { ...raw, word: text };
      const speaker = raw.speaker ?? null;
      if (current) {
        const last = current.words[current.words.length - 1]!;
        const texts = [...current.words.map((x) => x.word), text];
        const lines = wrap(texts, L.maxCharsPerLine, prefixFor(current.speaker));
        const chars = lines.reduce((n, l) => n + l.length, prefixFor(current.speaker));
        // Room on screen, and time to read it within the longest a cue may stay.
        const fits = lines.length <= L.maxLines && chars <= (L.cps * L.maxMs) / 1000;
        const tooLong = (w.end_time - current.words[0]!.start_time) * 1000 > L.maxMs;
        const pause = (w.start_time - last.end_time) * 1000 > L.maxPauseMs;
        if (speaker !== current.speaker || !fits || tooLong || pause) current = undefined;
      }
      if (!current) {
        current = { words: [], speaker };
        groups.push(current);
      }
      current.words.push(w);
      if (SENTENCE_END.test(text)) current = undefined;
    }
    const cues: Cue[] = [];
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i]!;
      const next = groups[i + 1];
      const startMs = Math.max(Math.round(g.words[0]!.start_time * 1000), this.#prevEndMs);
      const spokenEnd = Math.round(Math.max(...g.words.map((w) => w.end_time)) * 1000);
      const lines = wrap(
        g.words.map((w) => w.word),
        L.maxCharsPerLine,
        prefixFor(g.speaker),
      );
      const chars = lines.reduce((n, l) => n + l.length, 0) + prefixFor(g.speaker);
      let endMs = Math.max(spokenEnd, startMs + L.minMs, startMs + Math.ceil((chars / L.cps) * 1000));
      endMs = Math.min(endMs, startMs + Math.max(L.maxMs, spokenEnd - startMs));
      if (next) endMs = Math.min(endMs, Math.max(spokenEnd, Math.round(next.words[0]!.start_time * 1000)));
      else if (options.live) endMs = Math.min(endMs, spokenEnd + L.liveHoldMs);
      // Not past the audio's end, not even to be read.
      if (L.audioEndMs !== undefined) endMs = Math.min(endMs, Math.round(L.audioEndMs));
      endMs = Math.max(endMs, startMs + 1);
      this.#prevEndMs = endMs;
      cues.push({ startMs, endMs, lines, speaker: g.speaker });
    }
    return cues;
  }
}

/**
 * Words as captions need them: a string and finite times. A word without times would print
 * `NaN:NaN:NaN,NaN` into the file, and one that is not an object threw a TypeError.
 */
function checkWords(words: readonly CaptionWord[]): void {
  if (!Array.isArray(words)) throw new InvalidArgumentError('captions: words must be an array');
  for (let i = 0; i < words.length; i++) {
    const w = words[i] as Partial<CaptionWord> | null;
    if (
      typeof w !== 'object' ||
      w === null ||
      typeof w.word !== 'string' ||
      !Number.isFinite(w.start_time) ||
      !Number.isFinite(w.end_time)
    ) {
      throw new InvalidArgumentError(
        `captions: word ${i} must be { word: string, start_time: number, end_time: number } with finite times, got ${String(JSON.stringify(w)).slice(0, 200)}`,
      );
    }
  }
}

function timestamp(time: number, separator: ',' | '.'): string {
  // Whole milliseconds: fractional options (minDurationMs: 1000.5) must not print `01,0.5`.
  const ms = Math.round(time);
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor(ms / 60_000) % 60;
  const s = Math.floor(ms / 1000) % 60;
  const f = ms % 1000;
  const two = (n: number) => String(n).padStart(2, '0');
  return `${two(h)}:${two(m)}:${two(s)}${separator}${String(f).padStart(3, '0')}`;
}

/**
 * Text as one line of a cue: line breaks of any kind and other control characters (from a word
 * or a speaker label) become spaces, so no label or word can end a cue early (a blank line) or
 * start a fake one.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
const oneLine = (text: string) => text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ');

const escapeVtt = (text: string) =>
  oneLine(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** One SRT cue block (with its blank line). `index` counts from 1. */
export function formatSrtCue(cue: Cue, index: number, speakerLabels = true): string {
  const lines = [...cue.lines];
  if (speakerLabels && cue.speaker) lines[0] = `${cue.speaker}: ${lines[0]}`;
  // A blank line or a line with "-->" would break the block.
  const body = lines.map((l) => oneLine(l).replace(/-->/g, '->')).join('\n');
  return `${index}\n${timestamp(cue.startMs, ',')} --> ${timestamp(cue.endMs, ',')}\n${body}\n\n`;
}

export const VTT_HEADER = 'WEBVTT\n\n';

/** One WebVTT cue block (with its blank line). */
export function formatVttCue(cue: Cue, speakerLabels = true): string {
  const lines = cue.lines.map(escapeVtt);
  if (speakerLabels && cue.speaker) lines[0] = `<v ${escapeVtt(cue.speaker)}>${lines[0]}`;
  return `${timestamp(cue.startMs, '.')} --> ${timestamp(cue.endMs, '.')}\n${lines.join('\n')}\n\n`;
}

/** The words of a batch input: word segments, or a V2 job (its envelope or `data`). */
export function wordsOf(input: unknown): CaptionWord[] | undefined {
  if (Array.isArray(input)) return input as CaptionWord[];
  if (typeof input !== 'object' || input === null) return undefined;
  const value = input as Record<string, unknown>;
  const job = (
    typeof value.data === 'object' && value.data !== null ? value.data : value
  ) as Partial<JobV2Done>;
  if (job.status !== 'done') return undefined;
  const words = job.final_word_segments?.length ? job.final_word_segments : (job.asr_word_segments ?? []);
  const segments = job.diarization_segments ?? [];
  return segments.length > 0 ? alignSpeakers(words, segments) : words;
}

/** Captions of a whole batch of words (or a V2 `done` job) as one string. */
export function renderCaptions(input: readonly CaptionWord[] | JobV2Done, options: CaptionOptions): string {
  const builder = new CaptionBuilder(options);
  const cues = builder.add(wordsOf(input) ?? []);
  const labels = builder.layout.labels;
  if (options.format === 'vtt') return VTT_HEADER + cues.map((c) => formatVttCue(c, labels)).join('');
  return cues.map((c, i) => formatSrtCue(c, i + 1, labels)).join('');
}

/**
 * A Transform from words to caption text (object mode in, text out). Accepts `utterance` events
 * (from `assembleTranscript` or `alignSpeakersStream`; cues go out as soon as an utterance is
 * committed), arrays of word segments (`WordSegment[]`/`SpeakerWord[]`) and V2 `done` jobs;
 * other events (`partial`, `final`, diarization) are ignored. WebVTT output starts with its
 * header, given at once (before any input, so a stream cut before its first cue still has it).
 */
export function toCaptions(options: CaptionOptions): Transform {
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgumentError("toCaptions needs its options: toCaptions({ format: 'vtt' | 'srt' })");
  const builder = new CaptionBuilder(options);
  const labels = builder.layout.labels;
  let index = 0;
  let headerSent = false;
  const emit = (stream: Transform, cues: Cue[]) => {
    if (options.format === 'vtt' && !headerSent) {
      headerSent = true;
      stream.push(VTT_HEADER);
    }
    for (const cue of cues) {
      stream.push(options.format === 'vtt' ? formatVttCue(cue, labels) : formatSrtCue(cue, ++index, labels));
    }
  };
  const captions = new Transform({
    writableObjectMode: true,
    transform(this: Transform, input: unknown, _encoding: BufferEncoding, callback: TransformCallback) {
      const event = input as { type?: unknown; words?: unknown };
      let words: CaptionWord[] | undefined;
      if (event && event.type === 'utterance' && Array.isArray(event.words))
        words = event.words as SpeakerWord[];
      else if (!event || typeof event.type !== 'string') words = wordsOf(input);
      if (words === undefined && !(event && typeof event.type === 'string')) {
        callback(
          new InvalidArgumentError('toCaptions: expected utterance events, word segments or a V2 done job'),
        );
        return;
      }
      if (words && words.length > 0) {
        let cues: Cue[];
        try {
          cues = builder.add(words, { live: event?.type === 'utterance' });
        } catch (err) {
          callback(err as Error);
          return;
        }
        emit(this, cues);
      }
      callback();
    },
    flush(this: Transform, callback: TransformCallback) {
      emit(this, []);
      callback();
    },
  });
  // The header at once: a live file whose pipeline fails (or is cut) before its first cue is
  // still a WebVTT file, not an empty one players refuse.
  if (options.format === 'vtt') emit(captions, []);
  return captions;
}
