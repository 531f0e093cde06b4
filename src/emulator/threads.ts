// One emulator served by several threads on one port (`startEmulatorWorkers`, `speechpipe
// emulator --workers N`). Each thread runs the whole emulator and listens with SO_REUSEPORT, so
// the kernel spreads connections over them. What must be one across threads is:
// - account limits, request rates and fault-rule counters: a SharedArrayBuffer
//   (`shared-state.ts`), decided synchronously and exactly as one thread decides them;
// - state a client names by id on later requests (batch jobs, HTTP live streams): each id has
//   an owner thread (`ownerOf`), and a thread that receives a request for an id it does not own
//   passes the request to the owner's private loopback port and the answer back;
// - statistics and fault rules: the coordinating thread sums every thread's statistics, and
//   adds and removes rules in every thread before the admin endpoint answers.
// Socket.IO needs nothing: its transport is websocket only, so a socket lives on one thread.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type MessagePort, Worker } from 'node:worker_threads';
import { type Dispatcher, Pool } from 'undici';
import { defaultKey, KeyRegistry } from './auth.ts';
import { chosenEngine } from './engine/pocketsphinx.ts';
import { validateRule } from './faults.ts';
import { newRequestId, Rejection } from './rejection.ts';
import { type SharedLayout, SharedState } from './shared-state.ts';
import type { EmulatorKeyOptions, EmulatorOptions, EmulatorStats, FaultRule } from './types.ts';

/** What one thread of a several-thread emulator knows of the others. */
export interface ThreadMember {
  index: number;
  workers: number;
  shared: SharedState;
  /** `host:port` of every thread's private loopback server, by index (set once all listen). */
  peers: { host: string; port: number }[];
  /** Ask the coordinating thread (statistics, fault rules). */
  ask<T>(message: CoordinatorRequest): Promise<T>;
}

export type CoordinatorRequest =
  | { type: 'stats' }
  | { type: 'faults.add'; rules: FaultRule[] }
  | { type: 'faults.remove'; id: number }
  | { type: 'faults.clear' };

/**
 * The thread that owns a batch job or an HTTP live stream: from the UUID's last 32 bits (hex
 * or raw bytes alike), so every thread finds the same owner without asking.
 */
export function ownerOf(uuid: string, workers: number): number {
  const tail = Number.parseInt(uuid.slice(-8), 16);
  return Number.isNaN(tail) ? 0 : tail % workers;
}

/**
 * Headers a forwarding thread does not pass on: hop-by-hop ones, and `expect` (this thread's
 * server already answered 100 Continue; undici refuses to send it).
 */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'proxy-connection',
  'expect',
]);

/** Marks a request a thread passed to the owner (the owner never passes it on again). */
export const FORWARDED_HEADER = 'x-speechpipe-emulator-forwarded';

/** Connections to each other thread's private port, kept open (undici: node:http's client stalled past ~1000 passes a second). */
const pools = new Map<string, Pool>();
const poolOf = (peer: { host: string; port: number }): Pool => {
  const origin = `http://${peer.host}:${peer.port}`;
  let pool = pools.get(origin);
  if (!pool) {
    pool = new Pool(origin, { connections: 1024, pipelining: 1, keepAliveTimeout: 4_000 });
    pools.set(origin, pool);
  }
  return pool;
};

/** Close the connections to other threads (when the thread closes). */
export async function closeForwarding(): Promise<void> {
  const all = [...pools.values()];
  pools.clear();
  await Promise.all(all.map((p) => p.destroy()));
}

/**
 * Read the first `bytes` bytes of `req`'s body (fewer if it ends first) and put them back, so
 * the operation reads the whole body as it arrived. Undefined when the client went away.
 */
export async function peekBody(req: IncomingMessage, bytes: number): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  while (size < bytes) {
    const chunk = req.read() as Buffer | null;
    if (chunk !== null) {
      chunks.push(chunk);
      size += chunk.length;
      continue;
    }
    if (req.readableEnded || req.destroyed) break;
    const ready = new Promise<void>((resolve) => {
      const done = () => {
        req.off('readable', done);
        req.off('close', done);
        resolve();
      };
      req.on('readable', done);
      req.on('close', done);
    });
    await ready;
    if (req.destroyed && req.readableLength === 0) return undefined;
  }
  const head = Buffer.concat(chunks);
  if (head.length > 0) req.unshift(head);
  return head;
}

/**
 * Pass `req` to the thread at `peer` and its answer back. A client that goes away aborts the
 * passed request (the owner sees an aborted POST); an answer cut by the owner (a reset fault)
 * is cut here too (a connection reset, as the owner's). When the owner cannot be reached (it is
 * being replaced), 500 `SERVER_INTERNAL` (retryable).
 */
