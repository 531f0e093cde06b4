// `speechpipe bench`: a throughput and latency benchmark of one workload against API_URL, or
// against the emulator started for it in a process of its own (so the client's CPU figure is
// the client's alone). It sends only to the address given (API_URL) or to that emulator.

import { spawn } from 'node:child_process';
import { readFile, stat, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { addAbortSignal } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { type BenchClip, builtinMedia, loadMedia } from '../benchmark/media.ts';
import { compareReports, formatReport, renderHtml, renderSvg } from '../benchmark/report.ts';
import {
  BENCH_WORKLOADS,
  type BenchReport,
  type BenchWorkload,
  MAX_DURATION_SEC,
  runBench,
} from '../benchmark/run.ts';
import { createClient, type SpeechClient } from '../client/index.ts';
import { isAuthFailure } from '../client/retry.ts';
import { SpeechpipeError, type SpeechServiceError } from '../protocol/errors.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import { badUsage, parseCommandArgs, UsageError } from './usage.ts';

export const USAGE = `usage: speechpipe bench --workload live|diarization|fast|batch|tts [--transport http|socketio]
                       (--concurrency N | --rate R) --duration SEC [options]
       speechpipe bench --compare A.json B.json

  --workload W          live ASR, live diarization, fast, batch or TTS
  --transport T         http or socketio (default http; batch: http only)
  --concurrency N       closed loop: N operations at once, each starting when one ends
  --rate R              open loop: R new operations (streams, requests) a second, on schedule
                        whatever the service does; latency counts from when each was due
  --duration SEC        how long operations start; those in flight then get 10 s, then are cut
                        (and count in the latencies at their age then)
  --warmup SEC          run but do not count the first SEC seconds (default 0)
  --pace X              live and diarization: audio at X times real time (default 1)
  --media PATH          a media file or directory (default: a built-in spoken set, espeak-ng)
  --language L          auto, en, ar, codeswitch (default en)
  --json                print the report as one JSON object on stdout (latency in ms:
                        p50, p90, p99, p999, max)
  --report FILE.html    write the report with latency over time and its distribution
                        (FILE.svg: the same pictures as one SVG)
  --compare A.json B.json
                        two --json reports side by side with B's change against A

Talks to API_URL with API_KEY, or to an emulator started for the run (its own process) when
API_URL is not set; never to any other address. Ctrl-C stops the run with a partial report.
Exit code: 0 when the run ended (errors are in the report), 1 when no operation completed,
2 on bad usage or environment (a key the service refuses stops the run at the first refusal),
130 when interrupted (after the partial report).`;

interface Parsed {
  workload: BenchWorkload;
  transport: 'http' | 'socketio';
  concurrency?: number;
  rate?: number;
  durationSec: number;
  warmupSec: number;
  pace: number;
  media?: string;
  language: Language;
  json: boolean;
  report?: string;
}

function number(name: string, value: string | undefined, integer = false): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || (integer && !Number.isSafeInteger(n)))
    throw new UsageError(`--${name} must be a positive ${integer ? 'integer' : 'number'}, got ${value}`);
  return n;
}

