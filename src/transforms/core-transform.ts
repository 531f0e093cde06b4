// The thin stream adapter around a pure core (the csv-parse design): each chunk goes to
// `push`, the end of input to `end`, and whatever they return is pushed downstream; a throw
// becomes the stream's error.

import { Transform, type TransformOptions } from 'node:stream';

export interface StreamCore<In, Out> {
  push(input: In): Iterable<Out>;
  end?(): Iterable<Out> | undefined;
}

export function coreTransform<In, Out>(
  core: StreamCore<In, Out>,
  options: Pick<TransformOptions, 'objectMode' | 'readableObjectMode' | 'writableObjectMode'> = {},
): Transform {
  const pushAll = (stream: Transform, outputs: Iterable<Out> | undefined) => {
    if (outputs) for (const out of outputs) stream.push(out);
  };
  return new Transform({
    ...options,
    transform(this: Transform, chunk: In, _encoding, callback) {
      try {
        pushAll(this, core.push(chunk));
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
    flush(this: Transform, callback) {
      try {
        pushAll(this, core.end?.());
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
  });
}