export function forward(
  req: IncomingMessage,
  res: ServerResponse,
  peer: { host: string; port: number },
): void {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name) && name !== 'host') headers[name] = value;
  }
  headers[FORWARDED_HEADER] = '1';
  const abort = new AbortController();
  res.on('close', () => {
    if (!res.writableFinished) abort.abort();
  });
  const method = (req.method ?? 'GET') as Dispatcher.HttpMethod;
  const hasBody = method !== 'GET' && method !== 'HEAD';
  poolOf(peer)
    .request({
      path: req.url ?? '/',
      method,
      headers,
      body: hasBody ? req : null,
      signal: abort.signal,
    })
    .then(
      (answer) => {
        const back: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(answer.headers)) {
          if (value !== undefined && !HOP_BY_HOP.has(name)) back[name] = value;
        }
        res.writeHead(answer.statusCode, back);
        answer.body.on('error', () => res.destroy());
        answer.body.pipe(res);
      },
      (err: NodeJS.ErrnoException) => {
        // The owner reset or cut the connection (a `reset` fault): so is the client's.
        const refused =
          err.code === 'ECONNREFUSED' || (err.cause as NodeJS.ErrnoException)?.code === 'ECONNREFUSED';
        if (res.headersSent || abort.signal.aborted || !refused) {
          const socket = req.socket as Socket | null;
          if (socket && !socket.destroyed) socket.resetAndDestroy();
          else res.destroy();
          return;
        }
        const rejection = new Rejection('SERVER_INTERNAL', {
          detail: 'the emulator thread holding this id could not be reached',
        });
        const requestId = newRequestId();
        const body = JSON.stringify(rejection.body(requestId));
        res.writeHead(rejection.status, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'x-request-id': requestId,
        });
        res.end(body);
        req.resume();
      },
    );
}

/** Sum two statistics snapshots field by field. */
export function sumStats<T>(a: T, b: T): T {
  if (typeof a === 'number' && typeof b === 'number') return (a + b) as T;
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const out: Record<string, unknown> = { ...(a as Record<string, unknown>) };
    for (const [k, v] of Object.entries(b as Record<string, unknown>))
      out[k] = k in out ? sumStats(out[k], v) : structuredClone(v);
    return out as T;
  }
  return a ?? b;
}

// ---- the coordinating thread --------------------------------------------------------------

/** Options of a several-thread emulator: every option a thread can take, and how many threads. */
export interface EmulatorWorkersOptions extends Omit<EmulatorOptions, 'contentPolicy'> {
  /** Threads serving the port (>= 1). */
  workers: number;
}

/** An emulator served by several threads on one port (`startEmulatorWorkers()`). */
export interface EmulatorWorkers {
  /** The service address (http://127.0.0.1:PORT), the same for every thread. */
  readonly url: string;
  /** The default account's key. */
  readonly apiKey: string;
  /** Threads serving the port. */
  readonly workers: number;
  /**
   * The engine that gives the words of English (and `auto`) audio, the same in every thread:
   * `engine: 'auto'` is decided once, before the threads start.
   */
  readonly engine: 'generated' | 'pocketsphinx';
  /** The statistics of every thread, summed. */
  stats(): Promise<EmulatorStats>;
  /** Fault rules, applied across every thread (each match counted once). */
  readonly faults: {
    /** Add a rule in every thread; resolves with its id once every thread has it. */
    add(rule: FaultRule): Promise<number>;
    /** Remove every rule from every thread; resolves with how many there were. */
    clear(): Promise<number>;
  };
  /**
   * Stop thread `index` at once, wherever it is, as a crash would (for tests): what it held is
   * released and a fresh thread takes its place; its jobs and streams are lost.
   */
  terminateWorker(index: number): Promise<void>;
  /** Stop every thread and close the port; resolves when all have exited. */
  close(): Promise<void>;
}

/** Messages from the coordinating thread to a serving thread. */
export type WorkerCommand =
  | { type: 'peers'; peers: { host: string; port: number }[]; seq: number }
  | { type: 'faults.insert'; rules: { id: number; slot: number; rule: FaultRule }[]; seq: number }
  | { type: 'faults.remove'; ids: number[]; seq: number }
  | { type: 'stats'; seq: number }
  | { type: 'close' }
  | { type: 'reply'; seq: number; value?: unknown; error?: string };

/** Messages from a serving thread. */
export type WorkerMessage =
  | { type: 'listening'; url: string; port: number; private: { host: string; port: number } }
  | { type: 'ask'; seq: number; request: CoordinatorRequest }
  | { type: 'done'; seq: number; value?: unknown }
  | { type: 'failed'; error: string; code?: string };

