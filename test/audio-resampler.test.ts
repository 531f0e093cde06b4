// The resampler's measured quality (passband flatness, stopband and image rejection, with sines
// and sweeps), time alignment, durations, channel mixing and chunk-boundary invariance.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import fc from 'fast-check';
import {
  advancePosition,
  channelMixPlan,
  concatInt16,
  type PcmFormat,
  ResamplePlanner,
  Resampler,
  type ResamplerDesign,
  resampleChannel,
  resamplerBackend,
  resamplerChain,
  resamplerKernel,
  runResampleTask,
} from '../src/audio/resampler.ts';
import type { ResamplerKernel } from '../src/audio/resampler-kernel.ts';
import { InvalidArgumentError } from '../src/protocol/errors.ts';
import { decode, type RawInputFormat } from '../src/transforms/decode.ts';
import { resample } from '../src/transforms/resample.ts';
import { toWav } from '../src/transforms/to-wav.ts';

/** Amplitude of frequency `f` in `x` (sample rate `fs`): one DFT bin under a Blackman-Harris window. */
function amplitudeAt(x: ArrayLike<number>, f: number, fs: number): number {
  const n = x.length;
  let re = 0;
  let im = 0;
  let wsum = 0;
  for (let i = 0; i < n; i++) {
    const a = (2 * Math.PI * i) / (n - 1);
    const w = 0.35875 - 0.48829 * Math.cos(a) + 0.14128 * Math.cos(2 * a) - 0.01168 * Math.cos(3 * a);
    const ph = (2 * Math.PI * f * i) / fs;
    wsum += w;
    re += w * x[i]! * Math.cos(ph);
    im -= w * x[i]! * Math.sin(ph);
  }
  return (2 * Math.hypot(re, im)) / wsum;
}

const db = (ratio: number) => 20 * Math.log10(Math.max(ratio, 1e-12));

function sine(rate: number, f: number, seconds: number, amplitude: number): Int16Array {
  const out = new Int16Array(Math.round(rate * seconds));
  for (let i = 0; i < out.length; i++)
    out[i] = Math.round(amplitude * Math.sin((2 * Math.PI * f * i) / rate));
  return out;
}

/** A linear chirp from f0 to f1 with raised-cosine fades at both ends. */
function chirp(rate: number, f0: number, f1: number, seconds: number, amplitude: number): Int16Array {
  const n = Math.round(rate * seconds);
  const fade = Math.round(rate * 0.05);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const phase = 2 * Math.PI * (f0 * t + ((f1 - f0) * t * t) / (2 * seconds));
    const edge = Math.min(1, i / fade, (n - 1 - i) / fade);
    out[i] = Math.round(amplitude * Math.sin(phase) * (0.5 - 0.5 * Math.cos(Math.PI * edge)));
  }
  return out;
}

const rms = (x: ArrayLike<number>) => {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i]! * x[i]!;
  return Math.sqrt(s / x.length);
};

function convert(input: Int16Array, from: number, to: number, channels = 1, outChannels = 1): Int16Array {
  const r = new Resampler({ sampleRate: from, channels }, { sampleRate: to, channels: outChannels });
  return concatInt16([r.push(input), r.end()]);
}

/** The steady middle of a signal (filter edges and fades excluded). */
const middle = (x: Int16Array) => x.subarray(Math.floor(x.length * 0.15), Math.floor(x.length * 0.85));

const CONVERSIONS: Array<[number, number]> = [
  [48000, 16000],
  [44100, 16000],
  [24000, 16000],
  [22050, 16000],
  [8000, 16000],
  [16000, 48000],
  [44100, 15999], // L = 15999 phases: the interpolated-table path
];

