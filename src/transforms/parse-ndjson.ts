// parseNdjson(): bytes in, one parsed value per complete NDJSON line out (object mode).

import type { Transform } from 'node:stream';
import { NdjsonDecoder, type NdjsonDecoderOptions } from '../protocol/ndjson.ts';
import { coreTransform } from './core-transform.ts';

/** Options of {@link parseNdjson}: the NDJSON decoder's (a `null` line is always refused). */
export type ParseNdjsonOptions = Omit<NdjsonDecoderOptions, 'rejectNull'>;

/**
 * A Transform from NDJSON bytes to values. Errors are `ProtocolError`s naming the line (`line`):
 * `ERR_NDJSON_LINE_TOO_LONG`, `ERR_NDJSON_INVALID_JSON`, `ERR_NDJSON_TRUNCATED`, and
 * `ERR_NDJSON_NULL` for a `null` line (an object stream cannot carry null). The values of the
 * lines before a failing one are passed on first, however the input was split.
 */
export function parseNdjson(options: ParseNdjsonOptions = {}): Transform {
  const decoder = new NdjsonDecoder({ ...options, rejectNull: true });
  return coreTransform(
    { push: (chunk: Buffer, out: unknown[]) => decoder.push(chunk, out), end: (out) => decoder.end(out) },
    { readableObjectMode: true },
  );
}
