// Abort for speechpipe's streams: the stream is destroyed with the signal's own reason, as
// runFfmpeg() and the worker pool reject with it (Node's addAbortSignal wraps it in an AbortError).

import type { Duplex, Readable } from 'node:stream';

/** Destroy `stream` with `signal.reason` when the signal aborts (at once if it already has). */
export function destroyOnAbort(stream: Duplex | Readable, signal: AbortSignal | undefined): void {
  if (!signal) return;
  // A reason need not be an Error (abort('why')); the stream fails with it as given.
  const onAbort = () => stream.destroy(signal.reason as Error);
  if (signal.aborted) {
    onAbort();
    return;
  }
  signal.addEventListener('abort', onAbort, { once: true });
  stream.once('close', () => signal.removeEventListener('abort', onAbort));
}
