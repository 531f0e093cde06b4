// alignSpeakers(): words plus speaker segments to speaker-labelled words, by overlap, with the
// interface's V1 force-align rule (src/protocol/speaker-rule.ts) for words outside every segment; and a live stream form that
// labels committed words once the diarization timeline has closed past them.

import { EventEmitter } from 'node:events';
import { Transform, type TransformCallback, Writable } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { WordSegment } from '../protocol/records.ts';
import { SegmentIndex } from '../protocol/segment-index.ts';
import { mostOverlapping, UNKNOWN_SPEAKER } from '../protocol/speaker-rule.ts';
import type { FinalEvent, PartialEvent, TranscriptEvent, UtteranceEvent } from './assemble-transcript.ts';
import type { DiarizationEvent, SpeakerSegment } from './merge-diarization.ts';

/** A word with its speaker: null when there were no segments at all. */
export interface SpeakerWord extends WordSegment {
  speaker: string | null;
}

/** How {@link alignSpeakers} and {@link alignSpeakersStream} pick each word's speaker. */
export interface AlignSpeakersOptions {
  /**
   * `'overlap'` (default): the speaker whose segments overlap the word longest (ties: the
   * earlier segment); a word overlapping none uses the rule below. `'v1'`: exactly the V1
   * lookup: the segment containing the word's start, else the rule below.
   */
  mode?: 'overlap' | 'v1';
  /**
   * For a word outside every segment: true (default, as V1): the speaker of the segment boundary
   * nearest the word's midpoint, ties to the earlier segment; false: `UNKNOWN_SPEAKER`.
   */
  forceAlign?: boolean;
}

/** Whole microseconds: equal durations in decimal seconds compare equal despite binary fractions. */
const micros = (seconds: number) => Math.round(seconds * 1e6);

function labelOne(
  word: WordSegment,
  index: SegmentIndex<SpeakerSegment>,
  options: AlignSpeakersOptions,
): string {
  if ((options.mode ?? 'overlap') === 'v1') return index.v1Speaker(word, options.forceAlign !== false)!;
  const start = micros(word.start_time);
  const end = micros(word.end_time);
  // A zero-length word counts as overlapping the segment holding its instant.
  const instant = !(end > start);
  // Overlap per speaker, in the order of each speaker's first overlapping segment. Only segments
  // starting before the word ends (at or before its instant) and ending after it starts can
  // overlap it: the index visits just those, in order, rather than every segment.
  const bySpeaker = new Map<string, number>();
  index.each(
    instant ? (from) => micros(from) <= start : (from) => micros(from) < end,
    (to) => micros(to) > start,
    (s) => {
      const from = micros(s.start_time);
      const to = micros(s.end_time);
      const overlap = instant
        ? Number(start >= from && start < to)
        : Math.min(end, to) - Math.max(start, from);
      if (overlap > 0) bySpeaker.set(s.speaker, (bySpeaker.get(s.speaker) ?? 0) + overlap);
      return false;
    },
  );
  const best = mostOverlapping(bySpeaker);
  if (best !== undefined) return best;
  return options.forceAlign === false ? UNKNOWN_SPEAKER : index.nearestBoundarySpeaker(word);
}

/** Label each word with a speaker from `segments` (see `AlignSpeakersOptions`). */
export function alignSpeakers(
  words: readonly WordSegment[],
  segments: readonly SpeakerSegment[],
  options: AlignSpeakersOptions = {},
): SpeakerWord[] {
  return labelWords(words, new SegmentIndex(segments), options);
}

/** Indexed once: a word costs O(log segments) a segment it overlaps, not a pass over every segment. */
function labelWords(
  words: readonly WordSegment[],
  index: SegmentIndex<SpeakerSegment>,
  options: AlignSpeakersOptions,
): SpeakerWord[] {
  return words.map((w) => ({ ...w, speaker: index.size === 0 ? null : labelOne(w, index, options) }));
}

/** A closed segment of a SpeakerTimeline. */
interface Closed {
  segment: SpeakerSegment;
  /** Removed by `prune()`; left in `#closed` until most are, so a prune costs what it removes. */
  pruned: boolean;
  /** Its position among the segments the timeline's index was made of. */
  slot: number;
}

/** Whether `a` leaves a timeline before `b` as prune() raises its bound: NaN ends go at any bound. */
function endsBefore(a: Closed, b: Closed): boolean {
  const x = a.segment.end_time;
  const y = b.segment.end_time;
  return x < y || (Number.isNaN(x) && !Number.isNaN(y));
}

/** A binary min-heap of closed segments by end (`endsBefore`): the next to prune on top. */
class ByEnd {
  readonly #heap: Closed[] = [];

  get top(): Closed | undefined {
    return this.#heap[0];
  }

