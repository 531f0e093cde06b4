// Speech regions from the audio itself: short-window energy with hysteresis over a noise floor
// (the quietest recent window). Fed PCM16LE mono in any chunking, it finds the same regions
// (windows are cut at fixed sample positions), so record timing follows the real audio.

import { energyKernel, SCRATCH_BYTES, scratchSumOfSquares } from './energy.ts';

export interface SpeechRegion {
  /** Seconds from the start of the audio. */
  start: number;
  end: number;
}

const WINDOW_SEC = 0.02;
/** Windows above the start threshold needed to open a region. */
const ONSET_WINDOWS = 2;
/** Windows below the end threshold needed to close a region (a pause). */
const HANGOVER_WINDOWS = 15;
/** Absolute thresholds, dBFS; the noise floor can only raise them. */
const ABS_ON_DB = -42;
const ABS_OFF_DB = -48;
const FLOOR_ON_MARGIN_DB = 14;
const FLOOR_OFF_MARGIN_DB = 10;
/**
 * The noise floor is the quietest window of the last 3 s: speech has gaps within 3 s, steady
 * noise (hiss, hum, a crowd) does not, so noise is learnt and not taken for speech. Near
 * digital silence counts (as -70 dB) only in runs of 200 ms or more, so that a few zero
 * samples at the start of a noisy recording do not hide its noise; and the floor is never
 * above -40 dB, so audio that starts with speech is not taken for noise.
 */
const FLOOR_WINDOWS = 150;
const FLOOR_SILENCE_DB = -70;
const FLOOR_SILENCE_RUN = 10;
const FLOOR_MAX_DB = -40;
const SILENCE_DB = -120;
const FULL_SCALE_SQ = 32768 * 32768;

/** A window's level in dB (relative to full scale) from its mean square. */
const decibels = (meanSq: number): number =>
  meanSq > 0 ? 10 * Math.log10(meanSq / FULL_SCALE_SQ) : SILENCE_DB;
/** The mean square of a level in dB. */
const meanSquare = (db: number): number => FULL_SCALE_SQ * 10 ** (db / 10);

// The levels are compared as mean squares, without a logarithm per window: a mean square more
// than MARGIN (relatively) above or below a threshold's is above or below it in dB too, MARGIN
// being far wider than NEAR and than the rounding of the logarithm and of the thresholds' mean
// squares (a few parts in 1e14). Within MARGIN the levels in dB are compared, as they were
// for every window: the regions are the same.
const MARGIN = 1e-3;
/** Ring entries within this of the smallest are the candidates for the floor's exact level. */
const NEAR = 1e-9;
const ABS_ON_SQ = meanSquare(ABS_ON_DB);
const ABS_OFF_SQ = meanSquare(ABS_OFF_DB);
const FLOOR_ON_RATIO = 10 ** (FLOOR_ON_MARGIN_DB / 10);
const FLOOR_OFF_RATIO = 10 ** (FLOOR_OFF_MARGIN_DB / 10);
const FLOOR_SILENCE_SQ = meanSquare(FLOOR_SILENCE_DB);
const FLOOR_MAX_SQ = meanSquare(FLOOR_MAX_DB);
/** A ring entry for near digital silence (FLOOR_SILENCE_DB): below every mean square counted. */
const COUNTED_SILENCE = -1;
/** Which threshold a level is compared with. */
const SILENT = 0;
const ON = 1;
const OFF = 2;
type Threshold = typeof SILENT | typeof ON | typeof OFF;

export class SpeechRegionDetector {
  readonly sampleRate: number;
  readonly #window: number;
  #sumSq = 0;
  #inWindow = 0;
  #windows = 0;
  #carry: number | undefined;
  /**
   * The mean squares of the last FLOOR_WINDOWS windows that count for the floor (a ring; near
   * digital silence as COUNTED_SILENCE).
   */
  readonly #recent = new Float64Array(FLOOR_WINDOWS);
  #recentCount = 0;
  #recentNext = 0;
  /** The smallest of the ring's entries (+Infinity while it is empty). */
  #recentMin = Number.POSITIVE_INFINITY;
  /** The start and end thresholds as mean squares, from the floor (see MARGIN). */
  #onSq = Math.max(ABS_ON_SQ, FLOOR_MAX_SQ * FLOOR_ON_RATIO);
  #offSq = Math.max(ABS_OFF_SQ, FLOOR_MAX_SQ * FLOOR_OFF_RATIO);
  #silentRun = 0;
  #above = 0;
  #below = 0;
  /** Start window of the open region, or -1. */
  #openAt = -1;
  /** First quiet window of the current quiet run inside an open region. */
  #quietFrom = -1;
  #samples = 0;
  readonly #closed: SpeechRegion[] = [];

