// NDJSON splitter core: bytes in, parsed values out, for complete lines only. Works on bytes,
// so a UTF-8 character split across chunks is never cut (0x0A never occurs inside one).

import { ProtocolError } from './errors.ts';

/** Options of `NdjsonDecoder`. */
export interface NdjsonDecoderOptions {
  /** Longest accepted line in bytes, not counting its LF (a CR before it counts). Default 8 MiB. */
  maxLineBytes?: number;
  /**
   * What to do with bytes after the last line break at the end of input: `error` (default; the
   * interface says parse complete lines only, so such a tail means the stream was cut),
   * `parse` them as a last line, or `ignore` them.
   */
  trailing?: 'error' | 'parse' | 'ignore';
  /** A `null` line is an error (`ERR_NDJSON_NULL`) instead of a value; for object streams. */
  rejectNull?: boolean;
}

/** Default `NdjsonDecoderOptions.maxLineBytes`: 8 MiB, our bound (the interface names none). */
export const DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024;

const LF = 0x0a;
const CR = 0x0d;
/** A line buffer up to this size is kept for the next unfinished line. */
const CARRY_KEEP_BYTES = 64 * 1024;

/**
 * Incremental NDJSON decoder: feed chunks with `push`, finish with `end`; blank lines are skipped.
 * Errors are `ProtocolError`s with the line number and byte offset: `ERR_NDJSON_LINE_TOO_LONG`,
 * `ERR_NDJSON_INVALID_JSON`, `ERR_NDJSON_TRUNCATED` (bytes after the last line break, by default)
 * and `ERR_NDJSON_NULL` (with `rejectNull`). The constructor throws `RangeError` for a
 * `maxLineBytes` that is not a positive integer.
 */
export class NdjsonDecoder {
  /** Longest accepted line in bytes (see `NdjsonDecoderOptions.maxLineBytes`). */
  readonly maxLineBytes: number;
  readonly #trailing: 'error' | 'parse' | 'ignore';
  readonly #rejectNull: boolean;
  /**
   * Bytes of an unfinished line from earlier chunks: #carry[0, #carryLength). Grown by doubling
   * (up to maxLineBytes), so a long line arriving in many small reads costs linear time; our own
   * memory, so it never pins a caller's chunk.
   */
  #carry: Buffer | null = null;
  #carryLength = 0;
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
    this.#rejectNull = options.rejectNull ?? false;
  }

  /** Lines completed so far. */
  get lines(): number {
    return this.#line;
  }

  /** Bytes held for an unfinished line. */
  get pendingBytes(): number {
    return this.#carryLength;
  }

  /**
   * Feed a chunk; returns the values of the lines it completed (appended to `out`). On an
   * error, `out` already holds the values of the lines before the failing one.
   */
  push(chunk: Uint8Array, out: unknown[] = []): unknown[] {
    let buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let start = 0;
    if (this.#carryLength > 0) {
      const nl = buf.indexOf(LF);
      if (nl === -1) {
        this.#checkLength(this.#carryLength + buf.length, false);
        this.#carryAppend(buf, 0, buf.length);
        return out;
      }
      this.#checkLength(this.#carryLength + nl, true);
      this.#carryAppend(buf, 0, nl);
      const carried = this.#carryLength - nl;
      const line = this.#carry!;
      const length = this.#carryLength;
      this.#carryLength = 0;
      // A long line's buffer is not kept for the next one.
      if (line.length > CARRY_KEEP_BYTES) this.#carry = null;
      this.#emit(line, 0, length, out);
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
      this.#carryAppend(buf, start, buf.length);
    }
    return out;
  }

  #carryAppend(buf: Buffer, start: number, end: number): void {
    const need = this.#carryLength + end - start;
    if (this.#carry === null || need > this.#carry.length) {
      // Callers checked need <= maxLineBytes (the LF is never stored), so this is the cap.
      const size = Math.min(this.maxLineBytes, Math.max(need, 2 * (this.#carry?.length ?? 0), 1024));
      const grown = Buffer.allocUnsafe(size);
      if (this.#carry !== null) this.#carry.copy(grown, 0, 0, this.#carryLength);
      this.#carry = grown;
    }
    buf.copy(this.#carry, this.#carryLength, start, end);
    this.#carryLength = need;
  }

  /** End of input: handles an unterminated last line per the `trailing` option. */
  end(out: unknown[] = []): unknown[] {
    const carry = this.#carry?.subarray(0, this.#carryLength) ?? null;
    this.#carry = null;
    this.#carryLength = 0;
    if (carry === null || carry.length === 0 || isBlank(carry, 0, carry.length)) return out;
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
    if (value === null && this.#rejectNull) {
      throw new ProtocolError('ERR_NDJSON_NULL', `line ${this.#line} is null`, {
        line: this.#line,
        offset: this.#offset,
      });
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
