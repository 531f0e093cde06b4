// An async queue between the producers of a run's events (callbacks, a pipeline, timers) and the
// one async generator that yields them: push and wake the consumer, wake it without an event
// when something it looks at changed, and, for producers that can wait, room below a mark so
// that a consumer that stops pulling stops them too.

const RESOLVED = Promise.resolve();

/** Options of an {@link EventQueue}. */
export interface EventQueueOptions {
  /**
   * Events queued at which `room()` waits until the consumer takes some. A push is never refused
   * (a callback cannot wait): the mark bounds the producers that await `room()`. Default: no mark.
   */
  highWaterMark?: number;
}

/** Events in push order for one consumer; see the module comment. */
export class EventQueue<T> {
  readonly #highWaterMark: number;
  #items: T[] = [];
  /** Index of the oldest event in `#items` (taken events before it are cleared). */
  #head = 0;
  #waiting: Promise<void> | undefined;
  #wakeConsumer: (() => void) | undefined;
  readonly #roomWaiters: (() => void)[] = [];
  #closed = false;

  constructor(options: EventQueueOptions = {}) {
    const mark = options.highWaterMark ?? Number.POSITIVE_INFINITY;
    if (!(mark >= 1) || (Number.isFinite(mark) && !Number.isSafeInteger(mark)))
      throw new RangeError(`highWaterMark must be a positive integer, got ${mark}`);
    this.#highWaterMark = mark;
  }

  /** Events queued, not yet taken. */
  get length(): number {
    return this.#items.length - this.#head;
  }

  /** The consumer has left: pushes are dropped and `room()` resolves at once. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Queue `event` and wake the consumer. Dropped once closed (nobody would take it). */
  push(event: T): void {
    if (this.#closed) return;
    this.#items.push(event);
    this.wake();
  }

  /** Wake the consumer without an event: a condition it checks between events changed. */
  wake(): void {
    const wake = this.#wakeConsumer;
    this.#wakeConsumer = undefined;
    this.#waiting = undefined;
    wake?.();
  }

  /** The oldest event, taken from the queue, or undefined when none is queued. */
  shift(): T | undefined {
    if (this.length === 0) return undefined;
    const event = this.#items[this.#head]!;
    this.#items[this.#head] = undefined as T;
    this.#head++;
    if (this.#head === this.#items.length) {
      this.#items = [];
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    if (this.#roomWaiters.length > 0 && this.length < this.#highWaterMark) this.#releaseRoom();
    return event;
  }

  /**
   * The events queued, taken one at a time as the iteration asks (`yield* queue.drain()`): those
   * pushed meanwhile come too, and it ends when the queue is empty.
   */
  *drain(): Generator<T, void, undefined> {
    while (this.length > 0) yield this.shift()!;
  }

  /**
   * Resolves at the next push or wake, or at once when an event is queued or the queue is closed.
   * One consumer: waiting twice before either resolves gives the same promise.
   */
  wait(): Promise<void> {
    if (this.length > 0 || this.#closed) return RESOLVED;
    this.#waiting ??= new Promise<void>((resolve) => {
      this.#wakeConsumer = resolve;
    });
    return this.#waiting;
  }

  /** Resolves once fewer than `highWaterMark` events are queued (at once if so), or when closed. */
  room(): Promise<void> {
    if (this.#closed || this.length < this.#highWaterMark) return RESOLVED;
    return new Promise<void>((resolve) => this.#roomWaiters.push(resolve));
  }

  /**
   * The consumer has left: the events queued are dropped, producers waiting for room go on, and
   * later pushes are dropped.
   */
  close(): void {
    this.#closed = true;
    this.#items = [];
    this.#head = 0;
    this.#releaseRoom();
    this.wake();
  }

  #releaseRoom(): void {
    for (const resolve of this.#roomWaiters.splice(0)) resolve();
  }
}