for (const [from, to] of CONVERSIONS) {
  const nyquist = Math.min(from, to) / 2;

  test(`${from} -> ${to} Hz: passband flat within 0.1 dB up to 0.9 of Nyquist (sines)`, () => {
    const amplitude = 16000;
    for (const rel of [0.02, 0.2, 0.45, 0.7, 0.85, 0.9]) {
      const f = rel * nyquist;
      const out = convert(sine(from, f, 1, amplitude), from, to);
      const gain = db(amplitudeAt(middle(out), f, to) / amplitude);
      assert.ok(Math.abs(gain) <= 0.1, `${f.toFixed(0)} Hz: gain ${gain.toFixed(4)} dB`);
    }
  });

  test(`${from} -> ${to} Hz: at least 90 dB stopband (aliases and images of sines)`, () => {
    const amplitude = 30000;
    if (from > to) {
      // Input above the output Nyquist frequency would alias to to - f: it must be gone.
      for (const rel of [1.0, 1.005, 1.02, 1.1, 1.5, 1.9]) {
        const f = Math.min(rel * nyquist, from / 2 - 50) + (rel === 1.0 ? 20 : 0);
        const alias = Math.abs(((f + to / 2) % to) - to / 2);
        const out = convert(sine(from, f, 1, amplitude), from, to);
        const level = db(amplitudeAt(middle(out), alias, to) / amplitude);
        assert.ok(
          level <= -90,
          `${f.toFixed(0)} Hz (alias at ${alias.toFixed(0)} Hz): ${level.toFixed(1)} dB`,
        );
      }
    } else {
      // Upsampling makes images at from - f, from + f ...: above the input Nyquist they must be gone.
      for (const rel of [0.2, 0.6, 0.9, 0.98]) {
        const f = rel * nyquist;
        const out = convert(sine(from, f, 1, amplitude), from, to);
        for (const image of [from - f, from + f]) {
          if (image >= to / 2) continue;
          const level = db(amplitudeAt(middle(out), image, to) / amplitude);
          assert.ok(
            level <= -90,
            `${f.toFixed(0)} Hz: image at ${image.toFixed(0)} Hz is ${level.toFixed(1)} dB`,
          );
        }
      }
    }
  });

  test(`${from} -> ${to} Hz: sweeps keep the passband and reject the stopband`, () => {
    const amplitude = 20000;
    const pass = chirp(from, 0.05 * nyquist, 0.9 * nyquist, 2, amplitude);
    const passOut = convert(pass, from, to);
    const gain = db(rms(middle(passOut)) / rms(middle(pass)));
    assert.ok(Math.abs(gain) <= 0.1, `passband sweep gain ${gain.toFixed(4)} dB`);
    if (from > to) {
      const stop = chirp(from, nyquist * 1.005, from / 2 - 100, 2, amplitude);
      const stopOut = convert(stop, from, to);
      const level = db(rms(middle(stopOut)) / rms(middle(stop)));
      assert.ok(level <= -90, `stopband sweep leaks ${level.toFixed(1)} dB`);
    }
  });
}

test('the kernel designs what it promises (exact tables for common rates, a cascade above 2:1)', () => {
  const k = resamplerKernel(48000, 16000);
  assert.equal(k.up, 1);
  assert.equal(k.down, 3);
  assert.ok(k.exact);
  assert.ok(resamplerKernel(44100, 16000).exact);
  assert.ok(!resamplerKernel(44100, 15999).exact);
  // Above twice the output rate a halving stage runs first; it changes the arithmetic, not the result.
  assert.ok(resamplerChain(48000, 16000).pre);
  assert.equal(resamplerChain(48000, 16000, { cascade: false }).pre, null);
  assert.equal(resamplerChain(32000, 16000).pre, null);
  const input = sine(48000, 3000, 0.5, 20000);
  const single = new Resampler(
    { sampleRate: 48000, channels: 1 },
    { sampleRate: 16000, channels: 1 },
    { cascade: false },
  );
  const cascaded = convert(input, 48000, 16000);
  const direct = concatInt16([single.push(input), single.end()]);
  assert.equal(cascaded.length, direct.length);
  let worst = 0;
  for (let i = 0; i < direct.length; i++) worst = Math.max(worst, Math.abs(cascaded[i]! - direct[i]!));
  assert.ok(worst <= 3, `cascade and single stage differ by ${worst}`);
  // Every phase sums to one: a constant stays exactly that constant.
  const out = convert(new Int16Array(44100).fill(12345), 44100, 16000);
  for (const v of middle(out)) assert.equal(v, 12345);
});

/**
 * One stage in float over `x` (input sample `base + i` in `x[i]`): every output whose window
 * lies inside `x`, and the absolute index of the first.
 */
function floatStage(kernel: ResamplerKernel, x: Float32Array, base: number) {
  const { half, up, down } = kernel;
  const first = Math.ceil(((base + half - 1) * up) / down);
  const last = Math.floor(((base + x.length - half) * up - 1) / down);
  const y = new Float32Array(last - first + 1);
  resampleChannel(kernel, x, base, advancePosition(kernel, { pos: 0, frac: 0 }, first), y.length, y);
  return { y, base: first };
}

/**
 * Worst alias (dB) of the default chain from `from` to `to` Hz over sines from the output's
 * Nyquist frequency to the input's, computed in float (no PCM16 rounding, which hides anything
 * under half a step): the design's own stopband.
 */
