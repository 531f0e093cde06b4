// Sums of squared PCM16 samples, the inner loop of speech region detection, vectorised with
// WebAssembly SIMD: uploads are analysed at the speed they arrive instead of at a JS loop's
// ~2 ns a sample. Samples are copied into the module's memory (aligned, whatever the
// alignment of the bytes they came in), so odd byte offsets cost a memcpy, not an allocation.

import { F64, I32, moduleBytes, op, V128, vec, webAssembly } from '../../audio/wasm-encoder.ts';

/**
 * The module, assembled with the shared encoder (src/audio/wasm-encoder.ts) from this text:
 *
 *   (module
 *     (memory (export "memory") 1)
 *     ;; Sum of v*v over n int16 samples at byte offset p; n a multiple of 8.
 *     (func (export "sumsq") (param $p i32) (param $n i32) (result f64)
 *       (local $end i32) (local $acc v128) (local $d v128)
 *       (local.set $end (i32.add (local.get $p) (i32.shl (i32.shr_u (local.get $n) (i32.const 3)) (i32.const 4))))
 *       (block $done (loop $next
 *         (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
 *         ;; a0*a0 + a1*a1 per i32 lane: at most 2^31, exact read as unsigned
 *         (local.set $d (i32x4.dot_i16x8_s (local.tee $d (v128.load (local.get $p))) (local.get $d)))
 *         (local.set $acc (i64x2.add (i64x2.add (local.get $acc) (i64x2.extend_low_i32x4_u (local.get $d)))
 *                                    (i64x2.extend_high_i32x4_u (local.get $d))))
 *         (local.set $p (i32.add (local.get $p) (i32.const 16)))
 *         (br $next)))
 *       (f64.convert_i64_u (i64.add (i64x2.extract_lane 0 (local.get $acc)) (i64x2.extract_lane 1 (local.get $acc))))))
 *
 * Every sum is an integer below 2^53 for any window it is used on (2^30 per sample), so it is
 * exactly the sum a JS loop over doubles computes.
 */
const [P, N, END, ACC, D] = [0, 1, 2, 3, 4];
const WASM = moduleBytes(1, [
  {
    params: [I32, I32],
    results: [F64],
    export: 'sumsq',
    body: [
      ...vec([
        [1, I32],
        [2, V128],
      ]),
      // $end = p + (n >> 3) * 16
      ...[...op.get(P), ...op.get(N), ...op.i32(3), ...op.i32ShrU, ...op.i32(4), ...op.i32Shl, ...op.i32Add],
      ...op.set(END),
      ...op.block,
      ...op.loop,
      ...[...op.get(P), ...op.get(END), ...op.i32GeU, ...op.brIf(1)],
      // $d = dot(v, v): a0*a0 + a1*a1 per i32 lane
      ...[...op.get(P), ...op.v128Load(), ...op.tee(D), ...op.get(D), ...op.i32x4DotI16x8S, ...op.set(D)],
      // $acc += extend_low_u($d) + extend_high_u($d)
      ...[...op.get(ACC), ...op.get(D), ...op.i64x2ExtendLowI32x4U, ...op.i64x2Add],
      ...[...op.get(D), ...op.i64x2ExtendHighI32x4U, ...op.i64x2Add, ...op.set(ACC)],
      ...[...op.get(P), ...op.i32(16), ...op.i32Add, ...op.set(P)],
      ...[...op.br(0), ...op.end, ...op.end],
      // the two lanes summed, to f64
      ...[...op.get(ACC), ...op.i64x2Lane(0), ...op.get(ACC), ...op.i64x2Lane(1), ...op.i64Add],
      ...op.f64ConvertI64U,
      ...op.end,
    ],
  },
]);

/** Bytes of samples the scratch area holds: one WebAssembly page. */
export const SCRATCH_BYTES = 65_536;

export interface Kernel {
  sumsq: (byteOffset: number, samples: number) => number;
  bytes: Uint8Array;
  samples: Int16Array;
}

let kernel: Kernel | undefined;

/**
 * The scratch area (shared by every caller in the thread: fill it and sum it in one
 * synchronous step) and the summing function over it.
 */
export function energyKernel(): Kernel {
  if (kernel) return kernel;
  const wasm = webAssembly();
  try {
    if (!wasm?.validate(WASM)) throw new Error('no WebAssembly SIMD');
    const { memory, sumsq } = new wasm.Instance(new wasm.Module(WASM)).exports as {
      memory: { buffer: ArrayBuffer };
      sumsq: (p: number, n: number) => number;
    };
    kernel = {
      sumsq,
      bytes: new Uint8Array(memory.buffer, 0, SCRATCH_BYTES),
      samples: new Int16Array(memory.buffer, 0, SCRATCH_BYTES / 2),
    };
  } catch {
    // No WebAssembly (--jitless) or no SIMD: the same sums by a JS loop.
    kernel = jsEnergyKernel();
  }
  return kernel;
}

/** The kernel as a JS loop over an ordinary scratch area: the same (exact) sums, slower. */
export function jsEnergyKernel(): Kernel {
  const buffer = new ArrayBuffer(SCRATCH_BYTES);
  const samples = new Int16Array(buffer);
  return {
    bytes: new Uint8Array(buffer),
    samples,
    sumsq(byteOffset, count) {
      let sum = 0;
      for (let j = byteOffset >> 1, end = j + count; j < end; j++) {
        const v = samples[j]!;
        sum += v * v;
      }
      return sum;
    },
  };
}

/** Sum of squares of `count` scratch samples from sample index `from`. */
export function scratchSumOfSquares(k: Kernel, from: number, count: number): number {
  const vector = count & ~7;
  let sum = vector > 0 ? k.sumsq(from * 2, vector) : 0;
  const samples = k.samples;
  for (let j = from + vector, end = from + count; j < end; j++) {
    const v = samples[j]!;
    sum += v * v;
  }
  return sum;
}
