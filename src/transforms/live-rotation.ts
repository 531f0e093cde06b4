// When a long live stream moves to a new session before the service's per-session audio limit
// (14,400 s): at the first speech boundary heard once `afterSec` of audio went to the session,
// or regardless of speech at `forceAfterSec`. Pure: the stream reports audio and boundaries and
// asks whether the next frame should close the session.

import { DEFAULT_LIMITS } from '../protocol/limits.ts';

/** Options of a {@link Rotation}. */
export interface RotationOptions {
  /** Default 14,100 s (five minutes before the limit). */
  afterSec?: number | undefined;
  /** Default 14,370 s (half a minute before it). */
  forceAfterSec?: number | undefined;
}

export class Rotation {
  readonly afterSec: number;
  readonly forceAfterSec: number;
  #pending = false;
  /** The latest record since rotation became due was a speech boundary. */
  #atBoundary = false;

  constructor(options: RotationOptions = {}) {
    this.afterSec = options.afterSec ?? DEFAULT_LIMITS.sessionAudioDurationSec - 300;
    this.forceAfterSec = options.forceAfterSec ?? DEFAULT_LIMITS.sessionAudioDurationSec - 30;
  }

  /** The session has accepted `sessionSec` of audio in all; `final`: it was the stream's last. */
  accepted(sessionSec: number, final: boolean): void {
    if (!final && !this.#pending && sessionSec >= this.afterSec) {
      // Only a boundary heard from now on counts: an earlier pause is no place to cut now.
      this.#pending = true;
      this.#atBoundary = false;
    }
  }

  /** A record of the current session; `boundary`: it ends an utterance (nobody speaking). */
  heard(boundary: boolean): void {
    if (this.#pending) this.#atBoundary = boundary;
  }

  /** Whether the next frame closes the session, which has accepted `sessionSec` so far. */
  due(sessionSec: number): boolean {
    return this.#pending && (this.#atBoundary || sessionSec >= this.forceAfterSec);
  }

  /** A new session began. */
  reset(): void {
    this.#pending = false;
    this.#atBoundary = false;
  }
}
