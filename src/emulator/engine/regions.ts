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

export class SpeechRegionDetector {
  readonly sampleRate: number;
  readonly #window: number;
  #sumSq = 0;
  #inWindow = 0;
  #windows = 0;
  #carry: number | undefined;
  /** The last FLOOR_WINDOWS window energies that count for the floor (a ring). */
  readonly #recent = new Float64Array(FLOOR_WINDOWS);
  #recentCount = 0;
  #recentNext = 0;
  /** The smallest of the ring's energies (+Infinity while it is empty). */
  #recentMin = Number.POSITIVE_INFINITY;
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
    const db = meanSq > 0 ? 10 * Math.log10(meanSq / FULL_SCALE_SQ) : SILENCE_DB;
    const index = this.#windows++;
    const floor = this.#noteFloor(db);
    const on = Math.max(ABS_ON_DB, floor + FLOOR_ON_MARGIN_DB);
    const off = Math.max(ABS_OFF_DB, floor + FLOOR_OFF_MARGIN_DB);
    if (this.#openAt < 0) {
      this.#above = db > on ? this.#above + 1 : 0;
      if (this.#above >= ONSET_WINDOWS) {
        this.#openAt = index - (ONSET_WINDOWS - 1);
        this.#above = 0;
        this.#below = 0;
        this.#quietFrom = -1;
      }
      return;
    }
    if (db < off) {
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

  /** Record a window's energy and return the noise floor. */
  #noteFloor(db: number): number {
    let counted: number | undefined = db;
    if (db < FLOOR_SILENCE_DB) {
      this.#silentRun++;
      counted = this.#silentRun >= FLOOR_SILENCE_RUN ? FLOOR_SILENCE_DB : undefined;
    } else this.#silentRun = 0;
    if (counted !== undefined) {
      const full = this.#recentCount === FLOOR_WINDOWS;
      const evicted = this.#recent[this.#recentNext]!;
      this.#recent[this.#recentNext] = counted;
      this.#recentNext = (this.#recentNext + 1) % FLOOR_WINDOWS;
      if (!full) this.#recentCount++;
      // The minimum is rescanned only when the window that held it leaves the ring.
      if (counted <= this.#recentMin) this.#recentMin = counted;
      else if (full && evicted === this.#recentMin) {
        let min = Number.POSITIVE_INFINITY;
        for (let i = 0; i < FLOOR_WINDOWS; i++) if (this.#recent[i]! < min) min = this.#recent[i]!;
        this.#recentMin = min;
      }
    }
    return Math.min(FLOOR_MAX_DB, this.#recentMin);
  }
}

/** Regions of a complete PCM16LE mono buffer. */
export function detectRegions(pcm: Uint8Array, sampleRate: number): SpeechRegion[] {
  const detector = new SpeechRegionDetector(sampleRate);
  detector.push(pcm);
  return [...detector.takeClosed(), ...detector.end()];
}
