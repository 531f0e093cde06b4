// parseNdjson(): bytes in, one parsed value per complete NDJSON line out (object mode).

import { Transform, type TransformCallback } from 'node:stream';
import { ProtocolError } from '../protocol/errors.ts';
import { NdjsonDecoder, type NdjsonDecoderOptions } from '../protocol/ndjson.ts';

export type ParseNdjsonOptions = NdjsonDecoderOptions;

/**
 * A Transform from NDJSON bytes to values. Errors are `ProtocolError`s naming the line:
 * `ERR_NDJSON_LINE_TOO_LONG`, `ERR_NDJSON_INVALID_JSON`, `ERR_NDJSON_TRUNCATED`, and
 * `ERR_NDJSON_NULL` for a `null` line (an object stream cannot carry null).
 */
export function parseNdjson(options: ParseNdjsonOptions = {}): Transform {
  const decoder = new NdjsonDecoder(options);
  // A fresh array per call: truncating a reused one costs more than allocating.
  const pushAll = (stream: Transform, values: unknown[]) => {
    for (let i = 0; i < values.length; i++) {
      const value = values[i];
      if (value === null) {
        throw new ProtocolError('ERR_NDJSON_NULL', `line ${decoder.lines - values.length + i + 1} is null`);
      }
      stream.push(value);
    }
  };
  return new Transform({
    readableObjectMode: true,
    transform(this: Transform, chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      try {
        pushAll(this, decoder.push(chunk));
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
    flush(this: Transform, callback: TransformCallback) {
      try {
        pushAll(this, decoder.end());
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
  });
}
