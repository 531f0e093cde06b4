// Joins short frames of live audio into frames of the transport's size before they are sent:
// over HTTP every frame is a POST, so 100 ms pieces become one-second frames. Pure: the stream
// that uses it sends what push() returns and flushes what it holds when its time is up.

import type { AudioFrame } from './to-frames.ts';

export class FrameJoiner {
  /** A frame is sent once it holds at least this much PCM (0: every frame as it comes). */
  readonly targetBytes: number;
  #held: Buffer[] = [];
  #heldBytes = 0;
  #language: AudioFrame['language'] | undefined;

  constructor(targetBytes: number) {
    this.targetBytes = targetBytes;
  }

  /** Whether audio is held, waiting for more. */
  get holding(): boolean {
    return this.#heldBytes > 0;
  }

  /**
   * The frames to send now, in order. A short frame that more may follow is held; a final one
   * never is; a change of language, or a frame that reaches the target by itself, sends what is
   * held first (a frame has one language, and joining is for short frames: a joined frame is
   * never larger than twice the target or the largest frame given, so within the frame limit).
   */
  push(frame: AudioFrame): AudioFrame[] {
    const out: AudioFrame[] = [];
    if (this.#heldBytes > 0 && (this.#language !== frame.language || frame.pcm.length >= this.targetBytes))
      out.push(this.flush()!);
    if (!frame.isFinal && this.#heldBytes + frame.pcm.length < this.targetBytes) {
      this.#held.push(frame.pcm);
      this.#heldBytes += frame.pcm.length;
      this.#language = frame.language;
      return out;
    }
    if (this.#heldBytes === 0) {
      out.push(frame);
      return out;
    }
    const pcm = Buffer.concat([...this.#held, frame.pcm]);
    this.#clear();
    out.push({ pcm, language: frame.language, isFinal: frame.isFinal });
    return out;
  }

  /** What is held, as one frame that is not final; `undefined` when nothing is. */
  flush(): AudioFrame | undefined {
    if (this.#heldBytes === 0) return undefined;
    const frame: AudioFrame = {
      pcm: this.#held.length === 1 ? this.#held[0]! : Buffer.concat(this.#held),
      language: this.#language!,
      isFinal: false,
    };
    this.#clear();
    return frame;
  }

  #clear(): void {
    this.#held = [];
    this.#heldBytes = 0;
    this.#language = undefined;
  }
}
