// How an input's failure is told apart: a refused key (every other input would be refused too:
// the run stops), a service that cannot be reached (the input is tried again once it answers),
// or the input's own failure.

import { isAuthFailure } from '../client/retry.ts';
import { type SpeechServiceError, TransportError } from '../protocol/errors.ts';
import type { Reason } from './events.ts';

// The key was refused: every other file would be refused too (exported with the archive API).
export { isAuthFailure };

/** The service could not be reached at all (not: it answered with an error). */
export function isConnectionFailure(err: unknown): boolean {
  if (err instanceof TransportError) return err.code === 'ERR_CONNECT';
  const cause = (err as { cause?: unknown })?.cause;
  return cause !== undefined && cause !== err && isConnectionFailure(cause);
}

/** An input's failure as its reason: the error's stable code (`ERR_UNKNOWN` without one) and message. */
export function failureReason(err: unknown): Reason {
  return {
    code: (err as { code?: string }).code ?? 'ERR_UNKNOWN',
    message: err instanceof Error ? err.message : String(err),
  };
}

/** Why a run (or a cluster's queue) stops when the service refuses the key (see `isAuthFailure`). */
export function refusedKeyReason(err: unknown): Reason {
  const e = err as SpeechServiceError;
  return { code: e.code, message: `the service refused the key (${e.status}): ${e.message}` };
}
