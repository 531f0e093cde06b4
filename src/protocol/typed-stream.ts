// Typed events for the library's streams. Node's stream typings end every listener method with a
// catch-all overload (`on(event: string | symbol, listener: (...args: any[]) => void)`), so on a
// plain Duplex a misspelt event name or a handler of the wrong shape compiles and is never
// called. `TypedStream<Base, Events>` is the stream type without those overloads: its listener
// methods take the stream's own events (the `Events` map) and Node's events for that kind of
// stream, each with its arguments. It is still a `Base` (pipeline(), compose() and pipe() take
// it), since the methods are checked bivariantly against Node's. One mechanism for every stream
// the library returns; plain emitters use `EventEmitter<Events>` instead.

import type { Duplex, Readable, Writable } from 'node:stream';

/** An event map: event name → the listener's arguments, as a tuple. */
export type EventArgs<E> = { [K in keyof E]: unknown[] };

/** The events every Readable emits, with their arguments. */
export interface ReadableStreamEvents {
  close: [];
  // biome-ignore lint/suspicious/noExplicitAny: as in Node's typings: a Buffer, a string or an object, by the stream's mode
  data: [chunk: any];
  end: [];
  error: [err: Error];
  pause: [];
  readable: [];
  resume: [];
}

/** The events every Writable emits, with their arguments. */
export interface WritableStreamEvents {
  close: [];
  drain: [];
  error: [err: Error];
  finish: [];
  pipe: [src: Readable];
  unpipe: [src: Readable];
}

/** Node's own events for a stream class: a Duplex emits both sides'. */
export type StreamEventsOf<Base> = Base extends Duplex
  ? ReadableStreamEvents & WritableStreamEvents
  : Base extends Readable
    ? ReadableStreamEvents
    : Base extends Writable
      ? WritableStreamEvents
      : object;

/** The listener methods `TypedStream` retypes (Node's versions take any event name). */
export type ListenerMethods =
  | 'on'
  | 'once'
  | 'off'
  | 'addListener'
  | 'removeListener'
  | 'prependListener'
  | 'prependOnceListener'
  | 'emit'
  | 'removeAllListeners';

/**
 * A listener of an event with arguments `A`. More parameters than the event has are allowed when
 * they take `unknown` (`stream.on('end', resolve)`); a parameter of a narrower type is not.
 */
export type Listener<A extends unknown[]> = (...args: [...A, ...unknown[]]) => void;

/**
 * A `Base` stream (Duplex, Readable, Writable) whose listener methods know its events: `Events`,
 * the stream's own, and Node's for its kind. A wrong event name, or a handler whose parameters
 * do not match the event's arguments, does not compile.
 */
export type TypedStream<
  Base extends Readable | Writable,
  Events extends EventArgs<Events>,
  All extends EventArgs<All> = Events & StreamEventsOf<Base>,
> = Omit<Base, ListenerMethods> & {
  /** Call `listener` with the arguments of each `event`. */
  on<K extends keyof All & string>(event: K, listener: Listener<All[K]>): TypedStream<Base, Events>;
  /** Call `listener` with the arguments of the next `event` only. */
  once<K extends keyof All & string>(event: K, listener: Listener<All[K]>): TypedStream<Base, Events>;
  /** Stop calling `listener` (added with `on`, `once`, ...) for `event`. */
  off<K extends keyof All & string>(event: K, listener: Listener<All[K]>): TypedStream<Base, Events>;
  /** The same as `on`. */
  addListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): TypedStream<Base, Events>;
  /** The same as `off`. */
  removeListener<K extends keyof All & string>(
    event: K,
    listener: Listener<All[K]>,
  ): TypedStream<Base, Events>;
  /** As `on`, called before the listeners added earlier. */
  prependListener<K extends keyof All & string>(
    event: K,
    listener: Listener<All[K]>,
  ): TypedStream<Base, Events>;
  /** As `once`, called before the listeners added earlier. */
  prependOnceListener<K extends keyof All & string>(
    event: K,
    listener: Listener<All[K]>,
  ): TypedStream<Base, Events>;
  /** Call the listeners of `event` with `args`; true when it had listeners. */
  emit<K extends keyof All & string>(event: K, ...args: All[K]): boolean;
  /** Remove every listener of `event`, or of every event. */
  removeAllListeners(event?: keyof All & string): TypedStream<Base, Events>;
};