  push(entry: Closed): void {
    const heap = this.#heap;
    let i = heap.push(entry) - 1;
    while (i > 0) {
      const parent = (i - 1) >>> 1;
      if (!endsBefore(entry, heap[parent]!)) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = entry;
  }

  pop(): void {
    const heap = this.#heap;
    const last = heap.pop()!;
    if (heap.length === 0) return;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= heap.length) break;
      if (child + 1 < heap.length && endsBefore(heap[child + 1]!, heap[child]!)) child++;
      if (!endsBefore(heap[child]!, last)) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = last;
  }
}

/** The events of a SpeakerTimeline: its EventEmitter is typed by this map. */
export interface SpeakerTimelineEvents {
  /** After each diarization event taken in, and at `end()`: read `segments()`, `closedUntil`. */
  update: [];
}

/**
 * The speaker timeline as far as diarization has got: closed segments (final) and the
 * provisional tail. Feed it `mergeDiarization()` events (`update`, or the `writable()` sink);
 * it emits `'update'` after each.
 */
export class SpeakerTimeline extends EventEmitter<SpeakerTimelineEvents> {
  /** In the order received; `pruned` ones are left out of every answer. */
  #closed: Closed[] = [];
  #pruned = 0;
  /** The closed segments not pruned, by end. */
  readonly #byEnd = new ByEnd();
  /**
   * `segments()` indexed for `label()`, less what `prune()` removed since; undefined once a
   * segment came or the tail changed. Kept between utterances, so a timeline known far ahead of
   * the transcript is indexed once, not for every utterance.
   */
  #index: SegmentIndex<SpeakerSegment> | undefined;
  /** 'segment' events received: the first so many segments of a 'timeline' event are known. */
  #received = 0;
  #tail: SpeakerSegment[] = [];
  /** Speakers are final up to here (seconds; the stream starts at 0). */
  #closedUntil = 0;
  #ended = false;

  /** Seconds up to which speakers are final. */
  get closedUntil(): number {
    return this.#ended ? Number.POSITIVE_INFINITY : this.#closedUntil;
  }

  /**
   * Whether the diarization source ended (its timeline came, or `end()` was called): every speaker
   * is final.
   */
  get ended(): boolean {
    return this.#ended;
  }

