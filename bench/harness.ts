// Benchmark harness: run ours and a baseline in alternating rounds in the same process and
// report throughput and the ratio (median of rounds), so machine noise hits both alike.

export interface Comparison {
  /** What is compared, e.g. `parseNdjson vs split2+JSON.parse`. */
  name: string;
  /** Throughput unit, e.g. `MB/s` or `audio s/s`. */
  unit: string;
  ours: number;
  baseline: number;
  /** ours / baseline (higher is better). */
  ratio: number;
  /** Minimum acceptable ratio, when the issue sets one. */
  target?: number;
  /** Minimum acceptable absolute value of `ours`, when the issue sets one. */
  minimum?: number;
  note?: string;
}

/** Whether a result meets its ratio target and absolute minimum (true when it has neither). */
export function meets(r: Comparison): boolean {
  return (r.target === undefined || r.ratio >= r.target) && (r.minimum === undefined || r.ours >= r.minimum);
}

export interface CompareOptions {
  name: string;
  /** Work units (bytes, seconds of audio...) one call processes. */
  units: number;
  unit?: string;
  /** Divisor to report units (1e6 for MB/s). */
  scale?: number;
  ours: () => unknown | Promise<unknown>;
  baseline: () => unknown | Promise<unknown>;
  rounds?: number;
  /** Minimum time per round. */
  minMs?: number;
  target?: number;
  note?: string;
}

async function timeRound(fn: () => unknown | Promise<unknown>, minMs: number): Promise<number> {
  let calls = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  do {
    await fn();
    calls++;
    elapsed = Number(process.hrtime.bigint() - start) / 1e6;
  } while (elapsed < minMs);
  return calls / (elapsed / 1000);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
};

export async function compare(options: CompareOptions): Promise<Comparison> {
  const rounds = options.rounds ?? 7;
  const minMs = options.minMs ?? 250;
  const scale = options.scale ?? 1e6;
  // Warm both up so the JIT has seen each before measuring.
  await timeRound(options.ours, Math.min(100, minMs));
  await timeRound(options.baseline, Math.min(100, minMs));
  const ours: number[] = [];
  const base: number[] = [];
  for (let r = 0; r < rounds; r++) {
    ours.push(await timeRound(options.ours, minMs));
    base.push(await timeRound(options.baseline, minMs));
  }
  const o = (median(ours) * options.units) / scale;
  const b = (median(base) * options.units) / scale;
  const result: Comparison = {
    name: options.name,
    unit: options.unit ?? 'MB/s',
    ours: o,
    baseline: b,
    ratio: o / b,
  };
  if (options.target !== undefined) result.target = options.target;
  if (options.note !== undefined) result.note = options.note;
  return result;
}

export function formatTable(results: Comparison[]): string {
  const rows = results.map((r) => [
    r.name,
    `${r.ours.toFixed(1)} ${r.unit}`,
    `${r.baseline.toFixed(1)} ${r.unit}`,
    r.ratio.toFixed(2),
    [
      r.target === undefined ? '' : `ratio >= ${r.target}`,
      r.minimum === undefined ? '' : `>= ${r.minimum} ${r.unit}`,
    ]
      .filter(Boolean)
      .join(', '),
    r.target === undefined && r.minimum === undefined ? '' : meets(r) ? 'ok' : 'BELOW',
    r.note ?? '',
  ]);
  const head = ['benchmark', 'speechpipe', 'baseline', 'ratio', 'target', '', 'note'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
