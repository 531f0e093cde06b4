// Where the end-to-end pipeline's time goes: file → decode → toFrames → sttStream →
// assembleTranscript (bench/pipeline-run.ts, the emulator in its own process with the instant
// engine and no session rate limit) against pure ffmpeg decoding of the same file to the same
// PCM (16 kHz mono s16le), in the same run, alternating, median of 3. Reports wall and CPU
// seconds of each (the pipeline's own process with its ffmpeg child, and the emulator's), the
// ratios, the cost of starting a process that imports the library, and a CPU profile of one
// pipeline run grouped by what the time went to.
//
//   node bench/pipeline-profile.ts [--seconds 600] [--file PATH] [--source] [--json]
//
// The pipeline runs the built library (dist/, as users run it) when there is one (npm run
// build), the sources with --source or without dist/.

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { startEmulatorProcess } from './helpers/emulator-process.ts';
import { speechArchive } from './helpers/speech-archive.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '600' },
    file: { type: 'string' },
    json: { type: 'boolean', default: false },
    source: { type: 'boolean', default: false },
  },
});
const fromDist = !values.source && existsSync(join(ROOT, 'dist/index.js'));
if (fromDist) process.env.SPEECHPIPE_BENCH_DIST = '1';
const file = values.file ?? (await speechArchive(Number(values.seconds)));

interface Times {
  wall: number;
  cpu: number;
  stdout: string;
}

/** Wall and CPU seconds (user + system, its children included) of a command, by bash's `time`. */
function timed(command: string[]): Promise<Times> {
  const quoted = command.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  return new Promise((resolve, reject) => {
    execFile(
      'bash',
      ['-c', `TIMEFORMAT='%R %U %S'; time ${quoted} 2>/dev/null`],
      { cwd: ROOT, maxBuffer: 1 << 26, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`${command.join(' ')}: ${err.message}`));
        const [real, user, sys] = stderr.trim().split(/\s+/).map(Number) as [number, number, number];
        resolve({ wall: real, cpu: user + sys, stdout });
      },
    );
  });
}