  /** Closed segments then the provisional tail. */
  segments(): SpeakerSegment[] {
    const segments: SpeakerSegment[] = [];
    for (const closed of this.#closed) if (!closed.pruned) segments.push(closed.segment);
    // A loop, not push(...): spread arguments overflow the call stack past ~125,000 segments.
    for (const segment of this.#tail) segments.push(segment);
    return segments;
  }

  /**
   * Apply one event of `mergeDiarization()`: a closed segment, the new provisional tail, or the
   * final timeline (after which the timeline is complete). Emits `update`.
   */
  update(event: DiarizationEvent): void {
    this.#index = undefined;
    if (event.type === 'segment') {
      this.#close(event.segment);
      this.#received++;
      this.#closedUntil = Math.max(this.#closedUntil, event.segment.end_time);
    } else if (event.type === 'active') {
      this.#tail = event.segments;
      // The open turn is in the tail until another speaker closes; its closed part is final.
      if (event.closedUntil !== undefined) this.#closedUntil = Math.max(this.#closedUntil, event.closedUntil);
    } else {
      // Every closed segment in order, those already received first (none at all with
      // mergeDiarization's keepTimeline: false): add only the others, keep what was received.
      // A loop, not push(...): spread arguments overflow the call stack past ~125,000 segments.
      for (let i = this.#received; i < event.segments.length; i++) this.#close(event.segments[i]!);
      this.#received = Math.max(this.#received, event.segments.length);
      this.#tail = event.provisional;
      this.#ended = true;
    }
    this.emit('update');
  }

  /** The diarization source ended without its timeline: label with what is known. */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.emit('update');
  }

  /** Forget closed segments that ended before `seconds` (for endless streams). */
  prune(seconds: number): void {
    // Those whose end is not at or after `seconds`: NaN ends, and all of them for a NaN bound.
    for (let next = this.#byEnd.top; next && !(next.segment.end_time >= seconds); next = this.#byEnd.top) {
      this.#byEnd.pop();
      next.pruned = true;
      this.#pruned++;
      this.#index?.remove(next.slot);
    }
    if (this.#pruned > this.#closed.length / 2) {
      this.#closed = this.#closed.filter((closed) => !closed.pruned);
      this.#pruned = 0;
    }
  }

  /**
   * `alignSpeakers(words, this.segments(), options)`, from the segments indexed when last changed.
   * @internal
   */
  label(words: readonly WordSegment[], options: AlignSpeakersOptions): SpeakerWord[] {
    if (!this.#index) {
      this.#index = new SegmentIndex(this.segments());
      let slot = 0;
      for (const closed of this.#closed) if (!closed.pruned) closed.slot = slot++;
    }
    return labelWords(words, this.#index, options);
  }

  #close(segment: SpeakerSegment): void {
    const closed = { segment, pruned: false, slot: -1 };
    this.#closed.push(closed);
    this.#byEnd.push(closed);
  }

  /** An object-mode Writable of `DiarizationEvent`s feeding this timeline. */
  writable(): Writable {
    return new Writable({
      objectMode: true,
      write: (event: DiarizationEvent, _encoding, callback) => {
        this.update(event);
        callback();
      },
      final: (callback) => {
        this.end();
        callback();
      },
    });
  }
}

/** Options of {@link alignSpeakersStream}. */
export interface AlignSpeakersStreamOptions extends AlignSpeakersOptions {
  /** The speaker timeline the words are labelled from (fed by diarization events). */
  timeline: SpeakerTimeline;
  /**
   * Seconds of transcript after an utterance before it stops waiting for the closed timeline
   * and is labelled with what is known (closed and provisional segments). Default 10.
   */
  maxLagSec?: number;
  /** Seconds of closed segments kept behind the last labelled word. Default 60. */
  keepSec?: number;
  /** At the end of the transcript, longest wait (ms) for the timeline to close past it. Default 10000. */
  flushTimeoutMs?: number;
  /** Keep labelled words for the `final` event (default true; false for endless streams). */
  keepWords?: boolean;
}

/** An utterance event whose words carry speakers. */
export interface SpeakerUtteranceEvent extends Omit<UtteranceEvent, 'words'> {
  words: SpeakerWord[];
}

/** The final event with every labelled word. */
export interface SpeakerFinalEvent extends Omit<FinalEvent, 'words'> {
  words: SpeakerWord[];
}

/**
 * A Transform (object mode) from transcript events to the same events with speaker-labelled
 * words. An utterance waits (without holding back its writer) until the timeline has closed past
 * its last word, or the transcript has run `maxLagSec` past it; partials pass through unlabelled,
 * at once unless an utterance before them is waiting: then the latest waits behind it (each
 * replaces the last), so none overtakes the words it follows.
 */
export function alignSpeakersStream(options: AlignSpeakersStreamOptions): Transform {
  const timeline = options?.timeline;
  if (!(timeline instanceof SpeakerTimeline))
    throw new InvalidArgumentError('alignSpeakersStream: options.timeline must be a SpeakerTimeline');
  const maxLag = options.maxLagSec ?? 10;
  const keep = options.keepSec ?? 60;
  const keepWords = options.keepWords ?? true;
  /** Events waiting, in order; at most one partial (a newer one replaces it). */
  const queue: Array<UtteranceEvent | FinalEvent | PartialEvent> = [];
  const labelled: SpeakerWord[] = [];
  let flushCallback: TransformCallback | undefined;
  let flushTimer: NodeJS.Timeout | undefined;
  let stream: Transform;

  const lastEnd = (e: UtteranceEvent) => e.end ?? e.start ?? 0;
  const settled = (e: UtteranceEvent | FinalEvent | PartialEvent) =>
    e.type !== 'utterance' || timeline.closedUntil >= lastEnd(e);
  const stop = () => {
    timeline.off('update', onUpdate);
    if (flushTimer) clearTimeout(flushTimer);
    flushTimer = undefined;
  };

  const release = (force: boolean) => {
    while (queue.length > 0) {
      const head = queue[0]!;
      if (!force && !settled(head)) {
        // Waiting is bounded: once the transcript is maxLag past this utterance, label it now.
        const newest = queue.reduce((t, e) => (e.type === 'utterance' ? Math.max(t, lastEnd(e)) : t), 0);
        if (head.type !== 'utterance' || newest - lastEnd(head) <= maxLag) break;
      }
      queue.shift();
      if (head.type === 'utterance') {
        const words = timeline.label(head.words, options);
        // A loop, not push(...words): an utterance of 150,000 words overflowed the call stack.
        if (keepWords) for (const word of words) labelled.push(word);
        stream.push({ ...head, words } satisfies SpeakerUtteranceEvent);
        timeline.prune(lastEnd(head) - keep);
      } else if (head.type === 'partial') {
        stream.push(head);
      } else {
        stream.push({ ...head, words: keepWords ? labelled : [] } satisfies SpeakerFinalEvent);
      }
    }
    if (flushCallback && queue.length === 0) {
      const cb = flushCallback;
      flushCallback = undefined;
      stop();
      cb();
    }
  };
  const onUpdate = () => release(false);
  timeline.on('update', onUpdate);

  stream = new Transform({
    objectMode: true,
    transform(event: TranscriptEvent, _encoding: BufferEncoding, callback: TransformCallback) {
      if (event.type === 'partial') {
        // Provisional text passes through unlabelled, but not ahead of a waiting utterance (a
        // viewer clears it when that utterance lands); a newer partial replaces a waiting one.
        if (queue.length === 0) this.push(event);
        else {
          const waiting = queue.findIndex((e) => e.type === 'partial');
          if (waiting !== -1) queue.splice(waiting, 1);
          queue.push(event);
        }
      } else queue.push(event);
      release(false);
      callback();
    },
    flush(callback: TransformCallback) {
      flushCallback = callback;
      flushTimer = setTimeout(() => release(true), options.flushTimeoutMs ?? 10_000);
      release(timeline.ended);
    },
    destroy(err, callback) {
      stop();
      callback(err);
    },
  });
  return stream;
}
