// The resampler's FIR dot products as WebAssembly SIMD (f32x4), about 4x the scalar JS loop. The
// module is assembled here, at load time, from the few opcodes it needs: no binary in the repo
// and no build step, so source, dist/ and the installed package all run the same code.
// `firWasm()` is null where WebAssembly SIMD is missing (or `--jitless`), or when
// SPEECHPIPE_RESAMPLER_SIMD=0 asks for the JS loop; the resampler then uses that.

import type { ResamplerKernel } from './resampler-kernel.ts';
import { F64, I32, moduleBytes, op, V128, vec, webAssembly } from './wasm-encoder.ts';

/** Sum of the four lanes of the v128 in local `v`, as ((0 + 1) + (2 + 3)) in f32. */
const laneSum = (v: number): number[] => [
  ...op.get(v),
  ...op.f32x4Lane(0),
  ...op.get(v),
  ...op.f32x4Lane(1),
  ...op.f32Add,
  ...op.get(v),
  ...op.f32x4Lane(2),
  ...op.get(v),
  ...op.f32x4Lane(3),
  ...op.f32Add,
  ...op.f32Add,
];

/** local += n (i32). */
const addTo = (local: number, n: number): number[] => [
  ...op.get(local),
  ...op.i32(n),
  ...op.i32Add,
  ...op.set(local),
];

/** acc += load(a + offset) * b, for v128 local `acc`, address local `a` and the code pushing `b`. */
const multiplyAdd = (acc: number, a: number[], b: number[]): number[] => [
  ...op.get(acc),
  ...a,
  ...b,
  ...op.f32x4Mul,
  ...op.f32x4Add,
  ...op.set(acc),
];

/** Bytes of coefficients per inner-loop step: two f32x4 accumulators per row. */
export const TAP_BLOCK = 8;

// Parameters shared by both functions: pointers are byte offsets into memory.
const COEF = 0;
const ROW_BYTES = 1;
const INPUT = 2;
const OUT = 3;
const COUNT = 4;
const FRAC = 5;
const STEP_BYTES = 6;
const STEP_FRAC = 7;
const UP = 8;

/**
 * A function's body: locals, then for each of `count` outputs, `output` (which leaves the value
 * on the stack) stored at `out`; then input += stepBytes, frac += stepFrac, and once frac reaches
 * `up` (i32 or f64, as `fracType` says), frac -= up and one more input sample.
 */
function outputLoop(locals: number[][], output: number[], fracType: number): number[] {
  const [add, sub, ge] =
    fracType === I32 ? [op.i32Add, op.i32Sub, op.i32GeU] : [op.f64Add, op.f64Sub, op.f64Ge];
  return [
    ...vec(locals),
    ...op.block,
    ...op.loop,
    ...op.get(COUNT),
    ...op.i32Eqz,
    ...op.brIf(1),
    ...op.get(OUT),
    ...output,
    ...op.f32Store(),
    ...addTo(OUT, 4),
    ...op.get(INPUT),
    ...op.get(STEP_BYTES),
    ...op.i32Add,
    ...op.set(INPUT),
    ...op.get(FRAC),
    ...op.get(STEP_FRAC),
    ...add,
    ...op.set(FRAC),
    ...op.get(FRAC),
    ...op.get(UP),
    ...ge,
    ...op.if,
    ...op.get(FRAC),
    ...op.get(UP),
    ...sub,
    ...op.set(FRAC),
    ...addTo(INPUT, 4),
    ...op.end,
    ...addTo(COUNT, -1),
    ...op.br(0),
    ...op.end,
    ...op.end,
    ...op.end,
  ];
}

/**
 * Set p = coef + (row) * rowBytes with `row` the code pushing the row number, q = input and
 * end = p + rowBytes, and zero the accumulators.
 */
const startRow = (row: number[], p: number, q: number, end: number, accs: number[]): number[] => [
  ...op.get(COEF),
  ...row,
  ...op.get(ROW_BYTES),
  ...op.i32Mul,
  ...op.i32Add,
  ...op.set(p),
  ...op.get(INPUT),
  ...op.set(q),
  ...op.get(p),
  ...op.get(ROW_BYTES),
  ...op.i32Add,
  ...op.set(end),
  ...accs.flatMap((acc) => [...op.v128Zero, ...op.set(acc)]),
];

/**
 * `exact(coef, rowBytes, input, out, count, frac, stepBytes, stepFrac, up)`: each output is the
 * dot product of row `frac` (rowBytes long, a multiple of 32) with the input from `input`.
 */
