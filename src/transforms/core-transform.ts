// The thin stream adapter around a pure core (the csv-parse design): each chunk goes to
// `push`, the end of input to `end`, and whatever they return is pushed downstream; a throw
// becomes the stream's error.

import { Transform, type TransformOptions } from 'node:stream';

export interface StreamCore<In, Out> {
  /**
   * Outputs for one input: returned, or appended to `out`. What a core appended to `out` (or
   * yielded) before it threw is passed on ahead of the error, so the output before an error
   * does not depend on how the input was split into chunks.
   */
  push(input: In, out: Out[]): Iterable<Out>;
  end?(out: Out[]): Iterable<Out> | undefined;
}

export function coreTransform<In, Out>(
  core: StreamCore<In, Out>,
  options: Pick<TransformOptions, 'objectMode' | 'readableObjectMode' | 'writableObjectMode'> = {},
): Transform {
  const run = (
    stream: Transform,
    step: (out: Out[]) => Iterable<Out> | undefined,
    callback: (err?: Error) => void,
  ) => {
    const out: Out[] = [];
    let stepped = false;
    try {
      const outputs = step(out);
      stepped = true;
      for (const value of out) stream.push(value);
      if (outputs !== undefined && outputs !== out) for (const value of outputs) stream.push(value);
    } catch (err) {
      if (!stepped) for (const value of out) stream.push(value);
      callback(err as Error);
      return;
    }
    callback();
  };
  return new Transform({
    ...options,
    transform(this: Transform, chunk: In, _encoding, callback) {
      run(this, (out) => core.push(chunk, out), callback);
    },
    flush(this: Transform, callback) {
      run(this, (out) => core.end?.(out), callback);
    },
  });
}
