// mergeDiarization(): realtime diarization records in, a stable speaker timeline out. Closed
// segments are final (emitted once, never changed), adjacent same-speaker ones merged; the
// active tail is provisional and each snapshot replaces the last.

import type { Transform } from 'node:stream';
import { IncompleteStreamError, InvalidArgumentError, ProtocolError } from '../protocol/errors.ts';
import type { DiarizationSegment } from '../protocol/jobs.ts';
import {
  type DiarizationRecord,
  type LiveDiarizationSegment,
  parseDiarizationRecord,
} from '../protocol/records.ts';
import { coreTransform } from './core-transform.ts';

/** A speaker turn with both ends known (seconds from the start of the stream). */
export type SpeakerSegment = DiarizationSegment;

/** A closed segment, final: it never changes and is emitted once. */
export interface SegmentEvent {
  type: 'segment';
  segment: SpeakerSegment;
}

/**
 * The provisional tail, replacing the previous one: the closed turn still open to merging (it
 * may grow) followed by the service's active segments.
 */
export interface ActiveEvent {
  type: 'active';
  segments: SpeakerSegment[];
  /**
   * Seconds up to which the closed segments received reach: speakers before it are final, the
   * open turn's included, even while no other speaker has closed a turn to emit it.
   */
  closedUntil?: number;
}

/** The stream ended (`is_final`): every closed segment, and the tail that stayed provisional. */
export interface TimelineEvent {
  type: 'timeline';
  segments: SpeakerSegment[];
  provisional: SpeakerSegment[];
}

/**
 * What {@link mergeDiarization} emits: a closed speaker turn, the new provisional tail, or the
 * final timeline.
 */
export type DiarizationEvent = SegmentEvent | ActiveEvent | TimelineEvent;

/** Options of {@link mergeDiarization}. */
export interface MergeDiarizationOptions {
  /** Merge same-speaker neighbours only when the gap between them is at most this. Default: any gap. */
  maxGapSec?: number;
  /**
   * Where the stream ends (seconds), for a last turn without `end_time`: a number, or a function
   * asked at `is_final` (e.g. the audio sent so far). Default: as far as the closed segments
   * reach, which for a service that sends no end times is the last turn's own start (so give it).
   */
  streamEndSec?: number | (() => number | undefined);
  /** Check each record's shape (default true). */
  validate?: boolean;
  /** Keep closed segments for the `timeline` event (default true; false for endless streams). */
  keepTimeline?: boolean;
}

/**
 * Pure core. A live segment may lack `end_time` (the interface shows only `start_time` and the
 * speaker): its end is then the start of the closed segment after it (never of an active one:
 * provisional data does not become part of a closed segment), or for the last one, the start of
 * the final record's active tail, else `streamEndSec`. A merged turn is emitted when a later
 * closed segment of another speaker (or beyond `maxGapSec`) shows it cannot grow.
 */
export class DiarizationMerger {
  readonly #maxGap: number;
  readonly #keep: boolean;
  readonly #streamEnd: MergeDiarizationOptions['streamEndSec'];
  /** The current closed turn, still open to merging; its end may be unknown. */
  #open: { start: number; end: number | undefined; speaker: string } | undefined;
  #active: SpeakerSegment[] = [];
  #closed: SpeakerSegment[] = [];
  /** How far the closed segments received reach (seconds): their latest end, or start. */
  #reach = 0;
  #final = false;

  constructor(options: Pick<MergeDiarizationOptions, 'maxGapSec' | 'keepTimeline' | 'streamEndSec'> = {}) {
    const maxGap = options.maxGapSec ?? Number.POSITIVE_INFINITY;
    if (!(typeof maxGap === 'number' && maxGap >= 0))
      throw new InvalidArgumentError(
        `mergeDiarization: maxGapSec must be a number of seconds >= 0, got ${maxGap}`,
      );
    this.#maxGap = maxGap;
    this.#keep = options.keepTimeline ?? true;
    this.#streamEnd = options.streamEndSec;
  }

  /** Whether the final record arrived. */
  get finished(): boolean {
    return this.#final;
  }

