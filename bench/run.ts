// `npm run bench [-- name-filter ...] [-- --check]`: runs every benchmark suite and prints
// throughput and ratios against the baseline measured in the same run. Each suite runs in a
// process of its own, so one suite's heap and JIT state cannot bias another's. `--check` exits
// 1 when a result misses its target.

import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { type Comparison, formatTable, meets } from './harness.ts';

const exec = promisify(execFile);
const args = process.argv.slice(2);
const check = args.includes('--check');
const filters = args.filter((a) => !a.startsWith('--'));
const suites = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.bench.ts'))
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();

const suiteArg = args.find((a) => a.startsWith('--suite='));
if (suiteArg) {
  // Child mode: run one suite, report its results as JSON on the last line.
  const mod = (await import(new URL(suiteArg.slice(8), import.meta.url).href)) as {
    run(): Promise<Comparison[]>;
  };
  process.stdout.write(`${JSON.stringify(await mod.run())}\n`);
  process.exit(0);
}

const all: Comparison[] = [];
for (const file of suites) {
  console.log(`\n# ${file} (node ${process.version}, ${new Date().toISOString()})`);
  const { stdout } = await exec(process.execPath, [fileURLToPath(import.meta.url), `--suite=${file}`], {
    maxBuffer: 1 << 26,
  });
  const lines = stdout.trimEnd().split('\n');
  if (lines.length > 1) console.log(lines.slice(0, -1).join('\n'));
  const results = JSON.parse(lines.at(-1)!) as Comparison[];
  console.log(formatTable(results));
  all.push(...results);
}
const below = all.filter((r) => !meets(r));
if (below.length > 0) {
  console.log(`\n${below.length} below target: ${below.map((r) => r.name).join('; ')}`);
  if (check) process.exitCode = 1;
}
