// The filter tables of one rate conversion: made by resampler.ts, run by its JS loop or by the
// WebAssembly one (fir-wasm.ts).

/**
 * The filter tables of one rate conversion, shareable between resamplers (and sent to worker
 * threads by value: its fields are plain numbers and one Float32Array).
 */
export interface ResamplerKernel {
  inRate: number;
  outRate: number;
  /** Reduced ratio: L output steps per M input steps. */
  up: number;
  /** Reduced ratio: M input steps per L output steps. */
  down: number;
  /** Number of tables; equals `up` when exact, else tables are interpolated. */
  phases: number;
  /** Whether there is one table per phase (`phases === up`). */
  exact: boolean;
  /** Half width in input samples: output at time t reads inputs floor(t)-half+1 .. floor(t)+half. */
  half: number;
  /** (phases + 1) rows of 2*half coefficients, row p for phase p/phases. */
  coeffs: Float32Array;
}
