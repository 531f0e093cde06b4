// Where a live Socket.IO stream's client CPU goes, layer by layer (issue 23): the same frames at
// the same pace sent by the bare loop of bench/helpers/bare-live.ts (socket.io-client alone),
// by speechpipe's SocketTransport, by its SocketLiveChannel, by a LiveSession on that channel
// alone (`session-core`: the session's state, queue and retry policy, without the client's
// admission or start deadline), by a LiveSession of a client (admission, deadline), and by
// sttStream fed by a paced source of the same frames. One layer per process, against a running
// service, printing CPU seconds per audio second. Compare layers run on the same service, best
// at the same time (`node bench/live-cpu.ts --together --layers ...`, each on its own account).
//
//   node bench/live-cpu-layers.ts bare|transport|channel|session-core|session|stream URL API_KEY
//                                 [SEC] [PACE] [CONCURRENCY] [WARMUP_SEC]
//
// Start the service with `node src/cli/main.ts emulator --stop-on-stdin-end` (it prints the URL
// and key). The first 3 s (WARMUP_SEC) are not counted; 8 streams are live at once, as the
// account allows.

import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { builtinMedia } from '../src/benchmark/media.ts';
import { liveSource } from '../src/benchmark/run.ts';
import { RetryPolicy } from '../src/client/attempts.ts';
import { createClient } from '../src/client/client.ts';
import { type LiveDeps, LiveSession } from '../src/client/live.ts';
import type { ChannelListener } from '../src/client/live-channel.ts';
import { SocketLiveChannel } from '../src/client/live-socket.ts';
import { SocketTransport } from '../src/client/socket.ts';
import { resolveConfig } from '../src/protocol/config.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import { DEFAULT_LIMITS } from '../src/protocol/limits.ts';
import { resolveSocketEvents } from '../src/protocol/socket-events.ts';
import { sttStream } from '../src/transforms/live-stream.ts';
import { cutFrames } from '../src/transforms/to-frames.ts';
import { type BareOptions, framesOf, socketStream } from './helpers/bare-live.ts';
import { isLiveLayer, LIVE_LAYERS } from './helpers/live-layers.ts';

type Plan = { pcm: Buffer; dueMs: number; final: boolean }[];
const [layer, url, apiKey, seconds = '20', pace = '1', concurrency = '16', warmupArg = '3'] =
  process.argv.slice(2);
if (!isLiveLayer(layer) || !url || !apiKey) {
  process.stderr.write(
    `usage: node bench/live-cpu-layers.ts ${LIVE_LAYERS.join('|')} URL API_KEY [SEC] [PACE] [CONCURRENCY] [WARMUP_SEC]\n`,
  );
  process.exit(2);
}
const durationMs = Number(seconds) * 1000;
const warmupMs = Number(warmupArg) * 1000;
const speed = Number(pace);
const clips = await builtinMedia();
const plans = clips.map((c) => framesOf(c.pcm, 3200, speed));
const audioFrames = clips.map((c) => cutFrames(c.pcm, { language: 'en', frameMs: 100 }));
const client = createClient({ apiUrl: url, apiKey });
const config = resolveConfig({ apiUrl: url, apiKey });
const events = resolveSocketEvents();
const operation = 'stt.socket' as const;
// The transport's connections do not keep the process alive by themselves.
const alive = setInterval(() => {}, 1000);

async function paced(plan: Plan, start: number, i: number): Promise<void> {
  const wait = start + plan[i]!.dueMs - performance.now();
  if (wait > 0) await sleep(wait);
}

/**
 * A stream's end as the layers below the session see it: the record with `is_final`, or the
 * failure (an error event, a dropped connection) that ends it first, so no run waits for good.
 */
function completion(): { done: Promise<void>; record(value: unknown): void; fail(err: unknown): void } {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const done = new Promise<void>((r, j) => {
    resolve = r;
    reject = j;
  });
  done.catch(() => {}); // awaited after the frames, unless a send fails first
  return {
    done,
    record: (value) => {
      if ((value as { is_final?: boolean }).is_final) resolve();
    },
    fail: reject,
  };
}

