// A load generator for framed-HTTP live ASR sessions, run as a process of its own so that the
// server it loads does not share an event loop (or a profile) with it. Reads one JSON command a
// line on stdin (`{url, apiKey, sessions, first, total, seconds}`: run `sessions` streams, the
// `first`-th of `total` in the level, for `seconds`) and answers each with one JSON line:
// `{latencies, failures, cpuMs}` (answer latencies in ms after warm-up, frames not answered 200,
// this process's CPU time over the level). Used by bench/emulator.bench.ts.

import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { encodeFrame } from '../../src/protocol/frame.ts';

export const FRAME_MS = 100;
const FRAME_BYTES = (16_000 * 2 * FRAME_MS) / 1000;
/** Frames of each stream not measured: connection set-up and warm-up. */
export const WARMUP_FRAMES = 10;

/** Speech-like PCM: 1.2 s harmonic bursts and 0.6 s pauses, so the engine has regions to follow. */
export function speechLike(seconds: number): Buffer {
  const n = Math.round(seconds * 16_000);
  const pcm = Buffer.alloc(n * 2);
  for (let i = 0; i < n; i++) {
    const t = i / 16_000;
    if (t % 1.8 >= 1.2) continue;
    const v = Math.sin(2 * Math.PI * 150 * t) + 0.5 * Math.sin(2 * Math.PI * 300 * t);
    pcm.writeInt16LE(Math.round(8000 * v * (0.6 + 0.4 * Math.abs(Math.sin(Math.PI * 4 * t)))), i * 2);
  }
  return pcm;
}

export interface LevelCommand {
  url: string;
  apiKey: string;
  /** Streams this generator runs. */
  sessions: number;
  /** Index of its first stream among all the level's streams, and how many there are. */
  first: number;
  total: number;
  seconds: number;
}

export interface LevelResult {
  latencies: number[];
  failures: number;
  cpuMs: number;
}

/**
 * Each stream posts 100 ms frames on a real-time schedule; the streams of the whole level are
 * spread over one frame period. Lateness counts: a frame sent after its due time waited on the
 * previous answer, so its latency is measured from its due time.
 */
export async function runLevel(audio: Buffer, cmd: LevelCommand): Promise<LevelResult> {
  const cpu = process.cpuUsage();
  const agent = new Agent({ connections: cmd.sessions + 8, keepAliveTimeout: 10_000 });
  const latencies: number[] = [];
  let failures = 0;
  const frames = (cmd.seconds * 1000) / FRAME_MS;
  const t0 = performance.now() + 50;
  const one = async (s: number) => {
    const id = crypto.randomUUID();
    const offset = (s * FRAME_MS) / cmd.total;
    for (let i = 0; i < frames; i++) {
      const due = t0 + offset + i * FRAME_MS;
      const wait = due - performance.now();
      if (wait > 0) await sleep(wait);
      const at = ((s * 7 + i) * FRAME_BYTES) % (audio.length - FRAME_BYTES);
      const body = encodeFrame({
        streamId: id,
        isStart: i === 0,
        isFinal: i === frames - 1,
        language: 'en',
        pcm: audio.subarray(at, at + FRAME_BYTES),
      });
      const sent = performance.now();
      try {
        const res = await request(`${cmd.url}/http/stt-stream`, {
          method: 'POST',
          headers: { 'x-api-key': cmd.apiKey, 'content-type': 'application/octet-stream' },
          body,
          dispatcher: agent,
        });
        await res.body.text();
        if (res.statusCode !== 200) {
          if (process.env.BENCH_DEBUG) console.error(res.statusCode);
          failures++;
        }
      } catch (err) {
        if (process.env.BENCH_DEBUG) console.error(String(err));
        failures++;
      }
      if (i >= WARMUP_FRAMES) latencies.push(performance.now() - Math.min(sent, due));
    }
  };
  await Promise.all(Array.from({ length: cmd.sessions }, (_, s) => one(cmd.first + s)));
  await agent.close();
  const used = process.cpuUsage(cpu);
  return { latencies, failures, cpuMs: (used.user + used.system) / 1000 };
}

if (import.meta.main) {
  const audio = speechLike(30);
  const lines = createInterface({ input: process.stdin });
  process.stdout.write('ready\n');
  for await (const line of lines) {
    const result = await runLevel(audio, JSON.parse(line) as LevelCommand);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
}
