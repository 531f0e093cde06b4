// A live stream over framed HTTP: one POST per frame, serialized per stream (the next frame goes
// once the previous answer ended: records arrive in order, and diarization requires it), each
// answer's NDJSON records read in the background only as fast as the session takes them. An
// aborted exchange cancels the stream at the service; a closing frame ends one that is live.

import {
  IncompleteStreamError,
  ProtocolError,
  SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import { FRAME_FLAG_IS_FINAL } from '../protocol/frame.ts';
import { NdjsonDecoder } from '../protocol/ndjson.ts';
import type { OperationName } from '../protocol/operations.ts';
import { RetryPolicy } from './attempts.ts';
import { decoded, type HttpTransport } from './http.ts';
import type { ChannelListener, LiveChannel } from './live-channel.ts';
import { untilAborted } from './retry.ts';

/** What an {@link HttpLiveChannel} needs from its client. */
export interface HttpLiveChannelDeps {
  http: HttpTransport;
  /** `/http/stt-stream` or `/http/diarization-stream`, with the deployment's prefix. */
  path: string;
  operation: OperationName;
}

/** The closing exchange: tried again on 429 and 5xx (the stream is still live) until its deadline. */
const CLOSING_RETRY = { maxAttempts: Number.POSITIVE_INFINITY, baseMs: 50, maxMs: 1000 };

export class HttpLiveChannel implements LiveChannel {
  readonly #deps: HttpLiveChannelDeps;
  readonly #listener: ChannelListener;
  /** Ends the exchange under way and the answers being read (cancel, close). */
  readonly #stop = new AbortController();
  /** The answer being read: the next frame waits for its end. */
  #previous: Promise<void> = Promise.resolve();
  #paused = false;
  #resumed: (() => void)[] = [];
  #received = 0;

  constructor(deps: HttpLiveChannelDeps, listener: ChannelListener) {
    this.#deps = deps;
    this.#listener = listener;
  }

  async send(frame: Buffer, signal: AbortSignal): Promise<void> {
    const { http, operation, path } = this.#deps;
    await untilAborted(this.#previous, signal);
    this.#stop.signal.throwIfAborted();
    const final = (frame[16]! & FRAME_FLAG_IS_FINAL) !== 0;
    // The exchange's own signal: the channel's stop ends it (its answer too), the send's only
    // while send() runs (see below). Listeners on the two, not AbortSignal.any: a composite
    // signal per frame cost more than the frame.
    const exchange = new AbortController();
    const stop = this.#stop.signal;
    const onStop = () => exchange.abort(stop.reason);
    const onSend = () => exchange.abort(signal.reason);
    stop.addEventListener('abort', onStop, { once: true });
    if (signal.aborted) onSend();
    else signal.addEventListener('abort', onSend, { once: true });
    let reading = false;
    try {
      const res = await http.send({
        operation,
        method: 'POST',
        path,
        headers: { 'content-type': 'application/octet-stream', accept: 'application/x-ndjson' },
        body: frame,
        signal: exchange.signal,
      });
      if (res.status !== 200) throw await http.errorOf(res, operation);
      // Accepted: its records are read in the background, and belong to the stream from now
      // on, not to this send (whose signal may abort later, a timeout say).
      reading = true;
      this.#previous = this.#read(res.body, final).finally(() => stop.removeEventListener('abort', onStop));
    } finally {
      signal.removeEventListener('abort', onSend);
      if (!reading) stop.removeEventListener('abort', onStop);
    }
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    for (const wake of this.#resumed.splice(0)) wake();
  }

  /**
   * Aborting the exchange under way cancels the stream if the service had not answered it yet;
   * if it had, the stream is live. The closing frame settles both: accepted, the stream
   * finishes; 409, it was gone already. A 429 (the aborted exchange still counted as in
   * flight) or a 5xx left it live: the frame goes again until `timeoutMs`.
   */
  async cancel(closing: Buffer, timeoutMs: number): Promise<void> {
    this.close();
    const { http, operation, path } = this.#deps;
    // Not the client's policy: a client being closed ends its sessions this way.
    const policy = new RetryPolicy({ retry: CLOSING_RETRY });
    try {
      await policy.run({
        operation,
        deadline: timeoutMs,
        retryable: (err) =>
          err instanceof TransportError ||
          (err instanceof SpeechServiceError && (err.status >= 500 || err.status === 429)),
        run: async ({ signal }) => {
          const res = await http.send({
            operation,
            method: 'POST',
            path,
            headers: { 'content-type': 'application/octet-stream', accept: 'application/x-ndjson' },
            body: closing,
            signal,
          });
          if (res.status >= 500 || res.status === 429) throw await http.errorOf(res, operation);
          await res.body.dump({ limit: 64 * 1024, signal });
        },
      });
    } catch {
      // Best effort: the service's own expiry ends what could not be ended here.
    }
  }

  close(): void {
    if (!this.#stop.signal.aborted) this.#stop.abort(new Error('live channel closed'));
    this.resume();
  }

  async #read(body: AsyncIterable<unknown> & { destroy(err?: Error): void }, final: boolean): Promise<void> {
    const { operation } = this.#deps;
    const decoder = new NdjsonDecoder();
    const stopped = () => this.#stop.signal.aborted;
    try {
      for await (const chunk of body) {
        for (const value of decoded((out) => decoder.push(chunk as Buffer, out))) this.#deliver(value);
        // Backpressure: the next chunk is read only once the consumer takes records again.
        while (this.#paused && !stopped()) await new Promise<void>((resolve) => this.#resumed.push(resolve));
        if (stopped()) {
          body.destroy();
          return;
        }
      }
      for (const value of decoded((out) => decoder.end(out))) this.#deliver(value);
    } catch (err) {
      if (stopped()) return;
      this.#listener.failed(
        err instanceof ProtocolError && err.code !== 'ERR_NDJSON_TRUNCATED'
          ? err
          : new IncompleteStreamError(`${operation}: response broke off (${(err as Error).message})`, {
              operation,
              received: this.#received,
              cause: err,
            }),
      );
      return;
    }
    // The request's final bit and the end of a response are not completion: a session that has
    // its final record by now ignores this.
    if (final && !stopped()) {
      this.#listener.failed(
        new IncompleteStreamError(`${operation}: stream ended without a record with is_final: true`, {
          operation,
          received: this.#received,
        }),
      );
    }
  }

  #deliver(value: unknown): void {
    if (this.#stop.signal.aborted) return;
    this.#received++;
    this.#listener.record(value);
  }
}
