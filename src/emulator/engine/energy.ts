// Sums of squared PCM16 samples, the inner loop of speech region detection, vectorised with
// WebAssembly SIMD: uploads are analysed at the speed they arrive instead of at a JS loop's
// ~2 ns a sample. Samples are copied into the module's memory (aligned, whatever the
// alignment of the bytes they came in), so odd byte offsets cost a memcpy, not an allocation.

/**
 * The module, assembled by hand (it is small enough to read):
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
// biome-ignore format: the bytes are laid out by section and instruction
const WASM = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
  // type: (i32, i32) -> f64
  0x01, 0x07, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7c,
  // function 0 of type 0
  0x03, 0x02, 0x01, 0x00,
  // memory: 1 page
  0x05, 0x03, 0x01, 0x00, 0x01,
  // exports: "memory", "sumsq"
  0x07, 0x12, 0x02,
  0x06, 0x6d, 0x65, 0x6d, 0x6f, 0x72, 0x79, 0x02, 0x00,
  0x05, 0x73, 0x75, 0x6d, 0x73, 0x71, 0x00, 0x00,
  // code: one body of 0x58 bytes
  0x0a, 0x5a, 0x01, 0x58,
  0x02, 0x01, 0x7f, 0x02, 0x7b, // locals: i32 $end, v128 $acc $d
  0x20, 0x00, 0x20, 0x01, 0x41, 0x03, 0x76, 0x41, 0x04, 0x74, 0x6a, 0x21, 0x02, // $end
  0x02, 0x40, 0x03, 0x40, // block, loop
  0x20, 0x00, 0x20, 0x02, 0x4f, 0x0d, 0x01, // br_if $done (p >= end)
  0x20, 0x00, 0xfd, 0x00, 0x00, 0x00, 0x22, 0x04, 0x20, 0x04, 0xfd, 0xba, 0x01, 0x21, 0x04, // $d = dot(v, v)
  0x20, 0x03, 0x20, 0x04, 0xfd, 0xc9, 0x01, 0xfd, 0xce, 0x01, // $acc + extend_low_u($d)
  0x20, 0x04, 0xfd, 0xca, 0x01, 0xfd, 0xce, 0x01, 0x21, 0x03, // + extend_high_u($d)
  0x20, 0x00, 0x41, 0x10, 0x6a, 0x21, 0x00, // p += 16
  0x0c, 0x00, 0x0b, 0x0b, // br $next, end, end
  0x20, 0x03, 0xfd, 0x1d, 0x00, 0x20, 0x03, 0xfd, 0x1d, 0x01, 0x7c, 0xba, // lanes summed, to f64
  0x0b,
]);

/** Bytes of samples the scratch area holds: one WebAssembly page. */
export const SCRATCH_BYTES = 65_536;

interface Kernel {
  sumsq: (byteOffset: number, samples: number) => number;
  bytes: Uint8Array;
  samples: Int16Array;
}

interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { exports: object };
}

let kernel: Kernel | undefined;

/**
 * The scratch area (shared by every caller in the thread: fill it and sum it in one
 * synchronous step) and the summing function over it.
 */
export function energyKernel(): Kernel {
  if (kernel) return kernel;
  // The compiler's lib (es2023, Node types) does not declare WebAssembly; Node has it.
  const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
  const { memory, sumsq } = new wasm.Instance(new wasm.Module(WASM)).exports as {
    memory: { buffer: ArrayBuffer };
    sumsq: (p: number, n: number) => number;
  };
  kernel = {
    sumsq,
    bytes: new Uint8Array(memory.buffer, 0, SCRATCH_BYTES),
    samples: new Int16Array(memory.buffer, 0, SCRATCH_BYTES / 2),
  };
  return kernel;
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