function floatStopbandDb(from: number, to: number): { worst: number; at: number } {
  const { pre, main } = resamplerChain(from, to);
  assert.ok(main);
  const input = new Float32Array(Math.round(from * 0.3));
  let worst = Number.NEGATIVE_INFINITY;
  let at = 0;
  for (let f = to / 2 + 5; f < from / 2; f += 47) {
    for (let i = 0; i < input.length; i++) input[i] = Math.sin((2 * Math.PI * f * i) / from);
    const mid = pre ? floatStage(pre, input, 0) : { y: input, base: 0 };
    const out = floatStage(main, mid.y, mid.base).y;
    const level = db(amplitudeAt(out, Math.abs(((f + to / 2) % to) - to / 2), to));
    assert.ok(Number.isFinite(level), `${f} Hz: ${level}`);
    if (level > worst) [worst, at] = [level, f];
  }
  return { worst, at };
}

test('the default design measures at least 90 dB of stopband in float (100 dB design)', () => {
  for (const [from, to] of [
    [48000, 16000],
    [44100, 16000],
    [24000, 16000],
  ] as const) {
    const { worst, at } = floatStopbandDb(from, to);
    assert.ok(worst <= -90, `${from} -> ${to} Hz: ${at} Hz aliases at ${worst.toFixed(1)} dB`);
  }
});

test('WebAssembly SIMD and the JS loop give the same outputs, to float rounding', (t) => {
  if (process.env.SPEECHPIPE_RESAMPLER_SIMD === '0') {
    t.skip('SPEECHPIPE_RESAMPLER_SIMD=0: this run tests the JS loop alone');
    return;
  }
  // Node 22.19 and 24 both have WebAssembly SIMD: the fast path must be the one running.
  assert.equal(resamplerBackend(), 'wasm-simd');
  // Long enough for several blocks of WebAssembly calls on every path (8192 outputs each).
  const input = new Float32Array(40000);
  let x = 1;
  for (let i = 0; i < input.length; i++) {
    x = (x * 48271) % 2147483647;
    input[i] = (x / 2147483647) * 65535 - 32768;
  }
  for (const [from, to] of CONVERSIONS) {
    const { pre, main } = resamplerChain(from, to);
    for (const kernel of [pre, main]) {
      if (!kernel) continue;
      const start = { pos: kernel.half + 3, frac: kernel.exact ? kernel.up - 1 : 7 };
      const count = Math.floor(((input.length - 3 * kernel.half) * kernel.up) / kernel.down);
      const simd = new Float32Array(count);
      const js = new Float32Array(count);
      resampleChannel(kernel, input, 0, start, count, simd);
      resampleChannel(kernel, input, 0, start, count, js, 0, 'js');
      let worst = 0;
      for (let i = 0; i < count; i++) worst = Math.max(worst, Math.abs(simd[i]! - js[i]!));
      // f32 sums against f64 sums of samples up to 32768, where one f32 step is 1/256: a few
      // such steps, far under one PCM16 step.
      assert.ok(
        worst < 0.05,
        `${from} -> ${to} (${kernel.inRate} -> ${kernel.outRate} Hz): differ by ${worst}`,
      );
    }
  }
});

test('SPEECHPIPE_RESAMPLER_SIMD=0 runs the JS loop, with the same PCM16 output to a step', async () => {
  const source = `
    import { Resampler, concatInt16, resamplerBackend } from './src/audio/resampler.ts';
    const input = new Int16Array(2 * 48000);
    for (let i = 0; i < input.length; i++) input[i] = Math.round(20000 * Math.sin(i * 0.0123) + 9000 * Math.sin(i * 1.9));
    const r = new Resampler({ sampleRate: 48000, channels: 2 }, { sampleRate: 16000, channels: 1 });
    const out = concatInt16([r.push(input), r.end()]);
    process.stdout.write(JSON.stringify({ backend: resamplerBackend(), out: Array.from(out) }));
  `;
  const run = async (env: NodeJS.ProcessEnv) => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', source], {
      env: { ...process.env, ...env },
      maxBuffer: 1 << 24,
    });
    return JSON.parse(stdout) as { backend: string; out: number[] };
  };
  const [js, simd] = await Promise.all([
    run({ SPEECHPIPE_RESAMPLER_SIMD: '0' }),
    run({ SPEECHPIPE_RESAMPLER_SIMD: '' }),
  ]);
  assert.equal(js.backend, 'js');
  assert.equal(simd.backend, 'wasm-simd');
  assert.equal(js.out.length, simd.out.length);
  let worst = 0;
  for (let i = 0; i < js.out.length; i++) worst = Math.max(worst, Math.abs(js.out[i]! - simd.out[i]!));
  assert.ok(worst <= 1, `differ by ${worst}`);
});

