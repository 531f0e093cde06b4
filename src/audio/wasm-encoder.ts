// A small WebAssembly encoder: the few opcodes our SIMD kernels use, by name, and a module of
// one memory and some functions. The kernels (the resampler's FIR filters, the emulator's speech
// energies) are assembled from it at load time: no binary in the repo and no build step, so
// source, dist/ and the installed package run the same code.

/** Unsigned LEB128. */
export function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

/** Signed LEB128 of a 32-bit integer. */
export function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (byte & 0x40) === 0) || (n === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

/** A vector: its length, then its items. */
export const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
/** A section: its id, its size, its body. */
export const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
/** A name: its length, then its bytes (ASCII). */
export const name = (s: string): number[] => [...uleb(s.length), ...Array.from(s, (c) => c.charCodeAt(0))];

/** Value types. */
export const I32 = 0x7f;
export const I64 = 0x7e;
export const F64 = 0x7c;
export const V128 = 0x7b;

// The instructions used, by name. Memory accesses take (align log2, offset).
export const op = {
  block: [0x02, 0x40],
  loop: [0x03, 0x40],
  if: [0x04, 0x40],
  end: [0x0b],
  br: (depth: number) => [0x0c, ...uleb(depth)],
  brIf: (depth: number) => [0x0d, ...uleb(depth)],
  get: (i: number) => [0x20, ...uleb(i)],
  set: (i: number) => [0x21, ...uleb(i)],
  tee: (i: number) => [0x22, ...uleb(i)],
  f32Store: (offset = 0) => [0x38, 2, ...uleb(offset)],
  i32: (n: number) => [0x41, ...sleb(n)],
  i32Eqz: [0x45],
  i32LtU: [0x49],
  i32GeU: [0x4f],
  i32Add: [0x6a],
  i32Sub: [0x6b],
  i32Mul: [0x6c],
  i32Shl: [0x74],
  i32ShrU: [0x76],
  i64Add: [0x7c],
  f64Ge: [0x66],
  f32Add: [0x92],
  f32Sub: [0x93],
  f32Mul: [0x94],
  f64Floor: [0x9c],
  f64Add: [0xa0],
  f64Sub: [0xa1],
  f64Mul: [0xa2],
  f64Div: [0xa3],
  i32TruncF64S: [0xaa],
  f64ConvertI32S: [0xb7],
  f32DemoteF64: [0xb6],
  f64ConvertI64U: [0xba],
  v128Load: (offset = 0) => [0xfd, ...uleb(0x00), 0, ...uleb(offset)],
  v128Zero: [0xfd, ...uleb(0x0c), ...new Array<number>(16).fill(0)],
  f32x4Lane: (lane: number) => [0xfd, ...uleb(0x1f), lane],
  f32x4Add: [0xfd, ...uleb(0xe4)],
  f32x4Mul: [0xfd, ...uleb(0xe6)],
  i64x2Lane: (lane: number) => [0xfd, ...uleb(0x1d), lane],
  i32x4DotI16x8S: [0xfd, ...uleb(0xba)],
  i64x2ExtendLowI32x4U: [0xfd, ...uleb(0xc9)],
  i64x2ExtendHighI32x4U: [0xfd, ...uleb(0xca)],
  i64x2Add: [0xfd, ...uleb(0xce)],
};

/** A function: its parameter and result types and its body. */
export interface WasmFunction {
  params: number[];
  results: number[];
  /** Its locals (`vec` of [count, type] runs), instructions and final `end`. */
  body: number[];
  /** The name it is exported by. */
  export: string;
}

/** A module of one memory (`pages` of 64 KiB, exported as `memory`) and `functions`, each exported. */
export function moduleBytes(pages: number, functions: readonly WasmFunction[]): Uint8Array {
  const code = functions.map((f) => [...uleb(f.body.length), ...f.body]);
  return new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(
      1,
      vec(functions.map((f) => [0x60, ...vec(f.params.map((t) => [t])), ...vec(f.results.map((t) => [t]))])),
    ),
    ...section(3, vec(functions.map((_, i) => uleb(i)))),
    ...section(5, vec([[0x00, ...uleb(pages)]])),
    ...section(
      7,
      vec([[...name('memory'), 0x02, 0], ...functions.map((f, i) => [...name(f.export), 0x00, ...uleb(i)])]),
    ),
    ...section(10, vec(code)),
  ]);
}

/** The little of the WebAssembly API used here (its types come with the DOM lib, not Node's). */
export interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { exports: unknown };
}

/** This runtime's WebAssembly, if it has one. */
export function webAssembly(): WasmApi | undefined {
  return (globalThis as { WebAssembly?: WasmApi }).WebAssembly;
}
