// What the broadcast caption outputs (OBS, YouTube) share: the transcript events they take,
// the speaker-change mark, a bounded queue, and the ledger of captions made, delivered and
// not delivered (with why), so that no caption is lost without being counted and said.

import type { Writable } from 'node:stream';
import { InvalidArgumentError, SpeechpipeError } from '../protocol/errors.ts';
import type { CaptionWord } from '../transforms/to-captions.ts';
import { captionOutput } from './caption-output.ts';

/** Why a caption was not delivered. */
export type UndeliveredReason =
  /** OBS was not streaming (it answers 501 then): a live caption has nowhere to go. */
  | 'not-streaming'
  /** The receiver refused it (OBS: an error status; YouTube: a 4xx other than 408 and 429). */
  | 'refused'
  /** The queue was full (the receiver was unreachable or slower than the captions): the oldest went. */
  | 'overflow'
  /** Still waiting when the output closed (interrupted, or the receiver unreachable at the end). */
  | 'unsent';

/** Counts of an output's captions: every one made is delivered, undelivered (by reason) or pending. */
export interface CaptionDeliveryStats {
  /** Captions made from the transcript (OBS: lines; YouTube: cues). */
  made: number;
  /** Captions the receiver accepted. */
  delivered: number;
  /** Words in the captions made, and in those delivered. */
  words: { made: number; delivered: number };
  /** Captions not delivered, by reason (zero counts included). */
  undelivered: Record<UndeliveredReason, number>;
  /** Captions queued or in flight now. */
  pending: number;
}

/** One caption an output delivers: its text, its word count, and when its last word was spoken. */
export interface DeliveryItem {
  text: string;
  words: number;
  /** Seconds from the start of the audio to the end of its last word. */
  end: number;
}

/**
 * A broadcast caption output's warning or failure, with a stable code: `ERR_OBS_AUTH`,
 * `ERR_OBS_PROTOCOL`, `ERR_OBS_UNREACHABLE`, `ERR_OBS_NOT_STREAMING`, `ERR_OBS_REFUSED`,
 * `ERR_OBS_UNSHOWN_CHARACTERS`, `ERR_YOUTUBE_REFUSED`, `ERR_YOUTUBE_RETRYING`,
 * `ERR_CAPTIONS_UNDELIVERED`. Never carries a password or a caption URL's secret.
 */
export class CaptionOutputError extends SpeechpipeError {
  override name = 'CaptionOutputError';
  /** Which output: `obs` or `youtube`. */
  readonly output: 'obs' | 'youtube';

  constructor(output: 'obs' | 'youtube', code: string, message: string) {
    super(code, message);
    this.output = output;
  }
}

/** The counts an output keeps; `pending` is asked of the output when stats are read. */
export class DeliveryLedger {
  made = 0;
  delivered = 0;
  wordsMade = 0;
  wordsDelivered = 0;
  readonly undelivered: Record<UndeliveredReason, number> = {
    'not-streaming': 0,
    refused: 0,
    overflow: 0,
    unsent: 0,
  };

  add(item: DeliveryItem): void {
    this.made++;
    this.wordsMade += item.words;
  }

  deliver(items: readonly DeliveryItem[]): void {
    this.delivered += items.length;
    for (const item of items) this.wordsDelivered += item.words;
  }

  lose(items: readonly DeliveryItem[], reason: UndeliveredReason): void {
    this.undelivered[reason] += items.length;
  }

  stats(pending: number): CaptionDeliveryStats {
    return {
      made: this.made,
      delivered: this.delivered,
      words: { made: this.wordsMade, delivered: this.wordsDelivered },
      undelivered: { ...this.undelivered },
      pending,
    };
  }
}

/** A queue of at most `max` items: past it, the oldest are pushed out and returned. */
export class BoundedQueue<T> {
  readonly #items: T[] = [];
  readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  get length(): number {
    return this.#items.length;
  }

  /** Add at the back; returns what no longer fits (the oldest), to be counted. */
  push(item: T): T[] {
    this.#items.push(item);
    return this.#items.length > this.max ? this.#items.splice(0, this.#items.length - this.max) : [];
  }

  /** Put back at the front (a send that did not happen); may push the newest past the bound out. */
  unshift(items: readonly T[]): T[] {
    this.#items.unshift(...items);
    return this.#items.length > this.max ? this.#items.splice(this.max) : [];
  }

  peek(n: number): T[] {
    return this.#items.slice(0, n);
  }

  take(n: number): T[] {
    return this.#items.splice(0, n);
  }
}

/** The broadcast mark of a new speaker, as captioners write it. */
export const SPEAKER_CHANGE = '>>';

/** Words of a caption text, the speaker-change mark not counted. */
export function wordCount(text: string): number {
  return text.split(/\s+/).filter((w) => w !== '' && w !== SPEAKER_CHANGE).length;
}

/** An integer option in [min, max], or its default. */
export function integerOption(
  output: string,
  name: string,
  value: number | undefined,
  fallback: number,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const v = value ?? fallback;
  if (!Number.isSafeInteger(v) || v < min || v > max)
    throw new InvalidArgumentError(
      `${output}: ${name} must be an integer from ${min}${max === Number.MAX_SAFE_INTEGER ? '' : ` to ${max}`}, got ${v}`,
    );
  return v;
}

