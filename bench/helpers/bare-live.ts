// The protocol's floor for live ASR, run as a process of its own: a bare loop that sends the
// frames speechpipe's client sends (the same clips, frame sizes and pace: one-second POSTs with
// undici over HTTP, 100 ms acknowledged `audio_stream` events with socket.io-client over
// Socket.IO, one connection per stream), reads the answers until the record with
// `is_final: true` (the protocol's completion signal, so each line is parsed) and does nothing
// else. It reports its CPU per second of audio as `speechpipe bench` counts it. Used by
// bench/live-cpu.ts.
//
//   node bench/helpers/bare-live.ts '{"url":..., "apiKey":..., "transport":"http"|"socketio",
//     "concurrency":8, "pace":1, "durationSec":60, "warmupSec":10}'

import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { io, type Socket } from 'socket.io-client';
import { Agent, request } from 'undici';
import { builtinMedia } from '../../src/benchmark/media.ts';

export interface BareOptions {
  url: string;
  apiKey: string;
  transport: 'http' | 'socketio';
  /** Workers, each starting a stream when its last ended (`--concurrency`). */
  concurrency: number;
  /**
   * Streams at the service at once: the client's admission lets the plan's concurrency through
   * (8 for realtime ASR) and the other workers wait, their audio already due from their start
   * (a stream admitted late sends its backlog at once, as the client's does). Default 8.
   */
  slots?: number;
  pace: number;
  durationSec: number;
  warmupSec: number;
}

export interface BareReport {
  transport: 'http' | 'socketio';
  completed: number;
  failed: number;
  audio_seconds: number;
  client_cpu_seconds_per_audio_second: number;
}

const BYTES_PER_SECOND = 32_000;
/** toFrames' default: 100 ms pieces, due on the clip's own timeline. */
const PIECE_BYTES = 3_200;
/** sttStream over HTTP joins pieces to one second (coalesceMs 1000); over Socket.IO none. */
const HTTP_FRAME_BYTES = 32_000;
const LANGUAGE_EN = 1;
const FLAG_START = 1;
const FLAG_FINAL = 2;

/** The live input frame: 16 bytes of stream UUID, flags, language, PCM. */
function frame(id: Buffer, flags: number, pcm: Buffer): Buffer {
  const out = Buffer.allocUnsafe(18 + pcm.length);
  id.copy(out, 0);
  out[16] = flags;
  out[17] = LANGUAGE_EN;
  pcm.copy(out, 18);
  return out;
}

/** The frames of one clip as the client sends them, each with the time it is due (ms from the start). */
export function framesOf(
  pcm: Buffer,
  frameBytes: number,
  pace: number,
): { pcm: Buffer; dueMs: number; final: boolean }[] {
  const out: { pcm: Buffer; dueMs: number; final: boolean }[] = [];
  let held: Buffer[] = [];
  let heldBytes = 0;
  for (let at = 0; at < pcm.length; at += PIECE_BYTES) {
    const piece = pcm.subarray(at, at + PIECE_BYTES);
    const final = at + PIECE_BYTES >= pcm.length;
    held.push(piece);
    heldBytes += piece.length;
    if (heldBytes >= frameBytes || final) {
      out.push({
        pcm: held.length === 1 ? held[0]! : Buffer.concat(held),
        dueMs: (at / BYTES_PER_SECOND / pace) * 1000,
        final,
      });
      held = [];
      heldBytes = 0;
    }
  }
  return out;
}

export async function httpStream(
  agent: Agent,
  options: BareOptions,
  frames: { pcm: Buffer; dueMs: number; final: boolean }[],
  start: number,
): Promise<void> {
  const id = Buffer.from(randomUUID().replaceAll('-', ''), 'hex');
  const url = `${options.url}/realtime/http/stt-stream`;
  let final = false;
  for (let i = 0; i < frames.length; i++) {
    const f = frames[i]!;
    const wait = start + f.dueMs - performance.now();
    if (wait > 0) await sleep(wait);
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers: {
        'x-api-key': options.apiKey,
        'content-type': 'application/octet-stream',
        accept: 'application/x-ndjson',
      },
      body: frame(id, (i === 0 ? FLAG_START : 0) | (f.final ? FLAG_FINAL : 0), f.pcm),
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      throw new Error(`frame answered ${res.statusCode}`);
    }
    // The answer's records, line by line, until it ends (the next frame goes after it).
    let rest = '';
    for await (const chunk of res.body) {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const line of lines) if (line && JSON.parse(line).is_final === true) final = true;
    }
  }
  if (!final) throw new Error('no final record');
}

