// `npm run bench [-- name-filter ...] [-- --check]`: runs every benchmark suite and prints
// throughput and ratios against the baseline measured in the same run. `--check` exits 1 when
// a ratio is below its target.

import { readdirSync } from 'node:fs';
import { type Comparison, formatTable, meets } from './harness.ts';

const args = process.argv.slice(2);
const check = args.includes('--check');
const filters = args.filter((a) => !a.startsWith('--'));
const suites = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();

const all: Comparison[] = [];
for (const file of suites) {
  const mod = (await import(new URL(file, import.meta.url).href)) as { run(): Promise<Comparison[]> };
  console.log(`\n# ${file} (node ${process.version}, ${new Date().toISOString()})`);
  const results = await mod.run();
  console.log(formatTable(results));
  all.push(...results);
}
const below = all.filter((r) => !meets(r));
if (below.length > 0) {
  console.log(`\n${below.length} below target: ${below.map((r) => r.name).join('; ')}`);
  if (check) process.exitCode = 1;
}
