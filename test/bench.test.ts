// speechpipe bench: the runner's two load models (a closed loop, and an open loop whose
// latency counts from when each operation was due, so a slow service shows its latency), every
// workload's metrics, the report's names, and the command line (JSON, HTML, compare, usage).

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { BenchClip } from '../src/benchmark/media.ts';
import { compareReports, formatReport, renderHtml } from '../src/benchmark/report.ts';
import { BENCH_METRICS, BENCH_WORKLOADS, runBench } from '../src/benchmark/run.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { benchReport } from './helpers/bench-report.ts';
import { runCli } from './helpers/cli.ts';
import { startService } from './helpers/service.ts';
import { speechPcm } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-bench-'));
after(() => rm(root, { recursive: true, force: true }));
const pcm = await speechPcm('A short clip for the benchmark. It has two sentences.', { pauseMs: 300 });
const clips: BenchClip[] = [
  { name: 'a', pcm, wav: encodeWav(pcm, 16_000, 1), seconds: pcm.length / 32_000, text: 'Hello there.' },
];
const { client, newClient } = await startService();
const slow = await startService({ latency: { perRequestMs: 100 } });

// The workloads at once (each its own admission lane): each run mostly waits for its second.
describe('every workload', { concurrency: true }, () => {
  for (const workload of BENCH_WORKLOADS) {
    test(`${workload}: every metric recorded, percentiles named p50..max, throughput in audio s/s`, async () => {
      const report = await runBench({
        client,
        workload,
        transport: 'http',
        concurrency: 2,
        durationSec: 1,
        pace: 8,
        clips,
        graceSec: 20,
      });
      assert.ok(report.operations.completed > 0, JSON.stringify(report.operations));
      assert.equal(report.operations.failed, 0, JSON.stringify(report.errors));
      for (const metric of BENCH_METRICS[workload]) {
        const s = report.latency_ms[metric]!;
        assert.equal(s.count, report.operations.completed, metric);
        for (const p of ['p50', 'p90', 'p99', 'p999', 'max'] as const) assert.equal(typeof s[p], 'number');
        assert.ok(s.p50! <= s.p99! && s.p99! <= s.max!);
      }
      assert.ok(report.throughput.audio_seconds_per_second > 0);
      assert.ok(report.throughput.requests_per_second > 0);
      assert.match(formatReport(report), new RegExp(`${workload} over http`));
    });
  }
});

test('open loop: operations start on schedule, and their latency counts from when they were due', async () => {
  // The service answers one request at a time in 100 ms (10 a second); 20 a second arrive.
  const one = slow.newClient({ concurrency: { fast: 1 } });
  const open = await runBench({
    client: one,
    workload: 'fast',
    transport: 'http',
    rate: 20,
    durationSec: 1.5,
    clips,
    graceSec: 30,
  });
  const closed = await runBench({
    client: one,
    workload: 'fast',
    transport: 'http',
    concurrency: 1,
    durationSec: 1.5,
    clips,
  });
  assert.equal(open.load.model, 'rate');
  assert.ok(open.operations.started >= 28, `${open.operations.started} started on schedule`);
  // A queue builds: the last ones waited most of the run. A closed loop never sees it.
  assert.ok(open.latency_ms.final!.max! > 1000, `open loop max ${open.latency_ms.final!.max} ms`);
  assert.ok(closed.latency_ms.final!.p99! < 400, `closed loop p99 ${closed.latency_ms.final!.p99} ms`);
  assert.ok(open.latency_ms.final!.p50! > 3 * closed.latency_ms.final!.p50!);
});

test('live: frames the service holds back do not shorten the final result (it counts from when the last audio was due)', async () => {
  // 12 s of audio at 16x real time over Socket.IO (100 ms frames): its last frame is due at
  // 0.74 s. The service holds an early frame for 2 s, so every later frame waits behind it:
  // more than the pipeline buffers, so the pace is held back and the last frame goes after the
  // hold. The final result cannot come before about 2 s, some 1.3 s after the audio was due.
  const long = Buffer.concat([pcm, Buffer.alloc(12 * 32_000 - pcm.length)]);
  const held = await startService({
    faults: [{ operation: 'stt.socket', nth: 3, times: 1, action: { type: 'delay', ms: 2000 } }],
  });
  const report = await runBench({
    client: held.client,
    workload: 'live',
    transport: 'socketio',
    concurrency: 1,
    durationSec: 0.1,
    pace: 16,
    clips: [{ name: 'long', pcm: long, wav: encodeWav(long, 16_000, 1), seconds: 12 }],
    graceSec: 30,
  });
  assert.equal(report.operations.completed, 1, JSON.stringify(report.errors));
  const final = report.latency_ms.final_after_last_audio!;
  assert.ok(final.max! >= 800, `final after the last audio ${final.max} ms`);
});