export async function socketStream(
  options: BareOptions,
  frames: { pcm: Buffer; dueMs: number; final: boolean }[],
  start: number,
): Promise<void> {
  const uuid = randomUUID();
  const id = Buffer.from(uuid.replaceAll('-', ''), 'hex');
  const origin = new URL(options.url).origin;
  const socket: Socket = io(origin, {
    path: '/socket.io',
    transports: ['websocket'],
    extraHeaders: { 'x-api-key': options.apiKey, Origin: origin },
    reconnection: false,
    forceNew: true,
  });
  try {
    const final = new Promise<void>((resolve, reject) => {
      socket.on('transcription_result', (record: { id: string; is_final: boolean }) => {
        if (record.id === uuid && record.is_final) resolve();
      });
      socket.on('error', (e: unknown) => reject(new Error(JSON.stringify(e))));
      socket.on('disconnect', (reason) => reject(new Error(reason)));
    });
    final.catch(() => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('connect_error', reject);
    });
    for (let i = 0; i < frames.length; i++) {
      const f = frames[i]!;
      const wait = start + f.dueMs - performance.now();
      if (wait > 0) await sleep(wait);
      const ack = (await socket.emitWithAck(
        'audio_stream',
        frame(id, (i === 0 ? FLAG_START : 0) | (f.final ? FLAG_FINAL : 0), f.pcm),
      )) as { ok?: boolean };
      if (ack?.ok !== true) throw new Error(`frame refused ${JSON.stringify(ack)}`);
    }
    await final;
  } finally {
    socket.disconnect();
  }
}

/** Closed loop, as `speechpipe bench --concurrency`: each worker starts a stream when its last ends. */
export async function runBare(options: BareOptions): Promise<BareReport> {
  const clips = await builtinMedia();
  const frameBytes = options.transport === 'http' ? HTTP_FRAME_BYTES : PIECE_BYTES;
  const plans = clips.map((c) => ({ seconds: c.seconds, frames: framesOf(c.pcm, frameBytes, options.pace) }));
  const agent = new Agent({ keepAliveTimeout: 4_000 });
  const t0 = performance.now();
  const warmupMs = options.warmupSec * 1000;
  const endMs = options.durationSec * 1000;
  let cpuAtWarmup = process.cpuUsage();
  const warmup = setTimeout(() => {
    cpuAtWarmup = process.cpuUsage();
  }, warmupMs);
  let free = options.slots ?? 8;
  const waiting: (() => void)[] = [];
  const acquire = async () => {
    if (free > 0) free--;
    else await new Promise<void>((resolve) => waiting.push(resolve));
  };
  const release = () => {
    const next = waiting.shift();
    if (next) next();
    else free++;
  };
  let k = 0;
  let errors = 0;
  let completed = 0;
  let failed = 0;
  let audio = 0;
  let lastDone = 0;
  let cpuAtLastDone = process.cpuUsage();
  const worker = async () => {
    while (performance.now() - t0 < endMs) {
      const plan = plans[k++ % plans.length]!;
      const start = performance.now();
      const counted = start - t0 >= warmupMs;
      await acquire();
      try {
        if (options.transport === 'http') await httpStream(agent, options, plan.frames, start);
        else await socketStream(options, plan.frames, start);
        if (!counted) continue;
        completed++;
        audio += plan.seconds;
        lastDone = performance.now() - t0;
        cpuAtLastDone = process.cpuUsage();
      } catch (err) {
        if (counted) failed++;
        if (++errors <= 5) process.stderr.write(`bare-live: ${(err as Error).message}\n`);
        // A service that refuses everything would have the workers spin: pause a little.
        await sleep(100);
      } finally {
        release();
      }
    }
  };
  const cpuAtEnd = await Promise.all(Array.from({ length: options.concurrency }, worker)).then(() =>
    lastDone > endMs ? cpuAtLastDone : process.cpuUsage(),
  );
  clearTimeout(warmup);
  await agent.close();
  const cpu = (cpuAtEnd.user - cpuAtWarmup.user + cpuAtEnd.system - cpuAtWarmup.system) / 1e6;
  return {
    transport: options.transport,
    completed,
    failed,
    audio_seconds: audio,
    client_cpu_seconds_per_audio_second: audio > 0 ? cpu / audio : 0,
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const report = await runBare(JSON.parse(process.argv[2]!) as BareOptions);
  process.stdout.write(`${JSON.stringify(report)}\n`);
}
