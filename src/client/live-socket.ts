// A live stream over Socket.IO, on a connection of its own: one event per frame (acknowledged,
// which is the backpressure), the stream's records and errors routed to it by its id. Its own
// connection is how it ends: the service drops a connection's streams with it, at once, even
// behind a frame the service is holding, which no closing frame could pass (it would queue
// behind the held one until the stream's 60 s expiry, keeping the account's slot).

import { IncompleteStreamError, SpeechServiceError } from '../protocol/errors.ts';
import type { OperationName } from '../protocol/operations.ts';
import { RetryPolicy } from './attempts.ts';
import type { ChannelListener, LiveChannel } from './live-channel.ts';
import type { SocketTransport } from './socket.ts';

/** The closing frame: sent again on 429 and 5xx (the stream is still live) until its deadline. */
const CLOSING_RETRY = { maxAttempts: Number.POSITIVE_INFINITY, baseMs: 50, maxMs: 1000 };

/** What a {@link SocketLiveChannel} needs from its client. */
export interface SocketLiveChannelDeps {
  /** A new connection (not connected until first used), used by this stream alone. */
  connection: () => SocketTransport;
  operation: OperationName;
  /** `audio_stream` or `diarization_stream`. */
  event: string;
  /** `transcription_result` or `diarization_result`. */
  resultEvent: string;
  streamId: string;
  /** Wait for the service to acknowledge each frame (backpressure). */
  acks: boolean;
  ackTimeoutMs: number;
}

export class SocketLiveChannel implements LiveChannel {
  readonly #deps: SocketLiveChannelDeps;
  readonly #listener: ChannelListener;
  #socket: SocketTransport | undefined;
  #unroute: (() => void) | undefined;
  #closed = false;
  /** Frames sent and not yet acknowledged. */
  #inFlight = 0;
  #sent = 0;
  #received = 0;

  constructor(deps: SocketLiveChannelDeps, listener: ChannelListener) {
    this.#deps = deps;
    this.#listener = listener;
  }

  async send(frame: Buffer, signal: AbortSignal): Promise<void> {
    const { operation, event } = this.#deps;
    const socket = this.#open();
    this.#inFlight++;
    try {
      if (!this.#deps.acks) {
        await socket.emit(operation, event, frame, signal);
      } else {
        const ack = await socket.emitWithAck(operation, event, frame, {
          timeoutMs: this.#deps.ackTimeoutMs,
          signal,
        });
        const refused = socket.ackError(ack, operation);
        if (refused) throw refused;
      }
      this.#sent++;
    } finally {
      this.#inFlight--;
    }
  }

  /** Socket.IO cannot hold off one stream's events: the session buffers its records. */
  pause(): void {}

  resume(): void {}

  /**
   * Dropping the connection ends the stream at the service, whatever it was doing; a frame the
   * service holds would keep a closing frame behind it until the stream's expiry. With no frame
   * under way, the closing frame goes first, so that once it is acknowledged the service has
   * ended the stream (a dropped connection is processed there on its own time).
   */
  async cancel(closing: Buffer, timeoutMs: number): Promise<void> {
    const socket = this.#socket;
    if (socket?.connected && this.#inFlight === 0 && !this.#closed) {
      const { operation, event } = this.#deps;
      this.#unroute?.();
      this.#unroute = undefined;
      try {
        await new RetryPolicy({ retry: CLOSING_RETRY }).run({
          operation,
          deadline: timeoutMs,
          retryable: (err) => err instanceof SpeechServiceError && (err.status >= 500 || err.status === 429),
          run: async ({ signal }) => {
            const ack = await socket.emitWithAck(operation, event, closing, { timeoutMs, signal });
            const refused = socket.ackError(ack, operation);
            if (refused && (refused.status >= 500 || refused.status === 429)) throw refused;
          },
        });
      } catch {
        // Best effort: the connection is dropped below in any case.
      }
    }
    this.close();
  }

  close(): void {
    this.#closed = true;
    this.#unroute?.();
    this.#unroute = undefined;
    this.#socket?.close();
  }

  #open(): SocketTransport {
    if (this.#socket) return this.#socket;
    const { operation, resultEvent, streamId } = this.#deps;
    const socket = this.#deps.connection();
    this.#socket = socket;
    if (this.#closed) socket.close();
    this.#unroute = socket.route(streamId, {
      operation,
      onResult: (event, payload) => {
        if (event !== resultEvent) return;
        this.#received++;
        this.#listener.record(payload);
      },
      onError: (err) => this.#listener.failed(err),
      onDisconnect: (err) =>
        // The service drops a connection's streams with it: nothing is left to end there.
        this.#listener.failed(
          err.code !== 'ERR_CLIENT_CLOSED' && (this.#received > 0 || this.#sent > 0)
            ? new IncompleteStreamError(`${operation}: connection lost during stream ${streamId}`, {
                operation,
                id: streamId,
                received: this.#received,
                cause: err,
              })
            : err,
          true,
        ),
    });
    return socket;
  }
}