async function viaTransport(plan: Plan, start: number): Promise<void> {
  const transport = new SocketTransport(config, events);
  const uuid = randomUUID();
  const id = Buffer.from(uuid.replaceAll('-', ''), 'hex');
  const end = completion();
  const unroute = transport.route(uuid, {
    operation,
    onResult: (_event, record) => end.record(record),
    onError: end.fail,
    onDisconnect: end.fail,
  });
  try {
    for (let i = 0; i < plan.length; i++) {
      await paced(plan, start, i);
      const { pcm, final: isFinal } = plan[i]!;
      const frame = encodeFrame({ streamId: id, isStart: i === 0, isFinal, language: 'en', pcm });
      const ack = await transport.emitWithAck(operation, events.audioStream, frame);
      if (transport.ackError(ack, operation)) throw new Error('frame refused');
    }
    await end.done;
  } finally {
    unroute();
    transport.close();
  }
}

/** A stream's channel on a connection of its own, as the client makes it. */
function socketChannel(streamId: string, listener: ChannelListener): SocketLiveChannel {
  return new SocketLiveChannel(
    {
      connection: () => new SocketTransport(config, events),
      operation,
      event: events.audioStream,
      resultEvent: events.transcriptionResult,
      streamId,
      acks: true,
      ackTimeoutMs: 30_000,
    },
    listener,
  );
}

async function viaChannel(plan: Plan, start: number): Promise<void> {
  const uuid = randomUUID();
  const id = Buffer.from(uuid.replaceAll('-', ''), 'hex');
  const end = completion();
  // As a session passes its own signal to every send.
  const abort = new AbortController();
  const channel = socketChannel(uuid, { record: end.record, failed: end.fail });
  try {
    for (let i = 0; i < plan.length; i++) {
      await paced(plan, start, i);
      const { pcm, final: isFinal } = plan[i]!;
      await channel.send(
        encodeFrame({ streamId: id, isStart: i === 0, isFinal, language: 'en', pcm }),
        abort.signal,
      );
    }
    await end.done;
  } finally {
    channel.close();
  }
}

/** A session's dependencies with nothing of the client's: no admission, no start deadline. */
const coreDeps: LiveDeps = {
  channel: (_kind, _transport, listener, o) => socketChannel(o.streamId, listener),
  policy: new RetryPolicy(),
  limits: DEFAULT_LIMITS,
  startDeadlineMs: Number.POSITIVE_INFINITY,
};

async function viaSession(plan: Plan, start: number, core: boolean): Promise<void> {
  const options = { transport: 'socketio', language: 'en' } as const;
  const session = core ? new LiveSession('stt', coreDeps, options) : client.live.stt(options);
  for (let i = 0; i < plan.length; i++) {
    await paced(plan, start, i);
    await session.send(plan[i]!.pcm, { final: plan[i]!.final });
  }
  await session.done;
}

async function viaStream(k: number, start: number): Promise<void> {
  const sink = new Writable({ objectMode: true, write: (_record, _encoding, callback) => callback() });
  await pipeline(
    liveSource(audioFrames[k]!, start, speed),
    sttStream({ client, transport: 'socketio' }),
    sink,
  );
}

// The layers below the client take a slot of 8 themselves; the client's admission does it for
// the session and the stream.
let free = 8;
const waiting: (() => void)[] = [];
const own = layer !== 'session' && layer !== 'stream';
const t0 = performance.now();
let cpuAtWarmup = process.cpuUsage();
const warmup = setTimeout(() => (cpuAtWarmup = process.cpuUsage()), warmupMs);
let audio = 0;
let streams = 0;
let next = 0;
const worker = async () => {
  while (performance.now() - t0 < durationMs) {
    const k = next++ % plans.length;
    const start = performance.now();
    const counted = start - t0 >= warmupMs;
    if (own) {
      if (free > 0) free--;
      else await new Promise<void>((resolve) => waiting.push(resolve));
    }
    try {
      if (layer === 'bare') await socketStream({ url, apiKey } as BareOptions, plans[k]!, start);
      else if (layer === 'transport') await viaTransport(plans[k]!, start);
      else if (layer === 'channel') await viaChannel(plans[k]!, start);
      else if (layer === 'session-core' || layer === 'session')
        await viaSession(plans[k]!, start, layer === 'session-core');
      else await viaStream(k, start);
      if (counted) {
        audio += clips[k]!.seconds;
        streams++;
      }
    } finally {
      if (own) {
        const wake = waiting.shift();
        if (wake) wake();
        else free++;
      }
    }
  }
};
await Promise.all(Array.from({ length: Number(concurrency) }, worker));
const cpu = process.cpuUsage(cpuAtWarmup);
clearTimeout(warmup);
clearInterval(alive);
await client.close();
process.stdout.write(
  `${JSON.stringify({ layer, streams, audio_seconds: audio, client_cpu_seconds_per_audio_second: (cpu.user + cpu.system) / 1e6 / audio })}\n`,
);
