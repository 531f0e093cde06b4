// What a live session needs from a transport, and nothing more: send an encoded frame and learn
// when the service accepted it, hear the stream's records and failures, hold off reading while
// the consumer is full, end the stream at the service after a failure, release everything.
// `HttpLiveChannel` and `SocketLiveChannel` implement it; tests use a fake one.

import type { LiveKind, LiveTransport } from './live-types.ts';

/** What a channel tells its session. */
export interface ChannelListener {
  /** A record for this stream, in arrival order (not yet validated). */
  record(value: unknown): void;
  /**
   * The channel can carry nothing more for this stream: an answer broke off, the answer to the
   * final frame ended (over HTTP that is not completion), the connection dropped, the service
   * refused the stream with an event. The session fails unless it has finished already.
   * `gone`: the service no longer holds the stream (its connection dropped), so there is
   * nothing to end there.
   */
  failed(err: unknown, gone?: boolean): void;
}

/** One live stream's link to the service, made by a {@link ChannelFactory}. */
export interface LiveChannel {
  /**
   * Send one encoded live input frame. Resolves once the service accepted it; rejects with its
   * refusal (a `SpeechServiceError`) or a transport failure. Frames go one at a time: a call
   * is made only after the previous one settled. `signal` ends this send (its wait and its
   * exchange), and nothing after it: the records of an accepted frame are not its to cut.
   */
  send(frame: Buffer, signal: AbortSignal): Promise<void>;
  /** Read no more records for now (the consumer is full); a transport that cannot hold off ignores it. */
  pause(): void;
  /** Read records again. */
  resume(): void;
  /**
   * The session is over without its final record (failed or aborted) while the service may
   * still hold the stream: end it there so the account's slot comes back at once, within
   * `timeoutMs`, then release everything. `closing` is a final frame of silence for a
   * transport that ends a stream with one. Best effort: never rejects.
   */
  cancel(closing: Buffer, timeoutMs: number): Promise<void>;
  /** Release everything (the session finished, or the service no longer holds the stream). */
  close(): void;
}

/** What a session asks of a channel besides its kind and transport. */
export interface ChannelOptions {
  /** The stream UUID, lowercase: Socket.IO routes the stream's records and errors by it. */
  streamId: string;
  /** Socket.IO: wait for the service to acknowledge each frame. */
  acks: boolean;
  /** Socket.IO: the acknowledgement wait. */
  ackTimeoutMs: number;
}

/** Opens the channel of one live stream. */
export type ChannelFactory = (
  kind: LiveKind,
  transport: LiveTransport,
  listener: ChannelListener,
  options: ChannelOptions,
) => LiveChannel;