test('a service that stops answering shows in the percentiles: operations cut at the end count at their age', async () => {
  const hung = await startService({ faults: [{ operation: 'fast.http', action: { type: 'stall' } }] });
  const report = await runBench({
    client: hung.client,
    workload: 'fast',
    transport: 'http',
    concurrency: 2,
    durationSec: 0.1,
    graceSec: 0.3,
    clips,
  });
  assert.deepEqual(report.operations, { started: 2, completed: 0, failed: 0, cut: 2 });
  for (const metric of ['final', 'first_record']) {
    const s = report.latency_ms[metric]!;
    assert.equal(s.count, 2, metric);
    assert.ok(s.p50! >= 300, `${metric} p50 ${s.p50} ms: at least the grace`);
  }
});

test('throughput covers the time the operations took: a live stream that ends after the duration', async () => {
  // One stream of the clip at 4x real time over Socket.IO cannot carry more than 4 audio
  // seconds a second, however short the run that started it.
  const report = await runBench({
    client,
    workload: 'live',
    transport: 'socketio',
    concurrency: 1,
    durationSec: 0.2,
    pace: 4,
    clips,
    graceSec: 30,
  });
  assert.equal(report.operations.completed, 1);
  assert.ok(
    report.throughput.audio_seconds_per_second <= 4.5,
    `${report.throughput.audio_seconds_per_second} audio s/s`,
  );
});

test('429s answered to live frames are counted with their Retry-After wait', async () => {
  // Two frames of one stream refused: a request rate limit, then the session's byte rate.
  const limited = await startService({
    faults: [
      {
        operation: 'stt.http',
        nth: 2,
        action: { type: 'status', status: 429, code: 'RATE_LIMIT_EXCEEDED', retryAfter: 0.2 },
      },
      {
        operation: 'stt.http',
        nth: 4,
        action: { type: 'status', status: 429, code: 'SESSION_BYTE_RATE_EXCEEDED', retryAfter: 0.2 },
      },
    ],
  });
  const report = await runBench({
    client: limited.client,
    workload: 'live',
    transport: 'http',
    concurrency: 1,
    durationSec: 0.1,
    pace: 8,
    clips,
    graceSec: 30,
  });
  assert.equal(report.operations.completed, 1, JSON.stringify(report.errors));
  assert.equal(report.rate_limited.responses_429, 2);
  assert.ok(report.rate_limited.retry_after_wait_ms >= 390, `${report.rate_limited.retry_after_wait_ms} ms`);
});

test('a warm-up is run and not counted; an abort ends the run with a partial report', async () => {
  const controller = new AbortController();
  setTimeout(() => controller.abort(), 700);
  const report = await runBench({
    client: newClient(),
    workload: 'fast',
    transport: 'socketio',
    concurrency: 2,
    durationSec: 30,
    warmupSec: 0.3,
    clips,
    signal: controller.signal,
  });
  assert.equal(report.interrupted, true);
  assert.ok(report.operations.completed > 0);
  assert.ok(report.operations.completed < report.operations.started + 1);
});

