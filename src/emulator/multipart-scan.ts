// The byte-level scans of an upload's body, beside busboy's parse of its structure: where the
// first part's data begins, the first part's data cut from the request's own chunks at its
// closing delimiter, and freeing a chunk's memory once it has been analysed.

const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');

/**
 * Where the first part's data begins, found as the body streams in and as busboy reads it:
 * after the first `\r\n--boundary\r\n` (the body counts as starting with CRLF, so a delimiter
 * on the first line needs none) and then the `\r\n\r\n` ending that part's header block. Only
 * a few bytes are kept between chunks, so a preamble of any length still leaves the recording's
 * end, and with it the unvalidatable tail, known.
 */
export class FirstPartLocator {
  readonly #delimiter: Buffer;
  #stage: 'delimiter' | 'headers' = 'delimiter';
  /** Unmatched bytes kept from earlier chunks, and the body offset of their first byte. */
  #carry: Buffer = CRLF;
  #carryAt = -CRLF.length;
  /** Body offset of the first part's data, once known. */
  dataOffset: number | undefined;

  constructor(boundary: string) {
    this.#delimiter = Buffer.from(`\r\n--${boundary}\r\n`);
  }

  push(chunk: Buffer): void {
    if (this.dataOffset !== undefined) return;
    let window = this.#carry.length > 0 ? Buffer.concat([this.#carry, chunk]) : chunk;
    let at = this.#carryAt;
    for (;;) {
      const needle = this.#stage === 'delimiter' ? this.#delimiter : HEADER_END;
      const i = window.indexOf(needle);
      if (i < 0) {
        const keep = Math.min(window.length, needle.length - 1);
        this.#carry = Buffer.from(window.subarray(window.length - keep));
        this.#carryAt = at + window.length - keep;
        return;
      }
      if (this.#stage === 'headers') {
        this.dataOffset = at + i + HEADER_END.length;
        this.#carry = Buffer.alloc(0);
        return;
      }
      // The header block's end is searched from the CRLF that ends the delimiter line.
      this.#stage = 'headers';
      const from = i + needle.length - CRLF.length;
      window = window.subarray(from);
      at += from;
    }
  }
}

/**
 * The first part's data taken from the request's own chunks up to the delimiter that closes it,
 * found with `Buffer.indexOf`, instead of through busboy's byte-by-byte search and its file
 * stream: busboy is given the part's headers and its first byte, then everything from that
 * delimiter on, so it still checks the whole structure (the part it sees has that one byte). A delimiter split across
 * chunks is found too: bytes at a chunk's end that could begin one are held back. The boundary
 * has no CR (checked before this is used), so only a chunk's last CR can begin one.
 */
export class PartDataSplitter {
  readonly #delimiter: Buffer;
  #held: Buffer | undefined;
  /** Part data bytes passed on so far. */
  bytes = 0;
  /** Whether the closing delimiter was found. */
  closed = false;

  constructor(boundary: string) {
    this.#delimiter = Buffer.from(`\r\n--${boundary}`);
  }

  /**
   * Split a chunk: part data first (`data`, zero to two pieces), then, once the closing
   * delimiter is found, the bytes from it on (`rest`, for busboy).
   */
  push(chunk: Buffer): { data: Buffer[]; rest: Buffer[] } {
    const delimiter = this.#delimiter;
    const data: Buffer[] = [];
    const held = this.#held;
    if (held) {
      this.#held = undefined;
      const need = delimiter.length - held.length;
      const n = Math.min(need, chunk.length);
      if (chunk.subarray(0, n).equals(delimiter.subarray(held.length, held.length + n))) {
        if (n === need) return this.#close(data, [held, chunk]);
        this.#held = Buffer.concat([held, chunk]);
        return { data, rest: [] };
      }
      data.push(held);
      this.bytes += held.length;
    }
    const at = chunk.indexOf(delimiter);
    if (at >= 0) {
      if (at > 0) data.push(chunk.subarray(0, at));
      this.bytes += at;
      return this.#close(data, [chunk.subarray(at)]);
    }
    let end = chunk.length;
    // The delimiter's only CR is its first byte: a tail that begins one starts at a CR.
    for (let cr = chunk.indexOf(13, Math.max(0, chunk.length - delimiter.length + 1)); cr >= 0; ) {
      const tail = chunk.subarray(cr);
      if (tail.equals(delimiter.subarray(0, tail.length))) {
        this.#held = Buffer.from(tail);
        end = cr;
        break;
      }
      cr = chunk.indexOf(13, cr + 1);
    }
    if (end > 0) data.push(end === chunk.length ? chunk : chunk.subarray(0, end));
    this.bytes += end;
    return { data, rest: [] };
  }

  #close(data: Buffer[], rest: Buffer[]): { data: Buffer[]; rest: Buffer[] } {
    this.closed = true;
    return { data, rest: rest.filter((b) => b.length > 0) };
  }
}

/**
 * Free a request chunk's memory now rather than at the next garbage collection, if the chunk is
 * the whole of its own ArrayBuffer (node:http copies each piece of a body into one of its own).
 * A large upload's chunks are external memory, and that much of it starts a full collection
 * every few tens of MB: over the emulator's heap those cost more than the upload's analysis.
 * Afterwards the chunk, and every view of its memory, is empty. Returns whether it was freed.
 */
export function releaseChunk(chunk: Buffer): boolean {
  const buffer = chunk.buffer as ArrayBuffer & { transfer?: (length: number) => ArrayBuffer };
  if (chunk.byteOffset !== 0 || buffer.byteLength !== chunk.length || typeof buffer.transfer !== 'function')
    return false;
  try {
    buffer.transfer(0);
    return true;
  } catch {
    return false; // not detachable (WebAssembly memory, say)
  }
}
