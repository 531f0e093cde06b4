// parseNdjson(): bytes in, one parsed value per complete NDJSON line out (object mode).

import type { Transform } from 'node:stream';
import { ProtocolError } from '../protocol/errors.ts';
import { NdjsonDecoder, type NdjsonDecoderOptions } from '../protocol/ndjson.ts';
import { coreTransform } from './core-transform.ts';

export type ParseNdjsonOptions = NdjsonDecoderOptions;

/**
 * A Transform from NDJSON bytes to values. Errors are `ProtocolError`s naming the line:
 * `ERR_NDJSON_LINE_TOO_LONG`, `ERR_NDJSON_INVALID_JSON`, `ERR_NDJSON_TRUNCATED`, and
 * `ERR_NDJSON_NULL` for a `null` line (an object stream cannot carry null).
 */
export function parseNdjson(options: ParseNdjsonOptions = {}): Transform {
  const decoder = new NdjsonDecoder(options);
  const noNulls = (values: unknown[]) => {
    const at = values.indexOf(null);
    if (at !== -1)
      throw new ProtocolError('ERR_NDJSON_NULL', `line ${decoder.lines - values.length + at + 1} is null`);
    return values;
  };
  return coreTransform(
    { push: (chunk: Buffer) => noNulls(decoder.push(chunk)), end: () => noNulls(decoder.end()) },
    { readableObjectMode: true },
  );
}