function exactBody(): number[] {
  const [p, q, end, acc0, acc1] = [9, 10, 11, 12, 13];
  const output = [
    ...startRow(op.get(FRAC), p, q, end, [acc0, acc1]),
    ...op.loop,
    ...multiplyAdd(acc0, [...op.get(p), ...op.v128Load()], [...op.get(q), ...op.v128Load()]),
    ...multiplyAdd(acc1, [...op.get(p), ...op.v128Load(16)], [...op.get(q), ...op.v128Load(16)]),
    ...addTo(q, 32),
    ...addTo(p, 32),
    ...op.get(p),
    ...op.get(end),
    ...op.i32LtU,
    ...op.brIf(0),
    ...op.end,
    ...op.get(acc0),
    ...op.get(acc1),
    ...op.f32x4Add,
    ...op.set(acc0),
    ...laneSum(acc0),
  ];
  return outputLoop(
    [
      [3, I32],
      [2, V128],
    ],
    output,
    I32,
  );
}

/**
 * `interpolated(coef, rowBytes, input, out, count, frac, stepBytes, stepFrac, up, phases)`: as
 * `exact`, but `frac`, `stepFrac` and `up` are f64 (any rate fits), and each output is the
 * linear blend a + (b - a) * x of rows p and p + 1, p + x = frac * phases / up, as the JS loop.
 */
function interpolatedBody(): number[] {
  const PHASES = 9;
  const [p, q, end, x, row, accA, accB, s] = [10, 11, 12, 13, 14, 15, 16, 17];
  const output = [
    ...op.get(FRAC),
    ...op.get(PHASES),
    ...op.f64Mul,
    ...op.get(UP),
    ...op.f64Div,
    ...op.set(x),
    ...op.get(x),
    ...op.f64Floor,
    ...op.i32TruncF64S,
    ...op.set(row),
    ...op.get(x),
    ...op.get(row),
    ...op.f64ConvertI32S,
    ...op.f64Sub,
    ...op.set(x),
    ...startRow(op.get(row), p, q, end, [accA, accB]),
    ...op.loop,
    ...op.get(q),
    ...op.v128Load(),
    ...op.set(s),
    ...multiplyAdd(accA, [...op.get(p), ...op.v128Load()], op.get(s)),
    ...multiplyAdd(accB, [...op.get(p), ...op.get(ROW_BYTES), ...op.i32Add, ...op.v128Load()], op.get(s)),
    ...addTo(q, 16),
    ...addTo(p, 16),
    ...op.get(p),
    ...op.get(end),
    ...op.i32LtU,
    ...op.brIf(0),
    ...op.end,
    ...laneSum(accA),
    ...laneSum(accB),
    ...laneSum(accA),
    ...op.f32Sub,
    ...op.get(x),
    ...op.f32DemoteF64,
    ...op.f32Mul,
    ...op.f32Add,
  ];
  return outputLoop(
    [
      [3, I32],
      [1, F64],
      [1, I32],
      [3, V128],
    ],
    output,
    F64,
  );
}

/** The module: one memory and the two functions, exported as `memory`, `exact`, `interpolated`. */
export function firModuleBytes(): Uint8Array {
  return moduleBytes(1, [
    { params: new Array<number>(9).fill(I32), results: [], body: exactBody(), export: 'exact' },
    {
      params: [I32, I32, I32, I32, I32, F64, I32, F64, F64, F64],
      results: [],
      body: interpolatedBody(),
      export: 'interpolated',
    },
  ]);
}

interface FirExports {
  memory: { buffer: ArrayBuffer; grow(pages: number): number };
  /** The functions above, arguments as documented there. */
  exact(...args: number[]): void;
  interpolated(...args: number[]): void;
}

let instance: FirExports | null | undefined;

/** The compiled kernels, or null when WebAssembly SIMD cannot run here or is switched off. */
export function firWasm(): FirExports | null {
  if (instance !== undefined) return instance;
  instance = null;
  if (process.env.SPEECHPIPE_RESAMPLER_SIMD === '0') return instance;
  const wasm = webAssembly();
  try {
    const bytes = firModuleBytes();
    if (!wasm?.validate(bytes)) return instance;
    instance = new wasm.Instance(new wasm.Module(bytes)).exports as FirExports;
  } catch {
    // No WebAssembly compiler (--jitless) or no SIMD: the JS loop serves.
  }
  return instance;
}

/** Outputs per call into WebAssembly, and input samples copied in for them, at most. */
const BLOCK_OUTPUTS = 8192;
const BLOCK_INPUTS = 1 << 17;
/** Coefficient tables kept in WebAssembly memory; past this they are dropped and copied anew. */
const TABLE_BYTES = 64 << 20;

interface Table {
  generation: number;
  at: number;
  rowFloats: number;
}

/**
 * Runs kernels in one WebAssembly instance (one per thread): coefficient tables are copied in
 * once, rows padded with zeros to whole 8-float blocks; each call copies a bounded block of input
 * in and the outputs out, so memory stays bounded however large a task is.
 */
