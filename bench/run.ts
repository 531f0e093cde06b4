// `npm run bench [-- FILTER...] [-- --check]`: runs the benchmark suites (every one, or those
// whose file name contains a FILTER) and prints throughput and ratios against the baseline
// measured in the same run. Each suite runs in a process of its own, so one suite's heap and
// JIT state cannot bias another's. `--check` exits 1 when a result misses its target; `--help`
// says this and lists the suites.

import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseCommandArgs, UsageError } from '../src/cli/usage.ts';
import { type Comparison, formatTable, meets } from './harness.ts';

const exec = promisify(execFile);
const SUITES = readdirSync(new URL('.', import.meta.url))
  .filter((f) => f.endsWith('.bench.ts'))
  .sort();

const USAGE = `usage: npm run bench [-- FILTER...] [-- --check]

Runs the benchmark suites bench/*.bench.ts, each in a process of its own, and prints each
result against its baseline measured in the same run, as a ratio with its target.

  FILTER     run only the suites whose file name contains FILTER (any number), e.g.
             npm run bench -- decode
  --check    exit 1 when a result misses its target
  --help     print this and exit

Suites: ${SUITES.map((f) => f.replace(/\.bench\.ts$/, '')).join(', ')}
The emulator suite reads BENCH_ONLY=live|upload (one of its two parts), BENCH_WORKERS=N
(server threads, default 1) and BENCH_GENERATORS=N (load processes, default 2).
The scripts beside the suites run alone: node bench/<name>.ts (Node 24: from npm scripts, or
PATH=$PWD/node_modules/.bin:$PATH).
`;

function parseBenchArgs() {
  return parseCommandArgs({
    args: process.argv.slice(2),
    allowPositionals: true,
    options: {
      check: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      // Child mode: run this one suite file and report its results as JSON on the last line.
      suite: { type: 'string' },
    },
  });
}

/** A mistake in the command line: said on stderr with where the help is, exit 2. */
function badUsage(message: string): never {
  process.stderr.write(`bench: ${message}\nRun "npm run bench -- --help" for the options and suites.\n`);
  process.exit(2);
}

let parsed: ReturnType<typeof parseBenchArgs>;
try {
  parsed = parseBenchArgs();
} catch (err) {
  if (!(err instanceof UsageError)) throw err;
  badUsage(err.message);
}
const { values, positionals: filters } = parsed;

if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

if (values.suite !== undefined) {
  const mod = (await import(new URL(values.suite, import.meta.url).href)) as {
    run(): Promise<Comparison[]>;
  };
  process.stdout.write(`${JSON.stringify(await mod.run())}\n`);
  process.exit(0);
}

const suites = SUITES.filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)));
if (suites.length === 0) badUsage(`no suite matches ${filters.join(', ')}`);
const check = values.check === true;

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
