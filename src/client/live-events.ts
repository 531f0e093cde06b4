// The events of a LiveSession, by name, with their arguments: its EventEmitter is typed by this
// map, so a wrong event name or handler does not compile.

import type { SpeechServiceError } from '../protocol/errors.ts';
import type { LiveKind, LiveRecord } from './live-types.ts';

/** The events of a {@link LiveSession}, by name, with their arguments. */
export interface LiveSessionEvents<K extends LiveKind = LiveKind> {
  /** Each record of this session, in arrival order (the `is_final` one too). */
  record: [record: LiveRecord<K>];
  /** The `is_final` record: the session is complete. */
  final: [record: LiveRecord<K>];
  /**
   * The session failed (also the rejection of `done`). Emitted only when someone listens. The
   * value is what failed it: a speechpipe error, or an abort signal's own reason.
   */
  error: [err: unknown];
  /** A frame was refused with 429 `SESSION_BYTE_RATE_EXCEEDED`; it is sent again after the delay. */
  'rate-limited': [err: SpeechServiceError];
}