test('output is time-aligned with the input (no filter delay) and lasts as long', () => {
  for (const [from, to] of CONVERSIONS) {
    const input = sine(from, 440, 0.5, 16000);
    const out = convert(input, from, to);
    assert.equal(out.length, Math.ceil((input.length * to) / from), `${from}->${to} length`);
    const ideal = sine(to, 440, out.length / to, 16000);
    let worst = 0;
    const m = middle(out);
    const offset = Math.floor(out.length * 0.15);
    for (let i = 0; i < m.length; i++) worst = Math.max(worst, Math.abs(m[i]! - ideal[offset + i]!));
    // 440 Hz at amplitude 16000: a delay of a single output sample would show as hundreds.
    assert.ok(worst <= 3, `${from}->${to}: differs from the ideal sine by ${worst}`);
  }
});

test('property: output does not depend on how the input is split (48 kHz stereo -> 16 kHz mono)', () => {
  const input = new Int16Array(2 * 4800);
  for (let i = 0; i < input.length; i++)
    input[i] = Math.round(12000 * Math.sin(i * 0.031) + 3000 * Math.cos(i * 0.7));
  const whole = convert(input, 48000, 16000, 2, 1);
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 0, max: 4800 }), { maxLength: 40 }), (cuts) => {
      const points = [...new Set(cuts)].sort((a, b) => a - b);
      const r = new Resampler({ sampleRate: 48000, channels: 2 }, { sampleRate: 16000, channels: 1 });
      const parts: Int16Array[] = [];
      let prev = 0;
      for (const p of [...points, 4800]) {
        parts.push(r.push(input.subarray(prev * 2, p * 2)));
        prev = p;
      }
      parts.push(r.end());
      assert.deepEqual(concatInt16(parts), whole);
    }),
    { numRuns: 100 },
  );
});

test('property: tasks of any size give the same output (44.1 kHz -> 16 kHz)', () => {
  const input = sine(44100, 997, 0.3, 20000);
  const whole = convert(input, 44100, 16000);
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 5000 }), fc.integer({ min: 1, max: 3000 }), (chunk, taskFrames) => {
      const planner = new ResamplePlanner(
        { sampleRate: 44100, channels: 1 },
        { sampleRate: 16000, channels: 1 },
        { minTaskFrames: taskFrames, maxTaskFrames: taskFrames },
      );
      const parts: Int16Array[] = [];
      for (let i = 0; i < input.length; i += chunk) {
        for (const task of planner.push(input.subarray(i, i + chunk))) {
          assert.ok(task.count <= taskFrames);
          parts.push(runResampleTask(task));
        }
      }
      for (const task of planner.end()) parts.push(runResampleTask(task));
      assert.deepEqual(concatInt16(parts), whole);
    }),
    { numRuns: 60 },
  );
});

test('no clicks at chunk boundaries: a sine split into 7-frame chunks stays smooth', () => {
  const input = sine(24000, 1000, 0.5, 20000);
  const r = new Resampler({ sampleRate: 24000, channels: 1 }, { sampleRate: 16000, channels: 1 });
  const parts: Int16Array[] = [];
  for (let i = 0; i < input.length; i += 7) parts.push(r.push(input.subarray(i, i + 7)));
  parts.push(r.end());
  const out = middle(concatInt16(parts));
  // A 1 kHz sine at 16 kHz moves at most 2*pi*1000/16000 * amplitude per sample.
  const bound = ((2 * Math.PI * 1000) / 16000) * 20000 * 1.02 + 2;
  for (let i = 1; i < out.length; i++) assert.ok(Math.abs(out[i]! - out[i - 1]!) <= bound, `jump at ${i}`);
});

test('channels: mix down by averaging, up by copying', () => {
  assert.deepEqual(channelMixPlan(2, 1), [[0, 1]]);
  assert.deepEqual(channelMixPlan(1, 2), [[0], [0]]);
  assert.deepEqual(channelMixPlan(6, 2), [
    [0, 2, 4],
    [1, 3, 5],
  ]);
  const stereo = new Int16Array([1000, 3000, -2000, -4000, 7, 8]);
  assert.deepEqual(convert(stereo, 16000, 16000, 2, 1), new Int16Array([2000, -3000, 8]));
  assert.deepEqual(convert(new Int16Array([5, -6]), 16000, 16000, 1, 2), new Int16Array([5, 5, -6, -6]));
  // Through a rate change, both output channels of an upmix are identical.
  const up = convert(sine(8000, 300, 0.1, 9000), 8000, 16000, 1, 2);
  for (let i = 0; i < up.length; i += 2) assert.equal(up[i], up[i + 1]);
});