test('the command line: --json report, --report HTML, --compare, bad usage', async () => {
  const args = [
    'bench',
    '--workload',
    'fast',
    '--transport',
    'http',
    '--concurrency',
    '2',
    '--duration',
    '1',
  ];
  // Two runs, a comparison and bad usage: independent commands, run at once.
  const bads = [
    ['bench', '--workload', 'fast', '--duration', '1'],
    ['bench', '--workload', 'fast', '--concurrency', '1', '--rate', '2', '--duration', '1'],
    ['bench', '--workload', 'nope', '--concurrency', '1', '--duration', '1'],
    ['bench', '--workload', 'fast', '--concurrency', '1', '--duration', '1', '--pace', '2'],
    ['bench', '--workload', 'batch', '--transport', 'socketio', '--concurrency', '1', '--duration', '1'],
    ['bench', '--workload', 'fast', '--concurrency', '1', '--duration', '3000000'],
    // Nowhere to write the report: said before the run, not after it.
    [
      'bench',
      '--workload',
      'fast',
      '--concurrency',
      '1',
      '--duration',
      '1',
      '--report',
      join(root, 'none', 'r.html'),
    ],
    ['bench', '--workload', 'fast', '--concurrency', '1', '--duration', '1', '--media', join(root, 'none')],
  ];
  const [a, b, ...badRuns] = await Promise.all([
    runCli([...args, '--json', '--report', join(root, 'a.html')]),
    // The second on a clip of its own: the built-in spoken set is the first run's.
    writeFile(join(root, 'b.wav'), clips[0]!.wav).then(() =>
      runCli([...args, '--json', '--report', join(root, 'b.svg'), '--media', join(root, 'b.wav')]),
    ),
    ...bads.map((bad) => runCli(bad)),
  ]);
  bads.forEach((bad, i) => {
    assert.equal(badRuns[i]!.code, 2, `${bad.join(' ')}: ${badRuns[i]!.stderr}`);
    assert.match(badRuns[i]!.stderr, /^speechpipe bench: (?!bench:)/);
  });
  assert.equal(a!.code, 0, a!.stderr);
  const report = JSON.parse(a!.stdout) as {
    latency_ms: Record<string, Record<string, number>>;
    throughput: Record<string, number>;
    target: string;
  };
  assert.deepEqual(Object.keys(report.latency_ms.final!).sort(), [
    'count',
    'max',
    'mean',
    'p50',
    'p90',
    'p99',
    'p999',
  ]);
  assert.ok((report.throughput.audio_seconds_per_second ?? 0) > 0);
  assert.match(report.target, /built-in emulator \(http:\/\/127\.0\.0\.1:\d+\)/);
  const html = await readFile(join(root, 'a.html'), 'utf8');
  assert.equal(html.match(/<svg /g)?.length, 2, 'latency over time and its distribution');
  await writeFile(join(root, 'a.json'), a!.stdout);
  assert.equal(b!.code, 0, b!.stderr);
  await writeFile(join(root, 'b.json'), b!.stdout);
  const svg = await readFile(join(root, 'b.svg'), 'utf8');
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.match(
    svg,
    /over time[\s\S]*<svg [\s\S]*distribution[\s\S]*<svg /,
    'latency over time and its distribution',
  );
  const compared = await runCli(['bench', '--compare', join(root, 'a.json'), join(root, 'b.json')]);
  assert.equal(compared.code, 0, compared.stderr);
  // A change that rounds to nothing is 0.0%, unsigned.
  assert.match(compared.stdout, /final p99 +\S+ ms +\S+ ms +([+-]\d|0\.0%)/);
});

test('a key the service refuses stops the run at the first refusal with one message (exit 2)', async () => {
  await assert.rejects(
    runBench({
      client: newClient({ apiKey: 'not-the-key' }),
      workload: 'tts',
      transport: 'http',
      concurrency: 2,
      durationSec: 5,
      clips,
    }),
    (err: { status?: number }) => err.status === 401,
  );
  await writeFile(join(root, 'clip.wav'), clips[0]!.wav);
  const { emulator } = await startService();
  const run = await runCli(
    [
      'bench',
      '--workload',
      'fast',
      '--concurrency',
      '2',
      '--duration',
      '30',
      '--media',
      join(root, 'clip.wav'),
    ],
    { API_URL: emulator.url, API_KEY: 'not-the-key' },
  );
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /^speechpipe bench: the service refused the key \(401\): /);
  assert.doesNotMatch(run.stderr, /not-the-key/);
  assert.equal(run.stdout, '');
});

test('compareReports shows both runs and the change', () => {
  const base = benchReport({ count: 1, p50: 100, p90: 100, p99: 100, p999: 100, max: 100, mean: 100 });
  const worse = { ...base, latency_ms: { final: { ...base.latency_ms.final!, p99: 150 } } };
  assert.match(compareReports(base, worse), /final p99 +100 ms +150 ms +\+50\.0%/);
  assert.match(renderHtml(base), /<svg/);
  // The distribution's tail gets room: p99, p99.9 and p99.99 as far apart as p0 and p90.
  const tail: Array<[number, number]> = [
    [0, 5],
    [50, 10],
    [90, 20],
    [99, 40],
    [99.9, 80],
    [99.99, 160],
    [100, 200],
  ];
  const page = renderHtml({ ...base, distribution: tail });
  const x = (label: string) =>
    Number(new RegExp(`<circle cx="([\\d.]+)"[^>]*><title>${label}: `).exec(page)?.[1] ?? Number.NaN);
  const step = x('p90') - x('p0');
  assert.ok(step > 100, `p0 to p90: ${step} px`);
  for (const [a, b] of [
    ['p90', 'p99'],
    ['p99', 'p99.9'],
    ['p99.9', 'p99.99'],
  ] as const)
    assert.ok(Math.abs(x(b) - x(a) - step) < 1, `${a} to ${b}: ${x(b) - x(a)} px, p0 to p90: ${step} px`);
  assert.ok(x('max') > x('p99.99'));
});