  constructor(sampleRate: number) {
    if (!(sampleRate > 0)) throw new RangeError('sample rate must be positive');
    this.sampleRate = sampleRate;
    this.#window = Math.max(1, Math.round(sampleRate * WINDOW_SEC));
  }

  /** Seconds of audio fed so far. */
  get position(): number {
    return this.#samples / this.sampleRate;
  }

  get samples(): number {
    return this.#samples;
  }

  /** Start of the region in progress, if any (its end is not known yet). */
  get openStart(): number | undefined {
    return this.#openAt < 0 ? undefined : this.#secondsAt(this.#openAt);
  }

  /** End of the last loud window of the region in progress (its speech so far). */
  get speechUntil(): number | undefined {
    if (this.#openAt < 0) return undefined;
    return this.#quietFrom >= 0 ? this.#secondsAt(this.#quietFrom) : this.position;
  }

  /** Feed PCM16LE mono bytes (an odd trailing byte is carried to the next call). */
  push(bytes: Uint8Array): void {
    let data = bytes;
    if (this.#carry !== undefined && data.length > 0) {
      this.pushSamples(Int16Array.of((((data[0]! << 8) | this.#carry) << 16) >> 16));
      this.#carry = undefined;
      data = data.subarray(1);
    }
    const whole = data.length & ~1;
    if (whole > 0) this.#pushBytes(data, whole);
    if (whole < data.length) this.#carry = data[whole];
  }

  /** Feed samples already converted. */
  pushSamples(samples: Int16Array): void {
    this.#pushBytes(
      new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength),
      samples.byteLength,
    );
  }

  /** The first `length` (even) bytes of `bytes`, at any byte offset, through the scratch area. */
  #pushBytes(bytes: Uint8Array, length: number): void {
    const kernel = energyKernel();
    for (let at = 0; at < length; at += SCRATCH_BYTES) {
      const piece = bytes.subarray(at, Math.min(length, at + SCRATCH_BYTES));
      kernel.bytes.set(piece);
      const n = piece.length >> 1;
      const w = this.#window;
      let k = 0;
      while (k < n) {
        // The sum over a window (or the part of one this piece holds), then the window's verdict.
        const end = Math.min(n, k + (w - this.#inWindow));
        this.#sumSq += scratchSumOfSquares(kernel, k, end - k);
        this.#inWindow += end - k;
        k = end;
        if (this.#inWindow === w) this.#finishWindow();
      }
      this.#samples += n;
    }
  }

  /** Regions closed since the last call. */
  takeClosed(): SpeechRegion[] {
    return this.#closed.splice(0);
  }

  /** End of input: closes a region in progress at the end of the audio; returns the last regions. */
  end(): SpeechRegion[] {
    if (this.#inWindow > 0) this.#finishWindow();
    if (this.#openAt >= 0) {
      const endWindow = this.#quietFrom >= 0 ? this.#quietFrom : this.#windows;
      this.#closed.push({
        start: this.#secondsAt(this.#openAt),
        end: Math.min(this.position, this.#secondsAt(endWindow)),
      });
      this.#openAt = -1;
      this.#quietFrom = -1;
    }
    return this.takeClosed();
  }

  #secondsAt(window: number): number {
    return (window * this.#window) / this.sampleRate;
  }

  #finishWindow(): void {
    const meanSq = this.#sumSq / this.#inWindow;
    this.#sumSq = 0;
    this.#inWindow = 0;
    const index = this.#windows++;
    this.#noteFloor(meanSq);
    if (this.#openAt < 0) {
      this.#above = this.#compare(meanSq, this.#onSq, ON) > 0 ? this.#above + 1 : 0;
      if (this.#above >= ONSET_WINDOWS) {
        this.#openAt = index - (ONSET_WINDOWS - 1);
        this.#above = 0;
        this.#below = 0;
        this.#quietFrom = -1;
      }
      return;
    }
    if (this.#compare(meanSq, this.#offSq, OFF) < 0) {
      if (this.#below === 0) this.#quietFrom = index;
      this.#below++;
      if (this.#below >= HANGOVER_WINDOWS) {
        this.#closed.push({ start: this.#secondsAt(this.#openAt), end: this.#secondsAt(this.#quietFrom) });
        this.#openAt = -1;
        this.#below = 0;
        this.#quietFrom = -1;
      }
    } else {
      this.#below = 0;
      this.#quietFrom = -1;
    }
  }

  /**
   * The sign of (the window's level − the threshold's) in dB, from their mean squares unless
   * they are within MARGIN of each other.
   */
  #compare(meanSq: number, thresholdSq: number, threshold: Threshold): number {
    if (meanSq > thresholdSq * (1 + MARGIN)) return 1;
    if (meanSq < thresholdSq * (1 - MARGIN)) return -1;
    const db = decibels(meanSq);
    const limit = this.#thresholdDb(threshold);
    return db > limit ? 1 : db < limit ? -1 : 0;
  }

  /** A threshold in dB, as the floor in dB makes it. */
  #thresholdDb(threshold: Threshold): number {
    if (threshold === SILENT) return FLOOR_SILENCE_DB;
    const floor = this.#floorDb();
    return threshold === ON
      ? Math.max(ABS_ON_DB, floor + FLOOR_ON_MARGIN_DB)
      : Math.max(ABS_OFF_DB, floor + FLOOR_OFF_MARGIN_DB);
  }

  /** The noise floor in dB: the quietest level in the ring, at most FLOOR_MAX_DB. */
  #floorDb(): number {
    const min = this.#recentMin;
    if (min === Number.POSITIVE_INFINITY) return FLOOR_MAX_DB;
    // Counted silence is below every other entry, whose levels are all at least its own.
    if (min === COUNTED_SILENCE) return Math.min(FLOOR_MAX_DB, FLOOR_SILENCE_DB);
    // The smallest level of the entries nearest the smallest mean square: the same as the
    // smallest level of all, without assuming that the logarithm's rounding keeps their order.
    let db = Number.POSITIVE_INFINITY;
    const near = min * (1 + NEAR);
    for (let i = 0; i < this.#recentCount; i++) {
      const sq = this.#recent[i]!;
      if (sq <= near) db = Math.min(db, decibels(sq));
    }
    return Math.min(FLOOR_MAX_DB, db);
  }

  /** Record a window's mean square for the noise floor, and set the thresholds from the floor. */
  #noteFloor(meanSq: number): void {
    let counted: number | undefined = meanSq;
    if (this.#compare(meanSq, FLOOR_SILENCE_SQ, SILENT) < 0) {
      this.#silentRun++;
      counted = this.#silentRun >= FLOOR_SILENCE_RUN ? COUNTED_SILENCE : undefined;
    } else this.#silentRun = 0;
    if (counted === undefined) return;
    const full = this.#recentCount === FLOOR_WINDOWS;
    const evicted = this.#recent[this.#recentNext]!;
    this.#recent[this.#recentNext] = counted;
    this.#recentNext = (this.#recentNext + 1) % FLOOR_WINDOWS;
    if (!full) this.#recentCount++;
    const before = this.#recentMin;
    // The minimum is rescanned only when the window that held it leaves the ring.
    if (counted <= this.#recentMin) this.#recentMin = counted;
    else if (full && evicted === this.#recentMin) {
      let min = Number.POSITIVE_INFINITY;
      for (let i = 0; i < FLOOR_WINDOWS; i++) if (this.#recent[i]! < min) min = this.#recent[i]!;
      this.#recentMin = min;
    }
    if (this.#recentMin === before) return;
    const min = this.#recentMin;
    const floorSq = Math.min(FLOOR_MAX_SQ, min === COUNTED_SILENCE ? FLOOR_SILENCE_SQ : min);
    this.#onSq = Math.max(ABS_ON_SQ, floorSq * FLOOR_ON_RATIO);
    this.#offSq = Math.max(ABS_OFF_SQ, floorSq * FLOOR_OFF_RATIO);
  }
}

/** Regions of a complete PCM16LE mono buffer. */
export function detectRegions(pcm: Uint8Array, sampleRate: number): SpeechRegion[] {
  const detector = new SpeechRegionDetector(sampleRate);
  detector.push(pcm);
  return [...detector.takeClosed(), ...detector.end()];
}