test('the planner refuses partial frames and pushes after the end', () => {
  const planner = new ResamplePlanner({ sampleRate: 48000, channels: 2 }, { sampleRate: 16000, channels: 1 });
  assert.throws(() => planner.push(new Int16Array(3)), RangeError);
  planner.end();
  assert.throws(() => planner.push(new Int16Array(2)), /after end/);
  assert.throws(
    () => new ResamplePlanner({ sampleRate: 0, channels: 1 }, { sampleRate: 16000, channels: 1 }),
  );
});

test('bad formats, filter designs and task sizes are InvalidArgumentError through every public entry', async () => {
  const ok = { sampleRate: 48000, channels: 2 };
  const to = { sampleRate: 16000, channels: 1 };
  const formats: unknown[] = [
    undefined,
    { sampleRate: 0, channels: 1 },
    { sampleRate: 16000.5, channels: 1 },
    { sampleRate: Number.NaN, channels: 1 },
    { sampleRate: 16000, channels: 0 },
    { sampleRate: 16000, channels: 70_000 },
    { sampleRate: '16000', channels: 1 },
  ];
  for (const bad of formats) {
    const f = bad as PcmFormat;
    const what = JSON.stringify(bad);
    assert.throws(() => new ResamplePlanner(f, to), InvalidArgumentError, `planner from ${what}`);
    assert.throws(() => new ResamplePlanner(ok, f), InvalidArgumentError, `planner to ${what}`);
    assert.throws(() => new Resampler(f, to), InvalidArgumentError, `Resampler ${what}`);
    assert.throws(() => resample({ from: f, to }), InvalidArgumentError, `resample from ${what}`);
    assert.throws(() => resample({ from: ok, to: f }), InvalidArgumentError, `resample to ${what}`);
    if (bad) {
      assert.throws(() => toWav(f), InvalidArgumentError, `toWav ${what}`);
      assert.throws(() => decode(f), InvalidArgumentError, `decode ${what}`);
      const input = { encoding: 's16le', ...f } as RawInputFormat;
      assert.throws(() => decode({ input }), InvalidArgumentError, `decode input ${what}`);
    }
  }
  const designs: ResamplerDesign[] = [
    { passband: 0 },
    { passband: 1 },
    { passband: Number.NaN },
    { stopbandDb: 0 },
    { stopbandDb: Number.POSITIVE_INFINITY },
    { maxPhases: 0 },
    { maxPhases: 2.5 },
  ];
  for (const design of designs) {
    const what = JSON.stringify(design, (_k, v) =>
      typeof v === 'number' && !Number.isFinite(v) ? String(v) : v,
    );
    assert.throws(() => new ResamplePlanner(ok, to, { design }), InvalidArgumentError, `planner ${what}`);
    assert.throws(() => new Resampler(ok, to, design), InvalidArgumentError, `Resampler ${what}`);
    assert.throws(() => resample({ from: ok, to, design }), InvalidArgumentError, `resample ${what}`);
    assert.throws(() => decode({ design }), InvalidArgumentError, `decode ${what}`);
  }
  for (const size of [0, -1, 2.5, Number.NaN]) {
    assert.throws(() => new ResamplePlanner(ok, to, { minTaskFrames: size }), InvalidArgumentError);
    assert.throws(() => new ResamplePlanner(ok, to, { maxTaskFrames: size }), InvalidArgumentError);
  }
});

test('a conversion whose filter tables would pass 64 MiB is refused up front, not designed for a minute in gigabytes', () => {
  const to = { sampleRate: 16000, channels: 1 };
  for (const sampleRate of [999_999_999, 123_456_789]) {
    const from = { sampleRate, channels: 1 };
    assert.throws(() => resample({ from, to }), InvalidArgumentError, `resample from ${sampleRate} Hz`);
    const input = { encoding: 's16le', ...from } as RawInputFormat;
    assert.throws(() => decode({ input }), InvalidArgumentError, `decode input ${sampleRate} Hz`);
  }
  // Every pair of common rates stays well inside the bound.
  const rates = [8000, 11025, 16000, 22050, 24000, 44100, 48000, 96000, 192000, 384000, 768000];
  for (const a of rates)
    for (const b of [8000, 16000, 24000, 48000])
      new ResamplePlanner({ sampleRate: a, channels: 1 }, { sampleRate: b, channels: 1 });
});
