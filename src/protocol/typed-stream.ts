// Typed events for the library's streams. Node's stream typings end every listener method with a
// catch-all overload (`on(event: string | symbol, listener: (...args: any[]) => void)`), so on a
// plain Duplex a misspelt event name or a handler of the wrong shape compiles and is never
// called. `TypedStream<Base, Events>` is the stream type with its listener methods redeclared
// (an interface extending `Base`: a redeclared member replaces all of the base's overloads, the
// catch-all included): they take the stream's own events (the `Events` map) and Node's events
// for that kind of stream, each with its arguments, and return `this` as Node's do. Everything
// else is `Base`'s own (so `end()`, `pause()`, ... still return `this`), and it is still a `Base`
// (pipeline(), compose() and pipe() take it), since the redeclared methods are checked
// bivariantly against Node's. One mechanism for every stream the library returns (a stream with
// more members is an interface extending `TypedStream<...>`); plain emitters use
// `EventEmitter<Events>` instead.

import type { Duplex, Readable, Writable } from 'node:stream';

/** An event map: event name → the listener's arguments, as a tuple. */
export type EventArgs<E> = { [K in keyof E]: unknown[] };

/** The events every EventEmitter emits when a listener is added or removed. */
export interface EmitterEvents {
  /** Before a listener is added: its event and the listener. */
  // biome-ignore lint/suspicious/noExplicitAny: any listener, as in Node's typings
  newListener: [event: string | symbol, listener: (...args: any[]) => void];
  /** After a listener is removed: its event and the listener. */
  // biome-ignore lint/suspicious/noExplicitAny: any listener, as in Node's typings
  removeListener: [event: string | symbol, listener: (...args: any[]) => void];
}

