// An upload that the caller aborts part-way: the input gives its first chunk, then, asked for
// more, aborts the signal of the operation reading it.

import { Readable } from 'node:stream';

export function abortingUpload(first: Buffer): { stream: Readable; signal: AbortSignal; reason: Error } {
  const controller = new AbortController();
  const reason = new Error('user stopped');
  let pulls = 0;
  const stream = new Readable({
    read() {
      if (pulls++ === 0) this.push(first);
      else controller.abort(reason);
    },
  });
  return { stream, signal: controller.signal, reason };
}