/** What a broadcast caption output does for its receiver (OBS, YouTube); the rest is {@link CaptionDelivery}'s. */
export interface CaptionReceiver<I extends DeliveryItem> {
  /** The captions an utterance's words make (an `InvalidArgumentError` for words that are not). */
  itemsOf(words: readonly CaptionWord[]): I[];
  /** Send what can go now; with nothing to send, call `idle()`. Called when captions were queued. */
  move(): void;
  /** Captions sent and not answered yet. */
  inFlight(): number;
  /** Let the receiver go (connections, timers), counting what is in flight `unsent`. */
  release(): Promise<void>;
}

/** A Writable of transcript events that delivers to a receiver: its counts, and how to stop it. */
export interface DeliverySink<S extends CaptionDeliveryStats> extends Writable {
  /** Counts so far. */
  stats(): S;
  /** Stop at once: what waits or is in flight is counted `unsent`. Same as `destroy()`, awaited. */
  close(): Promise<void>;
}

/**
 * The part of a broadcast caption output that does not depend on its receiver: the bounded
 * queue and the counts, warnings said once, writes that never wait, and the end: once the
 * writes end, the queue drains, and what could not go in `endTimeoutMs` without a caption
 * delivered is counted `unsent`.
 */
export class CaptionDelivery<I extends DeliveryItem> {
  readonly queue: BoundedQueue<I>;
  readonly ledger = new DeliveryLedger();
  /** The output stopped (ended, destroyed or closed): nothing more is sent. */
  closed = false;
  readonly #output: 'obs' | 'youtube';
  readonly #endTimeoutMs: number;
  /** The warning each reason of loss says (once). */
  readonly #saying: Partial<Record<UndeliveredReason, [code: string, message: string]>>;
  readonly #said = new Set<string>();
  #receiver: CaptionReceiver<I> | undefined;
  #sink: Writable | undefined;
  #ending: { callback: (err?: Error | null) => void; timer: NodeJS.Timeout | undefined } | undefined;
  #stopping: Promise<void> | undefined;

  constructor(
    output: 'obs' | 'youtube',
    options: {
      maxQueued: number;
      endTimeoutMs: number;
      saying: Partial<Record<UndeliveredReason, [code: string, message: string]>>;
    },
  ) {
    this.#output = output;
    this.queue = new BoundedQueue<I>(options.maxQueued);
    this.#endTimeoutMs = options.endTimeoutMs;
    this.#saying = options.saying;
  }

  /** Emit a `warning` with `code`, unless one was said since the last `forgive(code)`. */
  warn(code: string, message: string): void {
    if (this.#said.has(code)) return;
    this.#said.add(code);
    this.#sink?.emit('warning', new CaptionOutputError(this.#output, code, message));
  }

  /** The state `codes` reported is over: they may be said again. */
  forgive(...codes: string[]): void {
    for (const code of codes) this.#said.delete(code);
  }

  lose(items: readonly I[], reason: UndeliveredReason): void {
    if (items.length === 0) return;
    this.ledger.lose(items, reason);
    const saying = this.#saying[reason];
    if (saying) this.warn(...saying);
  }

  /** The receiver took these: counted, emitted (`delivered`), and the end waits anew. */
  deliver(items: readonly I[]): void {
    this.ledger.deliver(items);
    for (const item of items) this.#sink?.emit('delivered', item);
    this.progress();
  }

  /** Something was settled (delivered, or refused for good): the end waits anew. */
  progress(): void {
    const ending = this.#ending;
    if (!ending) return;
    clearTimeout(ending.timer);
    ending.timer = setTimeout(() => this.#finish(), this.#endTimeoutMs);
  }

  /** The receiver has nothing to send now: the end, if the writes ended and nothing is left. */
  idle(): void {
    if (this.#ending && this.queue.length === 0 && (this.#receiver?.inFlight() ?? 0) === 0) this.#finish();
  }

  stats(): CaptionDeliveryStats {
    return this.ledger.stats(this.queue.length + (this.#receiver?.inFlight() ?? 0));
  }

  /** Stop: what waits is counted `unsent`, then the receiver is let go. */
  stop(): Promise<void> {
    this.#stopping ??= (async () => {
      this.closed = true;
      clearTimeout(this.#ending?.timer);
      this.lose(this.queue.take(this.queue.length), 'unsent');
      await this.#receiver?.release();
    })();
    return this.#stopping;
  }

  #finish(): void {
    const ending = this.#ending;
    if (!ending) return;
    clearTimeout(ending.timer);
    this.#ending = undefined;
    this.stop().then(() => ending.callback(), ending.callback);
  }

  /** The output (a {@link captionOutput}, named `name` in its errors), delivering through `receiver`. */
  writable<S extends CaptionDeliveryStats>(
    name: string,
    receiver: CaptionReceiver<I>,
    stats: () => S,
  ): DeliverySink<S> {
    this.#receiver = receiver;
    const sink = captionOutput(name, {
      utterance: (event) => {
        if (event.words.length === 0) return;
        const items = receiver.itemsOf(event.words);
        for (const item of items) {
          this.ledger.add(item);
          this.lose(this.queue.push(item), 'overflow');
        }
        // Never waits for the receiver: the other outputs go on at their own pace.
        if (items.length > 0) receiver.move();
      },
      end: () =>
        new Promise<void>((resolve, reject) => {
          this.#ending = { callback: (err) => (err ? reject(err) : resolve()), timer: undefined };
          this.progress();
          receiver.move();
          this.idle();
        }),
      destroy: () => {
        this.#ending = undefined;
        return this.stop().catch(() => {});
      },
    }) as DeliverySink<S>;
    Object.defineProperties(sink, {
      stats: { value: stats },
      close: {
        value: (): Promise<void> => {
          if (!sink.destroyed) sink.destroy();
          return this.stop();
        },
      },
    });
    this.#sink = sink;
    return sink;
  }
}