function parse(values: Record<string, string | boolean | undefined>): Parsed {
  const workload = values.workload as BenchWorkload | undefined;
  if (!workload) throw new UsageError('--workload is required');
  if (!BENCH_WORKLOADS.includes(workload)) throw new UsageError(`unknown --workload ${workload}`);
  const transport = (values.transport as string | undefined) ?? 'http';
  if (transport !== 'http' && transport !== 'socketio')
    throw new UsageError(`unknown --transport ${transport}`);
  if (workload === 'batch' && transport !== 'http')
    throw new UsageError('--workload batch is HTTP only (the service has no Socket.IO batch operation)');
  const concurrency = number('concurrency', values.concurrency as string | undefined, true);
  const rate = number('rate', values.rate as string | undefined);
  if ((concurrency === undefined) === (rate === undefined))
    throw new UsageError('give one of --concurrency N and --rate R');
  const durationSec = number('duration', values.duration as string | undefined);
  if (durationSec === undefined) throw new UsageError('--duration is required');
  if (durationSec > MAX_DURATION_SEC)
    throw new UsageError(`--duration must be at most ${MAX_DURATION_SEC} s (about 24 days)`);
  const warmupSec = values.warmup === undefined ? 0 : Number(values.warmup);
  if (!(warmupSec >= 0) || warmupSec >= durationSec)
    throw new UsageError('--warmup must be a number of seconds shorter than --duration');
  const pace = number('pace', values.pace as string | undefined) ?? 1;
  if (values.pace !== undefined && workload !== 'live' && workload !== 'diarization')
    throw new UsageError('--pace is for --workload live or diarization');
  const language = (values.language as string | undefined) ?? 'en';
  if (!isLanguage(language)) throw new UsageError(`unknown --language ${language}`);
  const report = values.report as string | undefined;
  if (report !== undefined && !/\.(html?|svg)$/i.test(report))
    throw new UsageError('--report must name an .html or .svg file');
  return {
    workload,
    transport,
    ...(concurrency === undefined ? {} : { concurrency }),
    ...(rate === undefined ? {} : { rate }),
    durationSec,
    warmupSec,
    pace,
    ...(values.media ? { media: values.media as string } : {}),
    language,
    json: values.json === true,
    ...(report ? { report } : {}),
  };
}

/** How long the emulator may take to say where it listens. */
const EMULATOR_START_MS = 30_000;

/** The emulator in a child process: its URL and key, and how to stop it. */
async function startEmulatorProcess(
  signal: AbortSignal,
): Promise<{ url: string; apiKey: string; stop(): Promise<void> }> {
  const main = fileURLToPath(
    new URL(import.meta.url.endsWith('.ts') ? './main.ts' : './main.js', import.meta.url),
  );
  // Its standard input is a pipe from this process, which the emulator watches: it stops when
  // this process goes, however it goes (SIGKILL too), instead of serving on as an orphan.
  const child = spawn(process.execPath, [main, 'emulator', '--stop-on-stdin-end'], {
    stdio: ['pipe', 'pipe', 'ignore'],
  });
  child.stdin.on('error', () => {}); // EPIPE once the child is gone: nothing to tell
  const stop = async () => {
    child.stdin.destroy();
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };
  try {
    // The wait for its first line is bounded, and ends on Ctrl-C.
    addAbortSignal(AbortSignal.any([signal, AbortSignal.timeout(EMULATOR_START_MS)]), child.stdout);
    let line = '';
    for await (const chunk of child.stdout) {
      line += chunk;
      if (line.includes('\n')) break;
    }
    const { url, apiKey } = JSON.parse(line.split('\n')[0]!) as { url: string; apiKey: string };
    return { url, apiKey, stop };
  } catch (err) {
    await stop();
    throw new SpeechpipeError('ERR_EMULATOR', `could not start the emulator: ${(err as Error).message}`);
  }
}

async function compare(paths: string[]): Promise<number> {
  if (paths.length !== 2) {
    return badUsage('bench', '--compare takes two JSON reports');
  }
  const reports: BenchReport[] = [];
  for (const path of paths) {
    try {
      const report = JSON.parse(await readFile(path, 'utf8')) as BenchReport;
      if (report.tool !== 'speechpipe bench' || typeof report.latency_ms !== 'object')
        throw new Error('not a speechpipe bench --json report');
      reports.push(report);
    } catch (err) {
      process.stderr.write(`speechpipe bench: cannot read ${path}: ${(err as Error).message}\n`);
      return 2;
    }
  }
  process.stdout.write(compareReports(reports[0]!, reports[1]!));
  return 0;
}

