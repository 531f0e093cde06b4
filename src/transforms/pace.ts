// pace(): a token bucket over PCM bytes, so a file goes to the service as fast as its session
// rate limit allows (4x real time sustained, 16 MiB burst) and no faster; a 429
// SESSION_BYTE_RATE_EXCEEDED slows it down through `Pacer.penalize(retryAfterMs)`.

import { Transform, type TransformCallback } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { DEFAULT_LIMITS } from '../protocol/limits.ts';
import { MAX_TIMER_MS } from '../protocol/options.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import type { AudioFrame } from './to-frames.ts';

/** Options of a {@link Pacer}: its sustained rate and bucket size. */
export interface PacerOptions {
  /** Sustained rate as a multiple of real time. Default: the session limit (4). */
  speed?: number;
  /**
   * Bucket size: bytes that may go at once after a pause. Default: the session burst (16 MiB)
   * for the session limit; none when `speed` is given, so a chosen playback speed holds from
   * the first byte (a short file is not sent as one burst). With a chosen speed and no burst,
   * time a chunk waited past its turn (a late timer, a slow consumer) is made up by sending the
   * next ones sooner, up to a second of audio at that speed: the speed holds on average instead
   * of losing every wait's lateness.
   */
  burstBytes?: number;
  /** Bytes per second of real time. Default 32000 (PCM16 mono 16 kHz). */
  bytesPerSecond?: number;
  /** Clock in milliseconds. Default `performance.now` (monotonic: a wall clock set back must not stall pacing). */
  now?: () => number;
}

/**
 * The token bucket itself, with no stream in it: shareable, so a later stage (the stream that
 * talks to the service) can call `penalize()` when the service says the session is too fast.
 */
export class Pacer {
  readonly rate: number;
  readonly burstBytes: number;
  readonly #now: () => number;
  /** Most tokens the bucket holds: the burst, or with a chosen speed the second it may catch up. */
  readonly #cap: number;
  #tokens: number;
  #at: number;
  #pausedUntil = 0;
  #penalties = 0;
  #sent = 0;

  constructor(options: PacerOptions = {}) {
    const speed = options.speed ?? DEFAULT_LIMITS.sessionAudioRateRealtime;
    const bytesPerSecond = options.bytesPerSecond ?? LIVE_BYTES_PER_SECOND;
    this.burstBytes =
      options.burstBytes ?? (options.speed === undefined ? DEFAULT_LIMITS.sessionAudioRateBurstBytes : 0);
    if (!(speed > 0) || !(bytesPerSecond > 0) || !(this.burstBytes >= 0)) {
      throw new InvalidArgumentError(
        'Pacer: speed and bytesPerSecond must be positive, burstBytes not negative',
      );
    }
    this.rate = (speed * bytesPerSecond) / 1000; // bytes per millisecond
    this.#cap = this.burstBytes > 0 ? this.burstBytes : this.rate * CATCH_UP_MS;
    this.#now = options.now ?? (() => performance.now());
    this.#at = this.#now();
    this.#tokens = this.burstBytes;
  }

  /** Bytes let through so far, and `penalize` calls. */
  get sentBytes(): number {
    return this.#sent;
  }
  get penalties(): number {
    return this.#penalties;
  }

  /** Milliseconds until `bytes` may go (0: now). Does not take them. */
  delayFor(bytes: number): number {
    const now = this.#refill();
    const paused = Math.max(0, this.#pausedUntil - now);
    // With no burst, a chunk goes once the debt of the earlier ones is paid.
    const short = Math.min(bytes, this.burstBytes) - this.#tokens;
    return Math.max(paused, short > 0 ? Math.ceil(short / this.rate) : 0);
  }

  /** Milliseconds left of a penalty pause (0: none). */
  pausedFor(): number {
    return Math.max(0, this.#pausedUntil - this.#now());
  }

  /** Take `bytes` from the bucket (it may go into debt for a chunk larger than the burst). */
  take(bytes: number): void {
    this.#refill();
    this.#tokens -= bytes;
    this.#sent += bytes;
  }

  /**
   * The service answered 429 `SESSION_BYTE_RATE_EXCEEDED` with Retry-After: send nothing for
   * `retryAfterMs`, then resume at the sustained rate with an empty bucket (no burst).
   */
  penalize(retryAfterMs: number): void {
    const now = this.#refill();
    this.#penalties++;
    this.#pausedUntil = Math.max(this.#pausedUntil, now + Math.max(0, retryAfterMs));
    // Tokens accrue from the end of the pause, not during it.
    this.#tokens = Math.min(this.#tokens, 0) - Math.max(0, retryAfterMs) * this.rate;
  }

  #refill(): number {
    const now = this.#now();
    if (now > this.#at) {
      this.#tokens = Math.min(this.#cap, this.#tokens + (now - this.#at) * this.rate);
      this.#at = now;
    }
    return now;
  }
}

/** How far a paced stream with no burst may catch up after waiting past its turn. */
const CATCH_UP_MS = 1000;

/** Options of {@link pace}. */
export interface PaceOptions extends PacerOptions {
  /** `'frames'` (default): the {@link AudioFrame}s of `toFrames()` (object mode). `'pcm'`: bytes. */
  input?: 'frames' | 'pcm';
  /** A live source is already real time: never delayed by the bucket (a penalty still holds). */
  live?: boolean;
  /** Share a bucket (e.g. with the stream that calls `penalize`). Default: a new one. */
  pacer?: Pacer;
}

/** The Transform `pace()` returns, with its bucket. */
export interface PaceTransform extends Transform {
  readonly pacer: Pacer;
}

/**
 * A Transform that lets chunks through when the token bucket holds their PCM bytes. Timers are
 * cleared on destroy.
 */
export function pace(options: PaceOptions = {}): PaceTransform {
  const pacer = options.pacer ?? new Pacer(options);
  const frames = (options.input ?? 'frames') === 'frames';
  const live = options.live === true;
  let timer: NodeJS.Timeout | undefined;

  const pcmBytes = (chunk: Buffer | AudioFrame) => (Buffer.isBuffer(chunk) ? chunk.length : chunk.pcm.length);

  const stream = new Transform({
    objectMode: frames,
    transform(
      this: Transform,
      chunk: Buffer | AudioFrame,
      _encoding: BufferEncoding,
      callback: TransformCallback,
    ) {
      const bytes = pcmBytes(chunk);
      const attempt = () => {
        timer = undefined;
        // A live source only waits out a penalty; a file waits for tokens too.
        const wait = live ? pacer.pausedFor() : pacer.delayFor(bytes);
        if (wait > 0) {
          // Past 2^31-1 ms setTimeout fires at once (with a warning): a long penalty or a very
          // slow speed would spin every millisecond. Waking early is harmless: it asks again.
          timer = setTimeout(attempt, Math.min(wait, MAX_TIMER_MS));
          return;
        }
        pacer.take(bytes);
        callback(null, chunk);
      };
      attempt();
    },
    destroy(err, callback) {
      if (timer) clearTimeout(timer);
      timer = undefined;
      callback(err);
    },
  });
  Object.defineProperty(stream, 'pacer', { value: pacer, enumerable: true });
  return stream as PaceTransform;
}
