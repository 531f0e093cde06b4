// How an input's failure is told apart: a refused key (every other input would be refused too:
// the run stops), a service that cannot be reached (the input is tried again once it answers),
// or the input's own failure.

import { isAuthFailure } from '../client/retry.ts';
import { TransportError } from '../protocol/errors.ts';

// The key was refused: every other file would be refused too (exported with the archive API).
export { isAuthFailure };

/** The service could not be reached at all (not: it answered with an error). */
export function isConnectionFailure(err: unknown): boolean {
  if (err instanceof TransportError) return err.code === 'ERR_CONNECT';
  const cause = (err as { cause?: unknown })?.cause;
  return cause !== undefined && cause !== err && isConnectionFailure(cause);
}
