// resample(): PCM16LE at one rate and channel count in, another out, continuous across chunks;
// inline by default, or in the worker pool in tasks big enough to pay for the thread hop.

import { Transform, type TransformCallback } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { bufferToInt16, int16ToBuffer } from '../audio/pcm.ts';
import {
  checkPcmFormat,
  type PcmFormat,
  ResamplePlanner,
  type ResamplerDesign,
  type ResampleTask,
  runResampleTask,
} from '../audio/resampler.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { type ResamplePool, sharedResamplePool } from '../workers/resample-pool.ts';
import { destroyOnAbort } from './abort.ts';
import { coreTransform } from './core-transform.ts';

/** Options of {@link resample}. */
export interface ResampleOptions {
  /** The input format. */
  from: PcmFormat;
  /** The output format. */
  to: PcmFormat;
  /** Filter design (passband 0.9, 100 dB stopband by default). */
  design?: ResamplerDesign;
  /**
   * Where the arithmetic runs. Default `false`: inline. The workers benchmark (two cores) shows
   * the pool losing with 20 ms tasks (live frames) or one thread, and with the SIMD filters about
   * even (0.8-1.2x) with 1 s tasks on two threads, winning where 1 s tasks batch small reads
   * (1.4-1.6x): for bulk work from small reads, pass a `ResamplePool`,
   * or `'shared'` for the process-wide one; tasks then hold `taskSeconds` of output (latency).
   */
  pool?: ResamplePool | 'shared' | false;
  /** Seconds of output per worker task (more than 0). Default 1. Ignored inline. */
  taskSeconds?: number;
  /** Worker tasks in flight per stream before writes wait (whole, at least 1). Default: the pool's thread count + 1. */
  maxInFlight?: number;
  /** Destroys the stream with the signal's reason. */
  signal?: AbortSignal;
}

/** Whole sample frames of a PCM16 byte stream; a partial frame at the end is an error. */
class Pcm16Framer {
  readonly #aligner: ByteAligner;
  constructor(channels: number) {
    this.#aligner = new ByteAligner(2 * channels);
  }
  push(chunk: Uint8Array): Int16Array {
    return bufferToInt16(this.#aligner.push(chunk));
  }
  end(): void {
    this.#aligner.end('PCM16 input');
  }
}

/**
 * A Transform from PCM16LE bytes in `from` format to PCM16LE bytes in `to` format. The output is
 * the same however the input is split; it holds ceil(frames * to.rate / from.rate) frames.
 * Input that ends inside a sample frame fails with `MediaError` (`ERR_MEDIA_TRUNCATED`).
 */
export function resample(options: ResampleOptions): Transform {
  const from = checkPcmFormat('resample: from', options.from);
  const to = checkPcmFormat('resample: to', options.to);
  const { taskSeconds = 1, maxInFlight } = options;
  if (!(typeof taskSeconds === 'number' && taskSeconds > 0 && Number.isFinite(taskSeconds))) {
    throw new InvalidArgumentError(
      `resample: taskSeconds must be a finite number above 0, got ${taskSeconds}`,
    );
  }
  if (maxInFlight !== undefined && !(Number.isSafeInteger(maxInFlight) && maxInFlight >= 1)) {
    throw new InvalidArgumentError(
      `resample: maxInFlight must be a whole number, at least 1, got ${maxInFlight}`,
    );
  }
  const pool = options.pool === 'shared' ? sharedResamplePool() : options.pool || undefined;
  const framer = new Pcm16Framer(from.channels);
  const taskFrames = Math.max(1, Math.round(taskSeconds * to.sampleRate));
  const planner = new ResamplePlanner(
    from,
    to,
    pool
      ? { design: options.design, minTaskFrames: taskFrames, maxTaskFrames: taskFrames }
      : { design: options.design },
  );
  const stream = pool
    ? pooledTransform(planner, framer, pool, maxInFlight ?? pool.threads + 1)
    : inlineTransform(planner, framer);
  destroyOnAbort(stream, options.signal);
  return stream;
}

function inlineTransform(planner: ResamplePlanner, framer: Pcm16Framer): Transform {
  const run = (tasks: ResampleTask[]) =>
    tasks
      .map(runResampleTask)
      .filter((out) => out.length > 0)
      .map(int16ToBuffer);
  return coreTransform<Buffer, Buffer>({
    push: (chunk) => run(planner.push(framer.push(chunk))),
    end: () => {
      framer.end();
      return run(planner.end());
    },
  });
}

interface Pending {
  out?: Int16Array;
  error?: Error;
}

function pooledTransform(
  planner: ResamplePlanner,
  framer: Pcm16Framer,
  pool: ResamplePool,
  maxInFlight: number,
): Transform {
  const abort = new AbortController();
  // Tasks in input order; outputs are pushed from the head as soon as it is done.
  const queue: Pending[] = [];
  let waiting: TransformCallback | undefined;
  let stream: Transform;

  const pump = () => {
    while (queue.length > 0 && (queue[0]!.out || queue[0]!.error)) {
      const head = queue.shift()!;
      if (head.error) {
        stream.destroy(head.error);
        return;
      }
      if (head.out!.length > 0) stream.push(int16ToBuffer(head.out!));
    }
    if (waiting && queue.length < maxInFlight) {
      const cb = waiting;
      waiting = undefined;
      cb();
    }
  };
  const submit = (tasks: ResampleTask[]) => {
    for (const task of tasks) {
      const entry: Pending = {};
      queue.push(entry);
      pool.run(task, abort.signal).then(
        (out) => {
          entry.out = out;
          pump();
        },
        (err: Error) => {
          entry.error = err;
          pump();
        },
      );
    }
  };

  stream = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      try {
        submit(planner.push(framer.push(chunk)));
      } catch (err) {
        callback(err as Error);
        return;
      }
      // Bounded: the next write waits until the in-flight tasks drop below the limit.
      if (queue.length < maxInFlight) callback();
      else waiting = callback;
    },
    flush(callback: TransformCallback) {
      try {
        framer.end();
        submit(planner.end());
      } catch (err) {
        callback(err as Error);
        return;
      }
      if (queue.length === 0) callback();
      else {
        // Wait for every task: `waiting` fires once the queue is empty.
        maxInFlight = 1;
        waiting = callback;
      }
    },
    destroy(err: Error | null, callback: (error: Error | null) => void) {
      abort.abort(err ?? new Error('resample stream destroyed'));
      waiting = undefined;
      callback(err);
    },
  });
  return stream;
}