export interface WorkerData {
  index: number;
  workers: number;
  port: number;
  options: Omit<EmulatorOptions, 'contentPolicy' | 'faults'>;
  layout: SharedLayout;
  buffer: SharedArrayBuffer;
  rules: { id: number; slot: number; rule: FaultRule }[];
}

const MAX_RULES = 4096;

const workerUrl = () => {
  const here = fileURLToPath(import.meta.url);
  return new URL(`./emulator-worker${extname(here)}`, import.meta.url);
};

/**
 * Start one emulator served by `options.workers` threads on one port. Resolves once every
 * thread listens. Admission, statistics and faults are the emulator's, not a thread's.
 */
export async function startEmulatorWorkers(options: EmulatorWorkersOptions): Promise<EmulatorWorkers> {
  const { workers, faults: initialRules = [], ...rest } = options;
  if (!(Number.isSafeInteger(workers) && workers >= 1))
    throw new RangeError('workers must be a positive integer');
  if ('contentPolicy' in rest)
    throw new RangeError('contentPolicy (a function) cannot be given to worker threads');
  // Every thread must accept the same keys: the random default key is made once, here.
  const keys: EmulatorKeyOptions[] = rest.keys?.length ? rest.keys : [defaultKey()];
  // Refused here, as one thread refuses them (a RangeError), before any thread starts.
  new KeyRegistry(keys);
  const layout: SharedLayout = {
    rows: workers + 1,
    accounts: [...new Set(keys.map((k) => k.account))],
    keys: keys.map((k) => k.key),
    ruleSlots: MAX_RULES,
  };
  const shared = new SharedState(layout, workers);
  // The machine's cores are shared out among the threads' recognizers.
  const recognizerProcesses =
    rest.recognizerProcesses ?? Math.max(1, Math.floor(availableParallelism() / workers));
  // `auto` decided once, so that every thread gives words the same way (and says which).
  const engine = chosenEngine(rest.engine ?? 'generated');
  const threadOptions = { ...rest, engine, keys, recognizerProcesses };

  const rules: { id: number; slot: number; rule: FaultRule }[] = [];
  const freeSlots = Array.from({ length: MAX_RULES }, (_, i) => MAX_RULES - 1 - i);
  let nextRuleId = 1;
  const addRules = (list: FaultRule[]) => {
    // Checked here, all before any is added, so no thread ever refuses one.
    for (const rule of list) validateRule(rule);
    if (list.length > freeSlots.length) throw new RangeError(`at most ${MAX_RULES} fault rules at once`);
    return list.map((rule) => {
      const slot = freeSlots.pop();
      if (slot === undefined) throw new RangeError(`at most ${MAX_RULES} fault rules at once`);
      shared.resetRule(slot);
      const entry = { id: nextRuleId++, slot, rule };
      rules.push(entry);
      return entry;
    });
  };
  addRules(initialRules);

  const threads: (Worker | undefined)[] = new Array(workers).fill(undefined);
  const peers: { host: string; port: number }[] = new Array(workers);
  let seq = 0;
  const waiting = new Map<
    number,
    { resolve: (value: unknown) => void; pending: Set<number>; values: unknown[] }
  >();
  let closing = false;
  let port = options.port ?? 0;
  let url = '';

  /** Send a command to every live thread; resolves with their answers once each answered or died. */
  const broadcast = (make: (seq: number) => WorkerCommand): Promise<unknown[]> => {
    const s = ++seq;
    const live = threads.flatMap((t, i) => (t ? [i] : []));
    if (live.length === 0) return Promise.resolve([]);
    return new Promise((resolve) => {
      waiting.set(s, { resolve: resolve as (v: unknown) => void, pending: new Set(live), values: [] });
      const command = make(s);
      for (const i of live) threads[i]!.postMessage(command);
    });
  };
  const settle = (s: number, index: number, value: unknown) => {
    const w = waiting.get(s);
    if (!w?.pending.delete(index)) return;
    if (value !== undefined) w.values.push(value);
    if (w.pending.size === 0) {
      waiting.delete(s);
      w.resolve(w.values);
    }
  };

  const answer = async (request: CoordinatorRequest): Promise<unknown> => {
    switch (request.type) {
      case 'stats': {
        const all = (await broadcast((s) => ({ type: 'stats', seq: s }))) as EmulatorStats[];
        const total = all.reduce((a, b) => sumStats(a, b));
        total.maxConcurrent = shared.maxConcurrent();
        return total;
      }
      case 'faults.add': {
        const added = addRules(request.rules);
        await broadcast((s) => ({ type: 'faults.insert', rules: added, seq: s }));
        return added.map((r) => r.id);
      }
      case 'faults.remove':
      case 'faults.clear': {
        const gone = rules.filter((r) => request.type === 'faults.clear' || r.id === request.id);
        if (gone.length === 0) return 0;
        await broadcast((s) => ({ type: 'faults.remove', ids: gone.map((r) => r.id), seq: s }));
        for (const r of gone) {
          rules.splice(rules.indexOf(r), 1);
          freeSlots.push(r.slot);
        }
        return gone.length;
      }
    }
  };

  const start = (index: number): Promise<void> => {
    const data: WorkerData = {
      index,
      workers,
      port,
      options: threadOptions,
      layout,
      buffer: shared.buffer,
      rules: [...rules],
    };
    const thread = new Worker(workerUrl(), { workerData: data });
    threads[index] = thread;
    return new Promise<void>((resolve, rejectStart) => {
      let listening = false;
      thread.on('message', (m: WorkerMessage) => {
        if (m.type === 'listening') {
          listening = true;
          port = m.port;
          url ||= m.url;
          peers[index] = m.private;
          resolve();
        } else if (m.type === 'failed')
          rejectStart(Object.assign(new Error(m.error), m.code ? { code: m.code } : {}));
        else if (m.type === 'done') settle(m.seq, index, m.value);
        else if (m.type === 'ask') {
          answer(m.request).then(
            (value) => thread.postMessage({ type: 'reply', seq: m.seq, value } satisfies WorkerCommand),
            (err: Error) =>
              thread.postMessage({ type: 'reply', seq: m.seq, error: err.message } satisfies WorkerCommand),
          );
        }
      });
      thread.on('error', (err) => {
        if (!listening) rejectStart(err);
        // A thread that fails is replaced (on 'exit'); what failed is said, not swallowed.
        else process.emitWarning(`emulator thread ${index} failed: ${err.stack ?? err}`, 'SpeechpipeWarning');
      });
      thread.on('exit', () => {
        if (threads[index] !== thread) return;
        threads[index] = undefined;
        shared.releaseRow(index);
        for (const [s] of waiting) settle(s, index, undefined);
        if (!listening) rejectStart(new Error(`emulator thread ${index} exited before listening`));
        else if (!closing) {
          // A thread that died is replaced; its jobs and streams are gone with it.
          restarting[index] = start(index).then(sendPeers, (err: Error) =>
            process.emitWarning(
              `emulator thread ${index} could not be restarted: ${err.message}`,
              'SpeechpipeWarning',
            ),
          );
        }
      });
    });
  };
  const restarting: Promise<void>[] = [];
  const sendPeers = async () => {
    await broadcast((s) => ({ type: 'peers', peers, seq: s }));
  };

  try {
    // The first thread picks the port (port 0: any free one); the others join it.
    await start(0);
    await Promise.all(Array.from({ length: workers - 1 }, (_, i) => start(i + 1)));
  } catch (err) {
    closing = true;
    await Promise.all(threads.map((t) => t?.terminate()));
    throw err;
  }
  await sendPeers();

  const exited = (t: Worker) => new Promise<void>((resolve) => t.once('exit', () => resolve()));
  return {
    url,
    apiKey: keys[0]!.key,
    workers,
    engine,
    stats: () => answer({ type: 'stats' }) as Promise<EmulatorStats>,
    faults: {
      add: async (rule) => ((await answer({ type: 'faults.add', rules: [rule] })) as number[])[0]!,
      clear: async () => (await answer({ type: 'faults.clear' })) as number,
    },
    async terminateWorker(index) {
      const t = threads[index];
      if (!t) return;
      await t.terminate();
      await restarting[index];
    },
    async close() {
      closing = true;
      await Promise.all(
        threads.map((t) => {
          if (!t) return undefined;
          const done = exited(t);
          t.postMessage({ type: 'close' } satisfies WorkerCommand);
          return done;
        }),
      );
    },
  };
}

/** Serving-thread side of `ask`: one request to the coordinator over `port`, answered by `seq`. */
export function asker(port: MessagePort) {
  let seq = 0;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  port.on('message', (m: WorkerCommand) => {
    if (m.type !== 'reply') return;
    const p = pending.get(m.seq);
    if (!p) return;
    pending.delete(m.seq);
    if (m.error !== undefined) p.reject(new RangeError(m.error));
    else p.resolve(m.value);
  });
  return <T>(request: CoordinatorRequest): Promise<T> => {
    const s = ++seq;
    const answered = new Promise<T>((resolve, reject) =>
      pending.set(s, { resolve: resolve as (v: unknown) => void, reject }),
    );
    port.postMessage({ type: 'ask', seq: s, request } satisfies WorkerMessage);
    return answered;
  };
}
