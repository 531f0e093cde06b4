// Sample-rate and channel conversion of PCM16: a polyphase windowed-sinc (Kaiser) resampler whose
// state carries across chunks, so the output is the same however the input is split.
//
// Design: a lowpass prototype at the lower of the two Nyquist frequencies, passband edge at
// `passband` (0.9) of it, stopband edge at the Nyquist frequency itself, so nothing above it
// aliases back louder than `stopbandDb` (100 dB design, at least 90 dB measured by the tests).
// Output sample n sits at input time n * M / L (L/M the reduced rate ratio), tracked with exact
// integer arithmetic; a ratio whose L exceeds `maxPhases` uses `maxPhases` tables and linear
// interpolation between them. Output length is ceil(inputFrames * L / M): durations are kept.
// Where the input rate is more than twice the output rate (48 or 44.1 kHz to 16 kHz), a short
// halving filter runs first and the sharp one at half the rate: the same response for about
// 60% of the arithmetic.

import { InvalidArgumentError } from '../protocol/errors.ts';
import { wasmFirRunner } from './fir-wasm.ts';
import type { ResamplerKernel } from './resampler-kernel.ts';

/** The format of interleaved PCM: sample rate and channel count. */
export interface PcmFormat {
  /** Frames per second (Hz). */
  sampleRate: number;
  /** Interleaved channels per frame. */
  channels: number;
}

const isWhole = (value: unknown, min: number, max: number): value is number =>
  typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;

/**
 * The one check of a PCM format given to speechpipe: a whole sample rate and channel count, as
 * a WAV header can hold them (channels at most 65535). Otherwise `InvalidArgumentError` naming
 * `what`. Returns a copy with only those two fields.
 */
export function checkPcmFormat(what: string, format: unknown): PcmFormat {
  const f = (typeof format === 'object' && format !== null ? format : {}) as Partial<PcmFormat>;
  if (!isWhole(f.sampleRate, 1, 0xffffffff) || !isWhole(f.channels, 1, 65535)) {
    const got =
      typeof format === 'object' && format !== null
        ? { sampleRate: f.sampleRate, channels: f.channels }
        : format;
    throw new InvalidArgumentError(
      `${what} must be { sampleRate, channels } with whole positive numbers (channels at most 65535), got ${String(JSON.stringify(got))}`,
    );
  }
  return { sampleRate: f.sampleRate, channels: f.channels };
}

/** The resampling filter's design: all optional, with defaults meant for speech. */
export interface ResamplerDesign {
  /** Passband edge as a fraction of the lower Nyquist frequency, in (0, 1). Default 0.9. */
  passband?: number;
  /** Designed stopband attenuation in dB, 20 to 180. Default 100. */
  stopbandDb?: number;
  /** Most polyphase tables kept exactly (1 to 65536); beyond, tables are interpolated. Default 1024. */
  maxPhases?: number;
  /** Halve the rate first when the input is over twice the output rate. Default true. */
  cascade?: boolean;
}

