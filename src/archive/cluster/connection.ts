// The Redis side of cluster mode: where the queue is, a connection for each BullMQ object, and
// every connection closed within a bound whether Redis is there or not.

import type { Redis } from 'ioredis';
import { SpeechpipeError } from '../../protocol/errors.ts';

/** The queue's name unless told otherwise (enqueuer and workers must agree). */
export const DEFAULT_QUEUE_NAME = 'speechpipe-archive';
export const STOP_KEY = 'speechpipe:stopped';

/** Where the archive queue is: a Redis server and a queue name. */
export interface ClusterConnectionOptions {
  /** `redis://HOST:PORT[/DB]`. */
  queue: string;
  /** Default `speechpipe-archive`. */
  queueName?: string;
  /** How long the first connection to Redis may take. Default 5 s. */
  connectTimeoutMs?: number;
}

type Bull = typeof import('bullmq');

export interface Connection {
  bull: Bull;
  /** A new connection (each BullMQ object gets its own); all are closed by close(). */
  open(): Redis;
  /** The connection of plain commands (our own keys). */
  control: Redis;
  close(): Promise<void>;
}

function redisAddress(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || 6379}`;
  } catch {
    throw new SpeechpipeError('ERR_QUEUE_URL', `not a Redis URL: ${JSON.stringify(url)}`);
  }
}

/** How long closing waits for Redis (a command under way, QUIT, BullMQ's own close). */
export const CLOSE_WAIT_MS = 1000;

/**
 * Resolves when `work` settles or after `ms`, whichever comes first. A Redis command waits for
 * a lost connection to come back (maxRetriesPerRequest null): a close must not wait for that.
 */
export function settledWithin(work: Promise<unknown> | undefined, ms: number): Promise<void> {
  if (work === undefined) return Promise.resolve();
  return new Promise((done) => {
    const timer = setTimeout(done, ms);
    const end = () => {
      clearTimeout(timer);
      done();
    };
    work.then(end, end);
  });
}

/**
 * Connect to Redis within `timeoutMs` or fail with `ERR_QUEUE_UNREACHABLE` (never hang); later
 * losses of the connection are retried (BullMQ waits for it to come back). close() ends every
 * connection within a bound, Redis there or not.
 */
export async function connect(url: string, timeoutMs = 5000): Promise<Connection> {
  const address = redisAddress(url);
  const [{ Redis }, bull] = await Promise.all([import('ioredis'), import('bullmq')]);
  let connected = false;
  const clients: Redis[] = [];
  const make = () => {
    const client = new Redis(url, {
      maxRetriesPerRequest: null,
      lazyConnect: true,
      connectTimeout: timeoutMs,
      // Before the first connection: fail at once (reported below); after it: reconnect.
      retryStrategy: (times) => (connected ? Math.min(times * 250, 3000) : null),
    });
    return track(client);
  };
  // BullMQ duplicates a connection it is given for its blocking commands (a Worker's, a
  // QueueEvents'): the copies are ours to close too, or one reconnecting to a Redis that is gone
  // would never be stopped.
  const track = (client: Redis): Redis => {
    // Errors surface where they matter (a command, BullMQ's own 'error' events).
    client.on('error', () => {});
    clients.push(client);
    const duplicate = client.duplicate.bind(client);
    client.duplicate = (override) => track(duplicate(override));
    return client;
  };
  const first = make();
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      first.connect(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (err) {
    first.disconnect();
    throw new SpeechpipeError(
      'ERR_QUEUE_UNREACHABLE',
      `cannot connect to Redis at ${address}: ${(err as Error).message || String(err)}`,
    );
  } finally {
    clearTimeout(timer);
  }
  connected = true;
  return {
    bull,
    control: first,
    open() {
      const client = make();
      client.connect().catch(() => {});
      return client;
    },
    async close() {
      await Promise.all(
        clients.map(async (c) => {
          if (c.status === 'end') return;
          if (c.status === 'ready') {
            // QUIT answered, or dropped when it is not (Redis went away under it).
            await settledWithin(c.quit(), CLOSE_WAIT_MS);
            c.disconnect();
            return;
          }
          const reconnecting = c.status === 'reconnecting';
          c.disconnect();
          // A connection that is down: disconnect() stops its reconnecting, but ioredis then
          // neither fails the commands waiting for it nor ends it ('end' never comes). Ended
          // here as ioredis's own close handler ends one, so that what awaits either ends
          // (BullMQ's fetch loop, its close, and the lock-renewal timer it keeps until then).
          if (reconnecting) {
            const internals = c as unknown as {
              flushQueue?: (error: Error) => void;
              setStatus?: (status: string) => void;
            };
            internals.flushQueue?.(new Error('Connection is closed.'));
            internals.setStatus?.('end');
          }
        }),
      );
    },
  };
}
