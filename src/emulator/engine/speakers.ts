// Deterministic speaker turns from speech regions: the speaker changes at a long enough pause,
// cycling through a fixed number of labels. Labels are relative turns within one result.

import type { SpeechRegion } from './regions.ts';

export interface TurnModel {
  /** Distinct speakers the turns cycle through. */
  speakers: number;
  /** A pause at least this long (seconds) hands the turn to the next speaker. */
  turnGapSec: number;
}

/** `1`/`true`/`d1`: two speakers, a turn at pauses of 0.6 s or more. */
export const DEFAULT_TURNS: TurnModel = { speakers: 2, turnGapSec: 0.6 };
/** `d2`, the alternative model: three speakers, turns at shorter pauses. */
export const ALTERNATIVE_TURNS: TurnModel = { speakers: 3, turnGapSec: 0.4 };

export const speakerLabel = (index: number): string => `SPEAKER_${String(index).padStart(2, '0')}`;

/** Assigns each region, in order, its speaker. */
export class SpeakerTurns {
  readonly #model: TurnModel;
  #speaker = -1;
  #lastEnd: number | undefined;

  constructor(model: TurnModel = DEFAULT_TURNS) {
    this.#model = model;
  }

  /** The speaker of the next region, without committing it (for a region still in progress). */
  peek(start: number): string {
    return speakerLabel(this.#next(start));
  }

  /** The speaker of the next region, committed. */
  assign(region: SpeechRegion): string {
    this.#speaker = this.#next(region.start);
    this.#lastEnd = region.end;
    return speakerLabel(this.#speaker);
  }

  #next(start: number): number {
    if (this.#speaker < 0 || this.#lastEnd === undefined) return 0;
    return start - this.#lastEnd >= this.#model.turnGapSec
      ? (this.#speaker + 1) % this.#model.speakers
      : this.#speaker;
  }
}