/** A filter design's fields checked (`InvalidArgumentError` when out of range); a copy. */
export function checkDesign(design: ResamplerDesign = {}): ResamplerDesign {
  const { passband, stopbandDb, maxPhases, cascade } = design;
  const fail = (what: string) => {
    throw new InvalidArgumentError(`resampler design: ${what}`);
  };
  if (passband !== undefined && !(typeof passband === 'number' && passband > 0 && passband < 1)) {
    fail(`passband must be within (0, 1), got ${passband}`);
  }
  if (
    stopbandDb !== undefined &&
    !(typeof stopbandDb === 'number' && stopbandDb >= 20 && stopbandDb <= 180)
  ) {
    fail(`stopbandDb must be 20 to 180, got ${stopbandDb}`);
  }
  if (maxPhases !== undefined && !isWhole(maxPhases, 1, 65536)) {
    fail(`maxPhases must be a whole number 1 to 65536, got ${maxPhases}`);
  }
  if (cascade !== undefined && typeof cascade !== 'boolean')
    fail(`cascade must be a boolean, got ${cascade}`);
  return { ...design };
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Zeroth-order modified Bessel function of the first kind (power series). */
function besselI0(x: number): number {
  let sum = 1;
  let term = 1;
  const q = (x * x) / 4;
  for (let k = 1; k < 64; k++) {
    term *= q / (k * k);
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

/** Kaiser's estimate of beta for a stopband attenuation in dB. */
function kaiserBeta(a: number): number {
  if (a > 50) return 0.1102 * (a - 8.7);
  if (a >= 21) return 0.5842 * (a - 21) ** 0.4 + 0.07886 * (a - 21);
  return 0;
}

const kernelCache = new Map<string, ResamplerKernel>();

/**
 * Largest filter table of one stage, in floats (64 MiB, what the WebAssembly loop keeps). The
 * conversions between common rates (8 kHz to 2.8 MHz, to 8 to 48 kHz) need 2.5 MiB at most.
 */
const MAX_KERNEL_FLOATS = 16 << 20;

function checkRates(inRate: number, outRate: number): void {
  checkPcmFormat('the resampler input', { sampleRate: inRate, channels: 1 });
  checkPcmFormat('the resampler output', { sampleRate: outRate, channels: 1 });
}

/** Build (or reuse) the single-stage kernel converting `inRate` to `outRate`. */
export function resamplerKernel(
  inRate: number,
  outRate: number,
  design: ResamplerDesign = {},
): ResamplerKernel {
  checkRates(inRate, outRate);
  const passband = checkDesign(design).passband ?? 0.9;
  const nyquist = Math.min(inRate, outRate) / 2;
  return designKernel(inRate, outRate, passband * nyquist, nyquist, design);
}

/** A lowpass kernel from `inRate` to `outRate`: flat to `passHz`, `stopbandDb` down from `stopHz`. */
function designKernel(
  inRate: number,
  outRate: number,
  passHz: number,
  stopHz: number,
  design: ResamplerDesign,
): ResamplerKernel {
  const stopbandDb = design.stopbandDb ?? 100;
  const maxPhases = design.maxPhases ?? 1024;
  const key = `${inRate}:${outRate}:${passHz}:${stopHz}:${stopbandDb}:${maxPhases}`;
  const cached = kernelCache.get(key);
  if (cached) return cached;

  const g = gcd(inRate, outRate);
  const up = outRate / g;
  const down = inRate / g;
  // In cycles per input sample.
  const pass = passHz / inRate;
  const stop = stopHz / inRate;
  const cutoff = (pass + stop) / 2;
  const length = (stopbandDb - 7.95) / (2.285 * 2 * Math.PI * (stop - pass));
  const half = Math.max(2, Math.ceil(length / 2));
  const beta = kaiserBeta(stopbandDb);
  const exact = up <= maxPhases;
  const phases = exact ? up : maxPhases;
  const taps = 2 * half;
  if ((phases + 1) * taps > MAX_KERNEL_FLOATS) {
    // Taps grow with the rate ratio, tables with the reduced ratio: an odd rate far above the
    // output (a corrupt WAV header's 123456789 Hz) wanted gigabytes and a minute to design.
    const mib = Math.ceil(((phases + 1) * taps * 4) / 2 ** 20);
    throw new InvalidArgumentError(
      `resampler: ${inRate} Hz to ${outRate} Hz needs ${phases + 1} tables of ${taps} taps (${mib} MiB; at most ${(MAX_KERNEL_FLOATS * 4) / 2 ** 20} MiB)`,
    );
  }
  const coeffs = new Float32Array((phases + 1) * taps);
  const i0beta = besselI0(beta);
  const row = new Float64Array(taps);
  for (let p = 0; p <= phases; p++) {
    const frac = p / phases;
    let sum = 0;
    for (let k = 0; k < taps; k++) {
      const t = frac + half - 1 - k;
      const r = t / half;
      const w = r * r >= 1 ? 0 : besselI0(beta * Math.sqrt(1 - r * r)) / i0beta;
      const x = 2 * cutoff * t;
      const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
      row[k] = 2 * cutoff * sinc * w;
      sum += row[k]!;
    }
    // Unity gain at DC for every phase: no ripple from the phase pattern on a constant.
    for (let k = 0; k < taps; k++) coeffs[p * taps + k] = row[k]! / sum;
  }
  const kernel: ResamplerKernel = { inRate, outRate, up, down, phases, exact, half, coeffs };
  kernelCache.set(key, kernel);
  return kernel;
}

/**
 * The stages of one conversion: `main` (null when the rates are equal), preceded by `pre`, a
 * halving filter, when the input rate is more than twice the output rate. Output positions are
 * `main` positions (in samples of its input rate).
 */
export interface ResamplerChain {
  /** The halving filter, or null. */
  pre: ResamplerKernel | null;
  /** The conversion filter, or null when the rates are equal. */
  main: ResamplerKernel | null;
}

export function resamplerChain(
  inRate: number,
  outRate: number,
  design: ResamplerDesign = {},
): ResamplerChain {
  checkRates(inRate, outRate);
  checkDesign(design);
  if (inRate === outRate) return { pre: null, main: null };
  if (design.cascade === false || inRate % 2 !== 0 || inRate / 2 <= outRate) {
    return { pre: null, main: resamplerKernel(inRate, outRate, design) };
  }
  const mid = inRate / 2;
  const nyquist = outRate / 2;
  // What folds into 0 .. nyquist when halving must be gone; the rest the main stage removes.
  const pre = designKernel(inRate, mid, (design.passband ?? 0.9) * nyquist, mid - nyquist, design);
  return { pre, main: resamplerKernel(mid, outRate, design) };
}

/** First and last input index the output at main position `pos` reads. */
function firstInput(chain: ResamplerChain, pos: number): number {
  const { pre, main } = chain;
  if (!main) return pos;
  const first = pos - main.half + 1;
  return pre ? 2 * first - pre.half + 1 : first;
}

function lastInput(chain: ResamplerChain, pos: number): number {
  const { pre, main } = chain;
  if (!main) return pos;
  const last = pos + main.half;
  return pre ? 2 * last + pre.half : last;
}

/** The largest main position whose output reads no input past `lastIndex`. */
function lastReadyPos(chain: ResamplerChain, lastIndex: number): number {
  const { pre, main } = chain;
  if (!main) return lastIndex;
  return pre ? Math.floor((lastIndex - pre.half) / 2) - main.half : lastIndex - main.half;
}

/** Where the next output sample lies: input index `pos` plus `frac / up` of a sample. */
export interface ResamplerPosition {
  /** Input index (in samples of the main stage's input rate). */
  pos: number;
  /** Offset past `pos`, in `1 / up` of a sample (the main stage's upsampling factor). */
  frac: number;
}

/**
 * Compute `count` output samples of one channel. `input[i]` holds the sample at absolute input
 * index `base + i`; the caller guarantees every index the outputs read is inside `input`.
 * Pure and deterministic: the inline resampler and the worker task run exactly this. The dot
 * products run in WebAssembly SIMD (f32 sums) where it can, else (or with `loop: 'js'`) in JS
 * (f64 sums); the two agree to float rounding.
 */
export function resampleChannel(
  kernel: ResamplerKernel,
  input: Float32Array,
  base: number,
  start: ResamplerPosition,
  count: number,
  out: Float32Array,
  outOffset = 0,
  loop: 'auto' | 'js' = 'auto',
): void {
  if (
    loop === 'auto' &&
    wasmFirRunner()?.run(kernel, input, base, start.pos, start.frac, count, out, outOffset)
  ) {
    return;
  }
  const { up, down, half, coeffs, phases, exact } = kernel;
  const taps = 2 * half;
  let pos = start.pos;
  let frac = start.frac;
  const stepPos = Math.floor(down / up);
  const stepFrac = down % up;
  for (let n = 0; n < count; n++) {
    const first = pos - half + 1 - base;
    let acc = 0;
    if (exact) {
      // Four independent sums: a single accumulator is bound by floating-point add latency.
      const row = frac * taps;
      let a0 = 0;
      let a1 = 0;
      let a2 = 0;
      let a3 = 0;
      let k = 0;
      for (; k + 3 < taps; k += 4) {
        a0 += coeffs[row + k]! * input[first + k]!;
        a1 += coeffs[row + k + 1]! * input[first + k + 1]!;
        a2 += coeffs[row + k + 2]! * input[first + k + 2]!;
        a3 += coeffs[row + k + 3]! * input[first + k + 3]!;
      }
      for (; k < taps; k++) a0 += coeffs[row + k]! * input[first + k]!;
      acc = a0 + a1 + (a2 + a3);
    } else {
      const x = (frac * phases) / up;
      const p = Math.floor(x);
      const b = x - p;
      const rowA = p * taps;
      const rowB = rowA + taps;
      let accA = 0;
      let accB = 0;
      for (let k = 0; k < taps; k++) {
        const s = input[first + k]!;
        accA += coeffs[rowA + k]! * s;
        accB += coeffs[rowB + k]! * s;
      }
      acc = accA + (accB - accA) * b;
    }
    out[outOffset + n] = acc;
    pos += stepPos;
    frac += stepFrac;
    if (frac >= up) {
      frac -= up;
      pos += 1;
    }
  }
}

/** Which loop `resampleChannel` runs in this thread: `'wasm-simd'` or `'js'`. */
export function resamplerBackend(): 'wasm-simd' | 'js' {
  return wasmFirRunner() ? 'wasm-simd' : 'js';
}

/** Advance a position by `count` outputs. */
export function advancePosition(
  kernel: ResamplerKernel,
  at: ResamplerPosition,
  count: number,
): ResamplerPosition {
  const total = at.frac + count * (kernel.down % kernel.up);
  return {
    pos: at.pos + count * Math.floor(kernel.down / kernel.up) + Math.floor(total / kernel.up),
    frac: total % kernel.up,
  };
}

/** How `from` channels become `to` channels; documented in DECISIONS.md (Transforms). */
export function channelMixPlan(from: number, to: number): number[][] {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 1 || to < 1) {
    throw new RangeError(`channel counts must be positive integers, got ${from} and ${to}`);
  }
  // Output channel c is the mean of the input channels listed for it.
  const plan: number[][] = [];
  for (let c = 0; c < to; c++) {
    if (to >= from) plan.push([c % from]);
    else {
      const sources: number[] = [];
      for (let s = c; s < from; s += to) sources.push(s);
      plan.push(sources);
    }
  }
  return plan;
}

/** PCM16 interleaved frames to one Float32Array per channel (sample values, not scaled). */
export function deinterleaveMix(
  samples: Int16Array,
  inChannels: number,
  plan: readonly (readonly number[])[],
): Float32Array[] {
  const frames = Math.floor(samples.length / inChannels);
  return plan.map((sources) => {
    const out = new Float32Array(frames);
    if (sources.length === 1) {
      const s = sources[0]!;
      for (let f = 0, i = s; f < frames; f++, i += inChannels) out[f] = samples[i]!;
    } else if (sources.length === 2) {
      // Stereo to mono, the common case: without the inner loop it runs about twice as fast.
      const a = sources[0]!;
      const b = sources[1]!;
      for (let f = 0, i = 0; f < frames; f++, i += inChannels)
        out[f] = (samples[i + a]! + samples[i + b]!) * 0.5;
    } else {
      const scale = 1 / sources.length;
      for (let f = 0; f < frames; f++) {
        let sum = 0;
        const at = f * inChannels;
        for (let j = 0; j < sources.length; j++) sum += samples[at + sources[j]!]!;
        out[f] = sum * scale;
      }
    }
    return out;
  });
}

/** Round and clamp channel floats into interleaved PCM16. */
export function interleaveToPcm16(
  channels: readonly Float32Array[],
  count: number,
  out: Int16Array = new Int16Array(count * channels.length),
): Int16Array {
  const n = channels.length;
  for (let c = 0; c < n; c++) {
    const ch = channels[c]!;
    for (let f = 0, i = c; f < count; f++, i += n) {
      const v = Math.round(ch[f]!);
      out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    }
  }
  return out;
}

/**
 * One unit of resampling work: `count` output frames starting at input position `start`, with
 * every input frame they read (`window`, interleaved PCM16 in the `from` format, frame `base`
 * first; frames outside the input are zeros). Self-contained, so a worker thread can run it.
 */
export interface ResampleTask {
  /** The input format (of `window`). */
  from: PcmFormat;
  /** The output format. */
  to: PcmFormat;
  /** The filter design. */
  design: ResamplerDesign;
  /** Every input frame the outputs read, interleaved PCM16, frame `base` first. */
  window: Int16Array;
  /** The absolute input frame index of `window`'s first frame. */
  base: number;
  /** Where the first output frame lies. */
  start: ResamplerPosition;
  /** Output frames to compute. */
  count: number;
}

/** Run one task: interleaved PCM16 output in the `to` format (`count` frames). */
export function runResampleTask(task: ResampleTask): Int16Array {
  const { count, start } = task;
  const from = checkPcmFormat('task.from', task.from);
  const to = checkPcmFormat('task.to', task.to);
  const work = Math.min(from.channels, to.channels);
  const mixed = deinterleaveMix(task.window, from.channels, channelMixPlan(from.channels, work));
  const { pre, main } = resamplerChain(from.sampleRate, to.sampleRate, task.design);
  let channels: Float32Array[];
  if (!main) {
    channels = mixed.map((ch) => ch.subarray(start.pos - task.base, start.pos - task.base + count));
  } else {
    channels = mixed.map((ch) => {
      let input = ch;
      let base = task.base;
      if (pre) {
        // The half-rate samples the main stage reads, from the halving filter.
        const end = advancePosition(main, start, count - 1);
        base = start.pos - main.half + 1;
        const midCount = end.pos + main.half - base + 1;
        input = new Float32Array(midCount);
        resampleChannel(pre, ch, task.base, { pos: 2 * base, frac: 0 }, midCount, input);
      }
      const out = new Float32Array(count);
      resampleChannel(main, input, base, start, count, out);
      return out;
    });
  }
  if (to.channels > work) {
    const up = channelMixPlan(work, to.channels);
    channels = up.map((src) => channels[src[0]!]!);
  }
  return interleaveToPcm16(channels, count);
}

/** Options of a {@link ResamplePlanner}. */
export interface ResamplePlannerOptions {
  /** The filter design (defaults as {@link ResamplerDesign} says). */
  design?: ResamplerDesign;
  /** Output frames per task, at least (except the last), a whole number. Default 1: everything ready. */
  minTaskFrames?: number;
  /** Output frames per task, at most: a whole number, or Infinity (the default). */
  maxTaskFrames?: number;
}

/**
 * The streaming state of a resampler, without the arithmetic: PCM16 interleaved frames in,
 * `ResampleTask`s out, each covering the outputs whose filter window the input now completes.
 * Run tasks in order (inline with `runResampleTask`, or in a worker pool) and concatenate: the
 * result is the same however the input is split and however the tasks are sized.
 */
export class ResamplePlanner {
  /** The input format. */
  readonly from: PcmFormat;
  /** The output format. */
  readonly to: PcmFormat;
  /** The filter design, checked. */
  readonly design: ResamplerDesign;
  /**
   * The filter stages of the conversion.
   * @internal
   */
  readonly chain: ResamplerChain;
  /** Reduced overall ratio: `#up` output frames per `#down` input frames. */
  readonly #up: number;
  readonly #down: number;
  readonly #minTask: number;
  readonly #maxTask: number;
  /** Input frames kept, interleaved; frame 0 of it is absolute frame `#base`. */
  #hist: Int16Array;
  #base: number;
  #len: number;
  #at: ResamplerPosition = { pos: 0, frac: 0 };
  #inputFrames = 0;
  #plannedFrames = 0;
  #ended = false;

  /**
   * Plan the conversion of `from` to `to`.
   * @throws InvalidArgumentError when a format, the design or a task size is invalid.
   */
  constructor(from: PcmFormat, to: PcmFormat, options: ResamplePlannerOptions = {}) {
    this.from = checkPcmFormat('the resampler input', from);
    this.to = checkPcmFormat('the resampler output', to);
    this.design = checkDesign(options.design);
    const { minTaskFrames = 1, maxTaskFrames = Number.POSITIVE_INFINITY } = options;
    if (!isWhole(minTaskFrames, 1, Number.MAX_SAFE_INTEGER)) {
      throw new InvalidArgumentError(`minTaskFrames must be a whole number of frames, got ${minTaskFrames}`);
    }
    if (maxTaskFrames !== Number.POSITIVE_INFINITY && !isWhole(maxTaskFrames, 1, Number.MAX_SAFE_INTEGER)) {
      throw new InvalidArgumentError(`maxTaskFrames must be a whole number of frames, got ${maxTaskFrames}`);
    }
    this.chain = resamplerChain(from.sampleRate, to.sampleRate, this.design);
    const g = gcd(from.sampleRate, to.sampleRate);
    this.#up = to.sampleRate / g;
    this.#down = from.sampleRate / g;
    this.#minTask = minTaskFrames;
    this.#maxTask = Math.max(minTaskFrames, maxTaskFrames);
    // Zeros before the first frame: the filters are centred, so output 0 aligns with input 0.
    const lead = -firstInput(this.chain, 0);
    this.#hist = new Int16Array(Math.max(4096, lead * 4) * from.channels);
    this.#base = -lead;
    this.#len = lead;
  }

  /** Input frames received so far. */
  get inputFrames(): number {
    return this.#inputFrames;
  }

  /** Output frames covered by the tasks returned so far. */
  get plannedFrames(): number {
    return this.#plannedFrames;
  }

  /** Output frames the whole input makes, once ended: ceil(inputFrames * outRate / inRate). */
  totalOutputFrames(): number {
    return Math.ceil((this.#inputFrames * this.#up) / this.#down);
  }

  /** Feed whole interleaved frames; returns the tasks now ready (possibly none). */
  push(samples: Int16Array): ResampleTask[] {
    if (this.#ended) throw new Error('ResamplePlanner: push after end');
    const ch = this.from.channels;
    if (samples.length % ch !== 0) {
      throw new RangeError(`${samples.length} samples are not whole ${ch}-channel frames`);
    }
    this.#append(samples);
    this.#inputFrames += samples.length / ch;
    return this.#plan(this.#ready(), false);
  }

  /** End of input: the tasks for every remaining output. */
  end(): ResampleTask[] {
    if (this.#ended) return [];
    this.#ended = true;
    const remaining = this.totalOutputFrames() - this.#plannedFrames;
    if (remaining <= 0) return [];
    // Zeros after the last frame, as far as the last output reads.
    this.#append(new Int16Array((lastInput(this.chain, 0) + 2) * this.from.channels));
    return this.#plan(remaining, true);
  }

  /** Outputs whose whole filter window lies inside the input received so far. */
  #ready(): number {
    const lastPos = lastReadyPos(this.chain, this.#base + this.#len - 1);
    const main = this.chain.main;
    if (!main) return Math.max(0, lastPos + 1 - this.#at.pos);
    // Count n with pos(n) <= lastPos, pos(n) = pos + floor((frac + n * down) / up).
    const room = lastPos - this.#at.pos;
    if (room < 0) return 0;
    return Math.floor(((room + 1) * main.up - this.#at.frac - 1) / main.down) + 1;
  }

  #plan(ready: number, last: boolean): ResampleTask[] {
    const tasks: ResampleTask[] = [];
    let left = ready;
    while (left > 0 && (last || left >= this.#minTask)) {
      const count = Math.min(left, this.#maxTask);
      tasks.push(this.#task(count));
      left -= count;
    }
    // Keep only what the next output can still read.
    this.#discardBefore(firstInput(this.chain, this.#at.pos));
    return tasks;
  }

  #task(count: number): ResampleTask {
    const main = this.chain.main;
    const ch = this.from.channels;
    const start = this.#at;
    const advance = (n: number) => (main ? advancePosition(main, start, n) : { pos: start.pos + n, frac: 0 });
    const first = firstInput(this.chain, start.pos);
    const last = lastInput(this.chain, advance(count - 1).pos);
    const window = this.#hist.slice((first - this.#base) * ch, (last + 1 - this.#base) * ch);
    this.#at = advance(count);
    this.#plannedFrames += count;
    return { from: this.from, to: this.to, design: this.design, window, base: first, start, count };
  }

  #append(samples: Int16Array): void {
    const ch = this.from.channels;
    const need = (this.#len * ch + samples.length) | 0;
    if (need > this.#hist.length) {
      const grown = new Int16Array(Math.max(need, this.#hist.length * 2));
      grown.set(this.#hist.subarray(0, this.#len * ch));
      this.#hist = grown;
    }
    this.#hist.set(samples, this.#len * ch);
    this.#len += samples.length / ch;
  }

  #discardBefore(index: number): void {
    const drop = Math.min(index - this.#base, this.#len);
    if (drop <= 0) return;
    const ch = this.from.channels;
    this.#hist.copyWithin(0, drop * ch, this.#len * ch);
    this.#base += drop;
    this.#len -= drop;
  }
}

/**
 * Streaming resampler: PCM16 interleaved frames in, PCM16 interleaved frames out, state carried
 * between calls, work done inline. Input must be whole frames; the byte carry is the
 * transform's job.
 */
export class Resampler {
  readonly #planner: ResamplePlanner;

  constructor(from: PcmFormat, to: PcmFormat, design: ResamplerDesign = {}) {
    this.#planner = new ResamplePlanner(from, to, { design });
  }

  /** @internal The planner under this resampler. */
  get planner(): ResamplePlanner {
    return this.#planner;
  }

  /** Feed whole interleaved frames; returns the interleaved output they complete. */
  push(samples: Int16Array): Int16Array {
    return concatInt16(this.#planner.push(samples).map(runResampleTask));
  }

  /** End of input: the remaining output (zeros stand in for the samples after the end). */
  end(): Int16Array {
    return concatInt16(this.#planner.end().map(runResampleTask));
  }
}

export function concatInt16(parts: readonly Int16Array[]): Int16Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Int16Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
