// The audio a live session accepted and the service has not finalised yet, kept so that a
// restarted session can hear it again (nothing the source said is lost at a failure). Pure:
// session times in seconds, PCM16LE 16 kHz mono chunks; bounded in bytes and in seconds.

import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';

/** Bounds on the audio a live stream keeps to send again after a failure (both hold). */
export interface ReplayLimits {
  /** Most seconds of audio kept. */
  maxSec: number;
  /** Most bytes of audio kept. */
  maxBytes: number;
}

/** Two minutes: longer than any utterance the service leaves open, 3.75 MiB. */
export const DEFAULT_REPLAY_LIMITS: Readonly<ReplayLimits> = Object.freeze({
  maxSec: 120,
  maxBytes: 120 * LIVE_BYTES_PER_SECOND,
});

export interface ReplayChunk {
  /** Session time of the chunk's first sample, seconds. */
  at: number;
  pcm: Buffer;
  /** Silence of our own (keepalive): never sent again. */
  filler: boolean;
}

export interface Replay {
  /** The source audio to send again, in order, starting at the finalised point. */
  chunks: ReplayChunk[];
  /**
   * Session time from which the audio is sent again (where the chunks start), or the end of
   * the buffered audio when there is nothing to send again.
   */
  from: number;
  /**
   * Audio the service accepted but did not finalise, and the bound dropped before the
   * failure: it cannot be heard again. Session times.
   */
  lost?: { start: number; end: number };
}

const secondsOf = (bytes: number) => bytes / LIVE_BYTES_PER_SECOND;

export class ReplayBuffer {
  readonly #limits: ReplayLimits;
  readonly #chunks: ReplayChunk[] = [];
  #bytes = 0;
  /** The service finalised everything before this session time. */
  #committed = 0;
  /** Unfinalised audio before this session time was dropped by the bound. */
  #droppedUntil = 0;
  /** Session time just after the last chunk. */
  #end = 0;

  constructor(limits: ReplayLimits = DEFAULT_REPLAY_LIMITS) {
    this.#limits = limits;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get committed(): number {
    return this.#committed;
  }

  /** A chunk the session accepted, at session time `at`. */
  push(at: number, pcm: Buffer, filler: boolean): void {
    this.#end = at + secondsOf(pcm.length);
    if (this.#end <= this.#committed) return;
    this.#chunks.push({ at, pcm, filler });
    this.#bytes += pcm.length;
    while (
      this.#chunks.length > 0 &&
      (this.#bytes > this.#limits.maxBytes || this.#end - this.#chunks[0]!.at > this.#limits.maxSec)
    ) {
      const dropped = this.#chunks.shift()!;
      this.#bytes -= dropped.pcm.length;
      const end = dropped.at + secondsOf(dropped.pcm.length);
      if (!dropped.filler && end > this.#committed) this.#droppedUntil = Math.max(this.#droppedUntil, end);
    }
  }

  /** The service finalised the audio before session time `t` (its words or segments will not change). */
  commit(t: number): void {
    if (!(t > this.#committed)) return;
    this.#committed = t;
    while (this.#chunks.length > 0) {
      const first = this.#chunks[0]!;
      if (first.at + secondsOf(first.pcm.length) > t) break;
      this.#chunks.shift();
      this.#bytes -= first.pcm.length;
    }
  }

  /** Everything accepted so far is final (the session's final record came). */
  commitAll(): void {
    this.commit(this.#end);
  }

  /** What to send again on a new session after this one failed. */
  replay(): Replay {
    const from = Math.max(this.#committed, this.#droppedUntil);
    const chunks: ReplayChunk[] = [];
    for (const c of this.#chunks) {
      if (c.filler) continue;
      const end = c.at + secondsOf(c.pcm.length);
      if (end <= from) continue;
      if (c.at >= from) {
        chunks.push(c);
        continue;
      }
      // Starts before the finalised point: send only what follows it (whole samples).
      const skip = Math.min(c.pcm.length, Math.round(((from - c.at) * LIVE_BYTES_PER_SECOND) / 2) * 2);
      if (skip < c.pcm.length)
        chunks.push({ at: c.at + secondsOf(skip), pcm: c.pcm.subarray(skip), filler: false });
    }
    const lost =
      this.#droppedUntil > this.#committed ? { start: this.#committed, end: this.#droppedUntil } : undefined;
    return { chunks, from: chunks[0]?.at ?? Math.max(from, this.#end), ...(lost ? { lost } : {}) };
  }
}
