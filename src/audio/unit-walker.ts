// Following a container's top-level units (Ogg pages, MP4 boxes: a header, then a body whose
// length the header gives) without keeping them, to tell whether the input so far ends inside
// one: ffmpeg decodes such a cut file without a word, with the audio past the cut missing.

/**
 * The walk: a subclass says how many header bytes a unit needs (given those gathered so far)
 * and, once they are in, its body's length; either may say `undefined`, no verdict from then on
 * (the bytes stopped looking like the format, or a unit runs to the end of the input).
 */
export abstract class UnitWalker {
  /** The current unit's header, as gathered so far. */
  protected readonly head: Buffer;
  #headBytes = 0;
  /** Bytes of the current unit's body still to come. */
  #body = 0;
  #valid = true;

  constructor(maxHeadBytes: number) {
    this.head = Buffer.alloc(maxHeadBytes);
  }

  /** Header bytes the current unit needs, `have` being gathered; undefined: no verdict. */
  protected abstract headNeed(have: number): number | undefined;

  /** The body's length once the whole header (`have` bytes) is in; undefined: no verdict. */
  protected abstract bodyLength(have: number): number | undefined;

  /** Follow `chunk`. */
  push(chunk: Uint8Array): void {
    let at = 0;
    while (this.#valid) {
      if (this.#body > 0) {
        if (at >= chunk.length) return;
        const n = Math.min(this.#body, chunk.length - at);
        this.#body -= n;
        at += n;
        continue;
      }
      const need = this.headNeed(this.#headBytes);
      if (need === undefined) break;
      if (this.#headBytes < need) {
        if (at >= chunk.length) return;
        const n = Math.min(need - this.#headBytes, chunk.length - at);
        this.head.set(chunk.subarray(at, at + n), this.#headBytes);
        this.#headBytes += n;
        at += n;
        continue; // the need is asked again: it may grow once more of the header is known
      }
      const body = this.bodyLength(this.#headBytes);
      if (body === undefined) break;
      this.#body = body;
      this.#headBytes = 0;
    }
    this.#valid = false;
  }

  /** Whether the input so far ends inside a unit (false once it stopped being judged). */
  get inside(): boolean {
    return this.#valid && (this.#headBytes > 0 || this.#body > 0);
  }
}