export async function run(args: string[]): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseCommandArgs({
      args,
      allowPositionals: true,
      options: {
        workload: { type: 'string' },
        transport: { type: 'string' },
        concurrency: { type: 'string' },
        rate: { type: 'string' },
        duration: { type: 'string' },
        warmup: { type: 'string' },
        pace: { type: 'string' },
        media: { type: 'string' },
        language: { type: 'string' },
        json: { type: 'boolean', default: false },
        report: { type: 'string' },
        compare: { type: 'boolean', default: false },
      },
    }));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('bench', err);
  }
  if (values.compare) return compare(positionals);
  let options: Parsed;
  try {
    if (positionals.length > 0) throw new UsageError(`unexpected ${positionals[0]}`);
    options = parse(values);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('bench', err);
  }
  if (options.report !== undefined) {
    // Checked before the run, so that a run is not made for a report with nowhere to go.
    const where = dirname(options.report);
    if (
      !(await stat(where).then(
        (s) => s.isDirectory(),
        () => false,
      ))
    ) {
      process.stderr.write(`speechpipe bench: --report ${options.report}: no directory ${where}\n`);
      return 2;
    }
  }
  const controller = new AbortController();
  const onSignal = () => controller.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let clips: BenchClip[];
  try {
    clips = options.media
      ? await loadMedia(options.media, controller.signal)
      : await builtinMedia(controller.signal);
  } catch (err) {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (controller.signal.aborted) {
      process.stderr.write('speechpipe bench: interrupted while reading the media\n');
      return 130;
    }
    // The library's messages name it `bench:` already.
    process.stderr.write(`speechpipe bench: ${(err as Error).message.replace(/^bench: /, '')}\n`);
    return 2;
  }
  let client: SpeechClient;
  let emulator: Awaited<ReturnType<typeof startEmulatorProcess>> | undefined;
  let target: string;
  if (process.env.API_URL) {
    client = createClient({ env: process.env });
    target = new URL(process.env.API_URL).origin;
  } else {
    try {
      emulator = await startEmulatorProcess(controller.signal);
    } catch (err) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      if (!controller.signal.aborted) throw err;
      // Ctrl-C on a terminal reaches the emulator too, which may stop before it says where it is.
      process.stderr.write('speechpipe bench: interrupted while starting the emulator\n');
      return 130;
    }
    client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
    target = `built-in emulator (${emulator.url})`;
  }
  const tty = process.stderr.isTTY && !options.json;
  let report: BenchReport | undefined;
  let refused: SpeechServiceError | undefined;
  try {
    report = await runBench({
      client,
      workload: options.workload,
      transport: options.transport,
      ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
      ...(options.rate === undefined ? {} : { rate: options.rate }),
      durationSec: options.durationSec,
      warmupSec: options.warmupSec,
      pace: options.pace,
      clips,
      language: options.language,
      target,
      signal: controller.signal,
      onTick: (p) => {
        if (tty)
          process.stderr.write(
            `\r${p.elapsedSec.toFixed(0)}/${options.durationSec} s · ${p.completed} done · ${p.failed} failed · ${p.inFlight} in flight   `,
          );
      },
    });
  } catch (err) {
    if (!isAuthFailure(err)) throw err;
    refused = err;
  } finally {
    if (tty) process.stderr.write('\n');
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await client.close();
    await emulator?.stop();
  }
  if (!report) {
    process.stderr.write(
      `speechpipe bench: the service refused the key (${refused!.status}): ${refused!.message}\n`,
    );
    return 2;
  }
  if (options.json) {
    const { series: _series, distribution: _distribution, ...plain } = report;
    process.stdout.write(`${JSON.stringify(plain, null, 2)}\n`);
  } else process.stdout.write(formatReport(report));
  // After the report is out: a file that cannot be written does not lose the run's figures.
  if (options.report) {
    const page = /\.svg$/i.test(options.report) ? renderSvg(report) : renderHtml(report);
    try {
      await writeFile(options.report, page);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      process.stderr.write(`speechpipe bench: could not write ${options.report} (${code})\n`);
      return 1;
    }
  }
  if (report.interrupted) return 130;
  return report.operations.completed === 0 ? 1 : 0;
}