/** CPU seconds a process has used so far (/proc/PID/stat utime + stime, Linux). */
async function cpuOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // clock ticks, 100 a second on Linux
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Self time of a .cpuprofile grouped into what it was spent on. */
async function profileGroups(dir: string): Promise<Array<[string, number]>> {
  const name = (await readdir(dir)).find((f) => f.endsWith('.cpuprofile'))!;
  const profile = JSON.parse(await readFile(join(dir, name), 'utf8')) as {
    nodes: Array<{ id: number; callFrame: { functionName: string; url: string } }>;
    samples: number[];
    timeDeltas: number[];
  };
  const group = (fn: string, url: string): string => {
    if (fn === '(idle)') return 'idle (waiting for the emulator, ffmpeg or the disk)';
    if (fn === '(garbage collector)') return 'garbage collection';
    if (/amaro|modules\/|bootstrap|compile|wrapSafe/.test(url + fn) || fn === 'Module')
      return 'loading modules (startup)';
    if (url.includes('/node_modules/undici/') || url.includes('deps/undici') || url.startsWith('wasm://'))
      return 'HTTP client (undici, llhttp)';
    if (/^(writev|writeBuffer|writeUtf8String|read|onStreamRead)$/.test(fn) || url.includes('stream_base'))
      return 'socket and pipe I/O (native)';
    if (url.includes('internal/streams') || url === 'node:events' || url.includes('task_queues'))
      return 'Node streams, events and ticks';
    if (url.includes('node:buffer')) return 'Buffer copies (concat, alloc)';
    const own = /\/(src|dist)\/(.*)\.(ts|js)$/.exec(url);
    if (own) return `speechpipe ${own[2]}`;
    if (url.includes('child_process')) return 'spawning ffmpeg';
    return 'other';
  };
  const byNode = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const totals = new Map<string, number>();
  for (const [i, id] of profile.samples.entries()) {
    const frame = byNode.get(id)!;
    const g = group(frame.functionName, frame.url);
    totals.set(g, (totals.get(g) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1e6);
  }
  return [...totals].sort((a, b) => b[1] - a[1]);
}

const emulator = await startEmulatorProcess({
  latency: 'instant',
  limits: { sessionAudioRateRealtime: 1e6, sessionAudioRateBurstBytes: 1e12 },
});
const profDir = await mkdtemp(join(tmpdir(), 'speechpipe-profile-'));
try {
  const node = process.execPath;
  const ffmpeg = [
    'ffmpeg',
    '-v',
    'error',
    '-i',
    file,
    '-f',
    's16le',
    '-ar',
    '16000',
    '-ac',
    '1',
    '-y',
    '/dev/null',
  ];
  const run = ['bench/pipeline-run.ts', 'pipeline', file, emulator.url, emulator.apiKey];
  const base: Times[] = [];
  const ours: Times[] = [];
  const emulatorCpu: number[] = [];
  const startup: Times[] = [];
  let audioSeconds = 0;
  for (let round = 0; round < 3; round++) {
    base.push(await timed(ffmpeg));
    const before = await cpuOf(emulator.pid);
    const t = await timed([node, ...run]);
    emulatorCpu.push((await cpuOf(emulator.pid)) - before);
    audioSeconds = (JSON.parse(t.stdout) as { audioSeconds: number }).audioSeconds;
    ours.push(t);
    const lib = fromDist ? './dist/index.js' : './src/index.ts';
    startup.push(await timed([node, '--input-type=module', '-e', `await import('${lib}')`]));
  }
  await timed([node, `--cpu-prof`, `--cpu-prof-dir=${profDir}`, ...run]);
  const groups = await profileGroups(profDir);
  const m = (xs: Times[], k: 'wall' | 'cpu') => median(xs.map((x) => x[k]));
  const report = {
    file,
    library: fromDist ? 'dist' : 'src',
    audioSeconds,
    ffmpeg: { wallSeconds: m(base, 'wall'), cpuSeconds: m(base, 'cpu') },
    pipeline: {
      wallSeconds: m(ours, 'wall'),
      cpuSeconds: m(ours, 'cpu'),
      emulatorCpuSeconds: median(emulatorCpu),
    },
    startup: { wallSeconds: m(startup, 'wall'), cpuSeconds: m(startup, 'cpu') },
    ratioWall: m(base, 'wall') / m(ours, 'wall'),
    ratioCpu: m(base, 'cpu') / m(ours, 'cpu'),
    profileSeconds: Object.fromEntries(groups.map(([g, s]) => [g, Number(s.toFixed(3))])),
  };
  if (values.json) console.log(JSON.stringify(report, null, 2));
  else {
    const f = (x: number) => x.toFixed(2).padStart(7);
    console.log(
      `${file}: ${audioSeconds.toFixed(0)} s of audio, median of 3 runs each; the library from ${fromDist ? 'dist/' : 'src/'}\n`,
    );
    console.log('                                  wall s    CPU s   audio s/s (wall)');
    console.log(
      `ffmpeg decoding alone          ${f(report.ffmpeg.wallSeconds)}  ${f(report.ffmpeg.cpuSeconds)}  ${f(audioSeconds / report.ffmpeg.wallSeconds)}`,
    );
    console.log(
      `pipeline (its process + ffmpeg) ${f(report.pipeline.wallSeconds)}  ${f(report.pipeline.cpuSeconds)}  ${f(audioSeconds / report.pipeline.wallSeconds)}`,
    );
    console.log(`  the emulator, meanwhile                ${f(report.pipeline.emulatorCpuSeconds)}`);
    console.log(
      `  of which: a process importing speechpipe ${f(report.startup.wallSeconds)} wall, ${f(report.startup.cpuSeconds)} CPU`,
    );
    console.log(
      `\nratio ffmpeg / pipeline: wall ${report.ratioWall.toFixed(2)}, CPU ${report.ratioCpu.toFixed(2)}\n`,
    );
    console.log('one pipeline run under --cpu-prof, self time by what it went to:');
    const total = groups.reduce((a, [, s]) => a + s, 0);
    for (const [g, s] of groups.slice(0, 16))
      console.log(`${s.toFixed(3).padStart(8)} s ${((100 * s) / total).toFixed(1).padStart(5)}%  ${g}`);
  }
} finally {
  await emulator.stop();
  await rm(profDir, { recursive: true, force: true });
}
