// NDJSON splitter core: bytes in, parsed values out, for complete lines only. Works on bytes,
// so a UTF-8 character split across chunks is never cut (0x0A never occurs inside one).

import { ProtocolError } from './errors.ts';

export interface NdjsonDecoderOptions {
  /** Longest accepted line in bytes, not counting its LF (a CR before it counts). Default 8 MiB. */
  maxLineBytes?: number;
  /**
   * What to do with bytes after the last line break at the end of input: `error` (default; the
   * interface says parse complete lines only, so such a tail means the stream was cut),
   * `parse` them as a last line, or `ignore` them.
   */
  trailing?: 'error' | 'parse' | 'ignore';
}

export const DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;

export class NdjsonDecoder {
  readonly maxLineBytes: number;
  readonly #trailing: 'error' | 'parse' | 'ignore';
  /** Bytes of an unfinished line from earlier chunks. */
  #carry: Buffer | null = null;
  /** Lines seen so far, blank ones included; the next line is number `#line + 1`. */
  #line = 0;
  /** Bytes consumed before the current carry, for error offsets. */
  #offset = 0;

  constructor(options: NdjsonDecoderOptions = {}) {
    const max = options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
    if (!Number.isSafeInteger(max) || max < 1)
      throw new RangeError(`maxLineBytes must be a positive integer`);
    this.maxLineBytes = max;
    this.#trailing = options.trailing ?? 'error';
  }

  /** Lines completed so far. */
  get lines(): number {
    return this.#line;
  }

  /** Bytes held for an unfinished line. */
  get pendingBytes(): number {
    return this.#carry?.length ?? 0;
  }

  /** Feed a chunk; returns the values of the lines it completed (appended to `out`). */
  push(chunk: Uint8Array, out: unknown[] = []): unknown[] {
    let buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let start = 0;
    if (this.#carry !== null) {
      const nl = buf.indexOf(LF);
      if (nl === -1) {
        this.#checkLength(this.#carry.length + buf.length, false);
        this.#carry = Buffer.concat([this.#carry, buf]);
        return out;
      }
      this.#checkLength(this.#carry.length + nl, true);
      const line = Buffer.concat([this.#carry, buf.subarray(0, nl)]);
      const carried = this.#carry.length;
      this.#carry = null;
      this.#emit(line, 0, line.length, out);
      this.#offset += carried + nl + 1;
      start = nl + 1;
      if (start === buf.length) return out;
      buf = buf.subarray(start);
      start = 0;
    }
    const max = this.maxLineBytes;
    let nl = buf.indexOf(LF, start);
    while (nl !== -1) {
      if (nl - start > max) this.#checkLength(nl - start, true);
      this.#emit(buf, start, nl, out);
      this.#offset += nl + 1 - start;
      start = nl + 1;
      nl = buf.indexOf(LF, start);
    }
    if (start < buf.length) {
      this.#checkLength(buf.length - start, false);
      // Copy: the carry must not pin the caller's (possibly large, reused) chunk.
      this.#carry = Buffer.from(buf.subarray(start));
    }
    return out;
  }

  /** End of input: handles an unterminated last line per the `trailing` option. */
  end(out: unknown[] = []): unknown[] {
    const carry = this.#carry;
    this.#carry = null;
    if (carry === null || isBlank(carry, 0, carry.length)) return out;
    if (this.#trailing === 'ignore') return out;
    if (this.#trailing === 'parse') {
      this.#emit(carry, 0, carry.length, out);
      return out;
    }
    throw new ProtocolError(
      'ERR_NDJSON_TRUNCATED',
      `input ended inside line ${this.#line + 1} (${carry.length} bytes without a line break)`,
      { line: this.#line + 1, offset: this.#offset },
    );
  }

  #checkLength(length: number, complete: boolean): void {
    if (length <= this.maxLineBytes) return;
    throw new ProtocolError(
      'ERR_NDJSON_LINE_TOO_LONG',
      `line ${this.#line + 1} exceeds maxLineBytes (${this.maxLineBytes})${complete ? '' : ' before its line break'}`,
      { line: this.#line + 1, offset: this.#offset },
    );
  }

  #emit(buf: Buffer, start: number, end: number, out: unknown[]): void {
    this.#line++;
    if (end > start && buf[end - 1] === CR) end--;
    if (end === start) return;
    const first = buf[start]!;
    if ((first === 0x20 || first === 0x09 || first === CR) && isBlank(buf, start, end)) return;
    const text = buf.toString('utf8', start, end);
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw new ProtocolError(
        'ERR_NDJSON_INVALID_JSON',
        `line ${this.#line}: invalid JSON (${(err as Error).message})`,
        { line: this.#line, offset: this.#offset, cause: err },
      );
    }
    out.push(value);
  }
}

function isBlank(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const b = buf[i];
    if (b !== 0x20 && b !== 0x09 && b !== CR && b !== LF) return false;
  }
  return true;
}

/** Serialize values as NDJSON (one line each, `\n`-terminated). */
export function encodeNdjson(values: Iterable<unknown>): string {
  let out = '';
  for (const value of values) out += `${JSON.stringify(value)}\n`;
  return out;
}