class FirRunner {
  readonly #x: FirExports;
  #heap: Float32Array;
  readonly #tables = new WeakMap<ResamplerKernel, Table>();
  #generation = 0;
  /** Bytes of memory in use by tables; scratch space follows. */
  #top = 0;

  constructor(x: FirExports) {
    this.#x = x;
    this.#heap = new Float32Array(x.memory.buffer);
  }

  #reserve(bytes: number): void {
    const have = this.#x.memory.buffer.byteLength;
    if (bytes > have) {
      this.#x.memory.grow(Math.ceil((bytes - have) / 65536));
      this.#heap = new Float32Array(this.#x.memory.buffer);
    }
  }

  #table(kernel: ResamplerKernel): Table | null {
    const known = this.#tables.get(kernel);
    if (known && known.generation === this.#generation) return known;
    const taps = 2 * kernel.half;
    const rowFloats = Math.ceil(taps / TAP_BLOCK) * TAP_BLOCK;
    const rows = kernel.phases + 1;
    const bytes = rows * rowFloats * 4;
    if (bytes > TABLE_BYTES) return null;
    if (this.#top + bytes > TABLE_BYTES) {
      this.#generation++;
      this.#top = 0;
    }
    const table = { generation: this.#generation, at: this.#top, rowFloats };
    this.#reserve(this.#top + bytes);
    const heap = this.#heap;
    const base = table.at / 4;
    heap.fill(0, base, base + rows * rowFloats);
    for (let r = 0; r < rows; r++) {
      heap.set(kernel.coeffs.subarray(r * taps, (r + 1) * taps), base + r * rowFloats);
    }
    this.#top += bytes;
    this.#tables.set(kernel, table);
    return table;
  }

  /**
   * `resampleChannel` in WebAssembly. False, and nothing done, for a call outside its promise
   * (every window inside `input`) or a kernel too big for the table space: the JS loop does those.
   */
  run(
    kernel: ResamplerKernel,
    input: Float32Array,
    base: number,
    pos: number,
    frac: number,
    count: number,
    out: Float32Array,
    outOffset: number,
  ): boolean {
    const { up, down, half, phases, exact } = kernel;
    const stepPos = Math.floor(down / up);
    const stepFrac = down % up;
    const lastPos = pos + stepPos * (count - 1) + Math.floor((frac + stepFrac * (count - 1)) / up);
    if (count < 1 || pos - half + 1 < base || lastPos + half > base + input.length - 1) return false;
    // Within TABLE_BYTES, every row offset (frac * rowBytes) fits the i32 arithmetic.
    const table = this.#table(kernel);
    if (!table) return false;
    const { rowFloats } = table;
    // Outputs per block: as many as BLOCK_INPUTS samples of input serve.
    const block = Math.min(BLOCK_OUTPUTS, Math.floor((BLOCK_INPUTS - rowFloats) / (stepPos + 1)));
    if (block < 1) return false;
    const inAt = this.#top;
    const outAt = inAt + BLOCK_INPUTS * 4;
    this.#reserve(outAt + BLOCK_OUTPUTS * 4);
    const heap = this.#heap;
    const rowBytes = rowFloats * 4;
    for (let done = 0; done < count; ) {
      const n = Math.min(block, count - done);
      // Inputs read by outputs done .. done + n - 1, zeros past the last (its row padding).
      const first = pos - half + 1 - base;
      const blockLast = pos + stepPos * (n - 1) + Math.floor((frac + stepFrac * (n - 1)) / up);
      const end = blockLast - half + 1 - base + rowFloats;
      const have = Math.min(end, input.length);
      heap.set(input.subarray(first, have), inAt / 4);
      heap.fill(0, inAt / 4 + have - first, inAt / 4 + end - first);
      if (exact) {
        this.#x.exact(table.at, rowBytes, inAt, outAt, n, frac, stepPos * 4, stepFrac, up);
      } else {
        this.#x.interpolated(table.at, rowBytes, inAt, outAt, n, frac, stepPos * 4, stepFrac, up, phases);
      }
      out.set(heap.subarray(outAt / 4, outAt / 4 + n), outOffset + done);
      const total = frac + stepFrac * n;
      pos += stepPos * n + Math.floor(total / up);
      frac = total % up;
      done += n;
    }
    return true;
  }
}

let runner: FirRunner | null | undefined;

/** The WebAssembly runner of this thread, or null when the JS loop must serve. */
export function wasmFirRunner(): FirRunner | null {
  if (runner === undefined) {
    const x = firWasm();
    runner = x ? new FirRunner(x) : null;
  }
  return runner;
}