/** The events every Readable emits, with their arguments. */
export interface ReadableStreamEvents extends EmitterEvents {
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
export interface WritableStreamEvents extends EmitterEvents {
  close: [];
  drain: [];
  error: [err: Error];
  finish: [];
  pipe: [src: Readable];
  unpipe: [src: Readable];
}

/** The events every Duplex emits: both sides'. */
export interface DuplexStreamEvents extends ReadableStreamEvents, WritableStreamEvents {}

/** Node's own events for a stream class. */
export type StreamEventsOf<Base> = Base extends Duplex
  ? DuplexStreamEvents
  : Base extends Readable
    ? ReadableStreamEvents
    : Base extends Writable
      ? WritableStreamEvents
      : EmitterEvents;

/** A stream's events: its own (`Own`), and Node's (`Node`) that it does not redefine. */
export type WithStreamEvents<Own, Node> = Own & Omit<Node, keyof Own>;

/** The listener methods `TypedStream` redeclares (Node's versions take any event name). */
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
 * they take `undefined` (`stream.on('end', resolve)`); a parameter of a narrower type is not.
 */
export type Listener<A extends unknown[]> = (...args: [...A, ...undefined[]]) => void;

// The three interfaces below redeclare the same methods, each for its kind of stream (an
// interface cannot extend a type parameter, and a type that is not an interface, such as
// `Omit<Duplex, ...>`, fixes `this` to the base, so `end()` or `pause()` would lose the typing).
// Each listener method has a second signature that takes only `never`, so nothing can call it:
// the generic one alone is not a valid redeclaration of Node's (checked against its per-event
// overloads while the event map is still a type parameter). The cost: TypeScript may not resolve
// a call on a union of a typed stream and another (`Transform | DecodeStream`); type such a value
// as their common base (`Duplex`), whose methods are Node's.

/** A Readable whose listener methods know its events: `Events`, and Node's for a Readable. */
export interface TypedReadable<
  Events extends EventArgs<Events>,
  All extends EventArgs<All> = WithStreamEvents<Events, ReadableStreamEvents>,
> extends Readable {
  /** Call `listener` with the arguments of each `event`. */
  on<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  on(event: never, listener: never): this;
  /** Call `listener` with the arguments of the next `event` only. */
  once<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  once(event: never, listener: never): this;
  /** Stop calling `listener` (added with `on`, `once`, ...) for `event`. */
  off<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  off(event: never, listener: never): this;
  /** The same as `on`. */
  addListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  addListener(event: never, listener: never): this;
  /** The same as `off`. */
  removeListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  removeListener(event: never, listener: never): this;
  /** As `on`, called before the listeners added earlier. */
  prependListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependListener(event: never, listener: never): this;
  /** As `once`, called before the listeners added earlier. */
  prependOnceListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependOnceListener(event: never, listener: never): this;
  /** Call the listeners of `event` with `args`; true when it had listeners. */
  emit<K extends keyof All & string>(event: K, ...args: All[K]): boolean;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  emit(event: never, ...args: never): boolean;
  /** Remove every listener of `event`, or of every event. */
  removeAllListeners(event?: keyof All & string): this;
}

/** A Writable whose listener methods know its events: `Events`, and Node's for a Writable. */
export interface TypedWritable<
  Events extends EventArgs<Events>,
  All extends EventArgs<All> = WithStreamEvents<Events, WritableStreamEvents>,
> extends Writable {
  /** Call `listener` with the arguments of each `event`. */
  on<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  on(event: never, listener: never): this;
  /** Call `listener` with the arguments of the next `event` only. */
  once<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  once(event: never, listener: never): this;
  /** Stop calling `listener` (added with `on`, `once`, ...) for `event`. */
  off<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  off(event: never, listener: never): this;
  /** The same as `on`. */
  addListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  addListener(event: never, listener: never): this;
  /** The same as `off`. */
  removeListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  removeListener(event: never, listener: never): this;
  /** As `on`, called before the listeners added earlier. */
  prependListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependListener(event: never, listener: never): this;
  /** As `once`, called before the listeners added earlier. */
  prependOnceListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependOnceListener(event: never, listener: never): this;
  /** Call the listeners of `event` with `args`; true when it had listeners. */
  emit<K extends keyof All & string>(event: K, ...args: All[K]): boolean;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  emit(event: never, ...args: never): boolean;
  /** Remove every listener of `event`, or of every event. */
  removeAllListeners(event?: keyof All & string): this;
}

/** A Duplex whose listener methods know its events: `Events`, and Node's for both sides. */
export interface TypedDuplex<
  Events extends EventArgs<Events>,
  All extends EventArgs<All> = WithStreamEvents<Events, DuplexStreamEvents>,
> extends Duplex {
  /** Call `listener` with the arguments of each `event`. */
  on<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  on(event: never, listener: never): this;
  /** Call `listener` with the arguments of the next `event` only. */
  once<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  once(event: never, listener: never): this;
  /** Stop calling `listener` (added with `on`, `once`, ...) for `event`. */
  off<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  off(event: never, listener: never): this;
  /** The same as `on`. */
  addListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  addListener(event: never, listener: never): this;
  /** The same as `off`. */
  removeListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  removeListener(event: never, listener: never): this;
  /** As `on`, called before the listeners added earlier. */
  prependListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependListener(event: never, listener: never): this;
  /** As `once`, called before the listeners added earlier. */
  prependOnceListener<K extends keyof All & string>(event: K, listener: Listener<All[K]>): this;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  prependOnceListener(event: never, listener: never): this;
  /** Call the listeners of `event` with `args`; true when it had listeners. */
  emit<K extends keyof All & string>(event: K, ...args: All[K]): boolean;
  /** Takes nothing (`never`): only there so the typed signature may replace Node's. */
  emit(event: never, ...args: never): boolean;
  /** Remove every listener of `event`, or of every event. */
  removeAllListeners(event?: keyof All & string): this;
}

/**
 * A `Base` stream (Duplex, Readable, Writable) whose listener methods know its events: `Events`,
 * the stream's own, and Node's for its kind. A wrong event name, or a handler whose parameters
 * do not match the event's arguments, does not compile.
 */
export type TypedStream<
  Base extends Readable | Writable,
  Events extends EventArgs<Events>,
> = Base extends Duplex
  ? TypedDuplex<Events>
  : Base extends Readable
    ? TypedReadable<Events>
    : TypedWritable<Events>;