  /**
   * The events one diarization record makes: a `segment` for each turn it shows cannot grow
   * (the final record: the open turn too), then `active` (the new provisional tail) or, for the
   * final record, `timeline`.
   * @throws ProtocolError when a record comes after the final record.
   */
  push(record: DiarizationRecord): DiarizationEvent[] {
    if (this.#final)
      throw new ProtocolError('ERR_INVALID_RECORD', 'diarization record after the final record');
    const events: DiarizationEvent[] = [];
    const closed = [...record.final_segments].sort((a, b) => a.start_time - b.start_time);
    for (const seg of closed) {
      this.#close(seg, events);
      this.#reach = Math.max(this.#reach, seg.start_time, seg.end_time ?? seg.start_time);
    }
    const activeRaw = [...record.active_segments].sort((a, b) => a.start_time - b.start_time);
    this.#active = activeRaw.map((s, i) => ({
      start_time: s.start_time,
      end_time: endOf(s, activeRaw[i + 1]),
      speaker: s.speaker,
    }));
    if (record.is_final) {
      this.#final = true;
      const provisional = this.#active;
      if (this.#open) events.push(this.#emitOpen(provisional[0]?.start_time ?? this.#streamEndSec()));
      events.push({ type: 'timeline', segments: this.#closed, provisional });
    } else {
      events.push({ type: 'active', segments: this.tail(), closedUntil: this.#reach });
    }
    return events;
  }

  /** The provisional tail now: the open turn (if any), then the active segments. */
  tail(): SpeakerSegment[] {
    const open = this.#open;
    if (!open) return [...this.#active];
    const end = open.end ?? this.#active[0]?.start_time ?? this.#reach;
    return [
      { start_time: open.start, end_time: Math.max(open.start, end), speaker: open.speaker },
      ...this.#active,
    ];
  }

  /**
   * End of input: no events.
   * @throws IncompleteStreamError unless the final record arrived.
   */
  end(): DiarizationEvent[] {
    if (!this.#final) {
      throw new IncompleteStreamError('diarization records ended without a final record (is_final: true)');
    }
    return [];
  }

  #close(seg: LiveDiarizationSegment, events: DiarizationEvent[]): void {
    const open = this.#open;
    if (open) {
      if (open.end === undefined) open.end = Math.max(open.start, seg.start_time);
      const gap = seg.start_time - open.end;
      if (seg.speaker === open.speaker && gap <= this.#maxGap) {
        open.end = seg.end_time === undefined ? undefined : Math.max(open.end, seg.end_time);
        return;
      }
      events.push(this.#emitOpen(seg.start_time));
    }
    this.#open = { start: seg.start_time, end: seg.end_time, speaker: seg.speaker };
  }

  /** The stream's end as given, else as far as the closed segments reach. */
  #streamEndSec(): number {
    const given = typeof this.#streamEnd === 'function' ? this.#streamEnd() : this.#streamEnd;
    return given !== undefined && Number.isFinite(given) ? given : this.#reach;
  }

  #emitOpen(nextStart: number | undefined): SegmentEvent {
    const open = this.#open!;
    this.#open = undefined;
    const end = open.end ?? nextStart ?? open.start;
    const segment = { start_time: open.start, end_time: Math.max(open.start, end), speaker: open.speaker };
    if (this.#keep) this.#closed.push(segment);
    return { type: 'segment', segment };
  }
}

function endOf(seg: LiveDiarizationSegment, next: LiveDiarizationSegment | undefined): number {
  if (seg.end_time !== undefined) return seg.end_time;
  return Math.max(seg.start_time, next?.start_time ?? seg.start_time);
}

/** A Transform (object mode) from diarization records to `DiarizationEvent`s. */
export function mergeDiarization(options: MergeDiarizationOptions = {}): Transform {
  const merger = new DiarizationMerger(options);
  const validate = options.validate ?? true;
  return coreTransform<unknown, DiarizationEvent>(
    {
      push: (record) =>
        merger.push(validate ? parseDiarizationRecord(record) : (record as DiarizationRecord)),
      end: () => merger.end(),
    },
    { objectMode: true },
  );
}
