// The fault-matrix soak (issues 13 and 23): live ASR and diarization at an accelerated pace over
// both transports, fast and batch jobs and TTS run against the emulator while faults come every
// period. Each period every live operation (stt and diarization, HTTP and Socket.IO) gets the
// next fault of a cycle: a connection reset after the frame was accepted, a 500, a 408, a 409, a
// stall, two final records dropped in a row, a retryable refusal whose code is outside the
// catalogue, three final records dropped in a row; the other operations get resets, 5xx, 429
// storms with Retry-After, truncated TTS. It reports, per transport and workload, what was lost
// or duplicated against a fault-free run of the same audio, and the audio missing from the
// result that no reported loss (`audio-lost`) covers; the slots held after the run, duplicate
// batch jobs, RSS and heap slopes, handles left open and the longest wait.
//
//   npm run soak -- [--duration SEC | --speech SEC] [--clip SEC] [--pace X] [--period MS] [--gap MS] [--json]
//
// --duration: live runs start for this long (default 60 s). --speech: instead, each live
// workload runs until it has transcribed this much speech. --clip: the speech of one live run
// (default the six sentences once, about 25 s; longer repeats them).

import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { type ClientOptions, createClient, type SpeechClient } from '../src/client/index.ts';
import { type Emulator, type FaultRule, startEmulator } from '../src/emulator/index.ts';
import {
  assembleTranscript,
  diarizationStream,
  encodeWav,
  type FinalEvent,
  type LostAudio,
  pace,
  type SessionChange,
  sttStream,
  type TranscriptEvent,
  toFrames,
} from '../src/index.ts';
import type { AsrRecord, DiarizationRecord } from '../src/protocol/records.ts';
import { speechWithPauses } from '../test/helpers/speech.ts';
import { diffWords, lostWords, type TimedWord, type WordDiff } from '../test/helpers/word-diff.ts';

export interface SoakOptions {
  /** Live runs start for this long (unless `speechSec`); the other workloads run as long as they do. */
  durationSec: number;
  /** Instead of `durationSec`: each live workload runs until it transcribed this much speech. */
  speechSec?: number;
  /** Seconds of speech of one live run. Default: the six sentences once (about 25 s). */
  clipSec?: number;
  /** Live audio pace, a multiple of real time. Default 4. */
  pace?: number;
  /** A new fault every this many milliseconds. Default 2000. */
  faultPeriodMs?: number;
  /** Longest any one operation may take before it counts as an unbounded wait. Default 60 s. */
  watchdogMs?: number;
  /**
   * Milliseconds between the operations of each fast, batch and TTS loop. Default 0: each goes
   * as fast as the service answers (thousands of operations in a minute). A fault waits for the
   * next operation it matches, so a gap changes how many operations run, not which faults they meet.
   */
  gapMs?: number;
  log?: (line: string) => void;
}

export interface LiveResult extends Omit<WordDiff, 'reference' | 'got' | 'textDiffers'> {
  /** Words (ASR) or closed segments (diarization) of the fault-free run. */
  reference: number;
  runs: number;
  /** Runs that ended in an error instead of their final record. */
  failedRuns: number;
  restarts: number;
  /** Seconds of audio heard again on restarted sessions. */
  replayedSec: number;
  /** Runs whose final record reported audio lost for good. */
  lossReported: number;
  /** Seconds of speech transcribed (runs that ended with their final record). */
  speechSec: number;
  /**
   * Audio missing from the result that no reported loss covers: reference words (ASR) or
   * closed segments (diarization) no item of the run matches and items of the run cover less
   * than half of, outside every `audio-lost` range (a failed run: up to the end of its last
   * range, as what it never took in is its error's).
   */
  unreportedLost: number;
  /** Their seconds of audio. */
  unreportedLostSec: number;
  errors: Record<string, number>;
}

export interface OpResult {
  runs: number;
  ok: number;
  errors: Record<string, number>;
}

export interface SoakReport {
  durationSec: number;
  speechSec?: number;
  pace: number;
  faultPeriodMs: number;
  live: Record<string, LiveResult>;
  fast: Record<string, OpResult & { lost: number; duplicated: number }>;
  batch: OpResult & { jobsCreated: number; duplicateJobs: number };
  tts: Record<string, OpResult>;
  faultsApplied: Record<string, number>;
  /**
   * Operations the service still counts as running, and client slots still held, once the
   * client ended what it could and the service's session expiry (`SOAK_SESSION_EXPIRY_SEC`)
   * ended streams stuck on a stalled frame, which no client can end.
   */
  slotsHeld: { service: Record<string, number>; client: Record<string, number> };
  /** What the service counted as running as soon as the client had given back its slots. */
  slotsHeldAtEnd: Record<string, number>;
  memory: { rssStartMiB: number; rssEndMiB: number; rssSlopeMiBPerMin: number; heapSlopeMiBPerMin: number };
  /** Resources (by type) open after the run that were not open before it. */
  handlesLeftOpen: Record<string, number>;
  /** The longest an operation went without ending (a live run: without a record or a new session). */
  longestWaitMs: number;
  /** Operations stopped by the watchdog: a wait that would not have ended by itself. */
  unboundedWaits: number;
}

const SENTENCES = [
  'Good evening, and welcome to the late news.',
  'The council met today to discuss the new library on the river bank.',
  'Work on the bridge will start in the spring, and should take two years.',
  'In sport, the home team won three to one after a difficult first half.',
  'Tomorrow will be dry and bright, with a light wind from the west.',
  'That is all from us tonight. Thank you for watching.',
];

const LIVE_OPERATIONS = ['stt.http', 'stt.socket', 'diarization.http', 'diarization.socket'] as const;

/**
 * The live faults, one per period for every live operation, in a cycle. A dropped final record
 * acts on the next answers that would carry one: a rule of `times: 2` drops the run's final
 * record and that of the session restarted for it, two in a row.
 */
const LIVE_PLAN: ((operation: (typeof LIVE_OPERATIONS)[number]) => FaultRule)[] = [
  (operation) => ({ operation, times: 1, action: { type: 'reset', stage: 'afterEffect' } }),
  (operation) => ({
    operation,
    times: 1,
    action: {
      type: 'status',
      status: 500,
      code: operation.startsWith('stt') ? 'ASR_TRANSCRIPTION_FAILED' : 'DIARIZATION_FAILED',
    },
  }),
  (operation) => ({
    operation,
    times: 1,
    action: { type: 'status', status: 408, code: 'SESSION_IDLE_TIMEOUT' },
  }),
  (operation) => ({ operation, times: 1, action: { type: 'status', status: 409, code: 'SESSION_EXPIRED' } }),
  (operation) => ({ operation, times: 1, action: { type: 'stall' } }),
  (operation) => ({ operation, times: 2, action: { type: 'endWithoutFinal' } }),
  // Retryable (a 5xx) with a code the catalogue does not have.
  (operation) => ({
    operation,
    times: 1,
    action: { type: 'status', status: 503, code: 'SERVER_UNAVAILABLE' },
  }),
  (operation) => ({ operation, times: 3, action: { type: 'endWithoutFinal' } }),
];

/** The other operations' faults (and a 429 storm for all), one rule per period, in a cycle. */
const PLAN: FaultRule[] = [
  {
    operation: '*',
    times: 8,
    action: { type: 'status', status: 429, code: 'CONCURRENCY_LIMIT_EXCEEDED', retryAfter: 0.2 },
  },
  { operation: 'tts.http', times: 1, action: { type: 'truncateTts' } },
  { operation: 'tts.socket', times: 1, action: { type: 'truncateTts' } },
  {
    operation: 'fast.http',
    times: 1,
    action: { type: 'status', status: 500, code: 'ASR_TRANSCRIPTION_FAILED' },
  },
  { operation: 'fast.socket', times: 1, action: { type: 'reset', stage: 'before' } },
  { operation: 'batch.get', times: 2, action: { type: 'status', status: 500, code: 'SERVER_INTERNAL' } },
  {
    operation: 'tts.http',
    times: 1,
    action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE' },
  },
  { operation: 'stt.http', times: 1, action: { type: 'reset', stage: 'before' } },
];

/** Short timeouts, so that stalls and lost final records end within seconds. */
const CLIENT_OPTIONS: ClientOptions = {
  env: {},
  retry: { baseMs: 50, maxMs: 500 },
  timeouts: {
    headersMs: 3_000,
    uploadHeadersMs: 10_000,
    bodyIdleMs: 5_000,
    socketAckMs: 3_000,
    socketConnectMs: 3_000,
    liveFinalMs: 3_000,
  },
};

const codeOf = (err: unknown) => (err as { code?: string }).code ?? (err as Error).name ?? 'unknown';

const count = (table: Record<string, number>, key: string) => {
  table[key] = (table[key] ?? 0) + 1;
};

/** Words (ASR) or closed segments (diarization) of one live run, on the pipeline's timeline. */
interface LiveRun {
  items: TimedWord[];
  changes: SessionChange[];
  lost: boolean;
  /** The ranges reported by `audio-lost`. */
  lostRanges: LostAudio[];
  /** The run's error, if it failed. */
  error?: unknown;
  /** Its sessions' failures and changes, timed from its start. */
  trace: string[];
}

async function liveRun(
  client: SpeechClient,
  kind: 'stt' | 'diarization',
  transport: 'http' | 'socketio',
  pcm: Buffer,
  speed: number,
  signal: AbortSignal,
  /** Told of each record and new session (the watchdog's progress). */
  alive: () => void = () => {},
): Promise<LiveRun> {
  const changes: SessionChange[] = [];
  const options = { client, transport, signal, restartBackoff: { baseMs: 20, maxMs: 500 } };
  const stream = kind === 'stt' ? sttStream(options) : diarizationStream(options);
  stream.on('session', (c: SessionChange) => {
    changes.push(c);
    alive();
  });
  // What the run went through, for the log of a run that failed.
  const t0 = performance.now();
  const trace: string[] = [];
  const note = (what: string) => trace.push(`${((performance.now() - t0) / 1000).toFixed(1)} s ${what}`);
  stream.on('session-error', (err: unknown) => note(`session failed: ${codeOf(err)}`));
  stream.on('session', (c: SessionChange) => note(`session ${c.id.slice(0, 8)} (${c.reason})`));
  const lostRanges: LostAudio[] = [];
  stream.on('audio-lost', ({ start_time, end_time }: LostAudio) => lostRanges.push({ start_time, end_time }));
  const items: TimedWord[] = [];
  let lost = false;
  const run = (): LiveRun => ({ items, changes, lost, lostRanges, trace });
  const frames = [
    Readable.from([pcm]),
    toFrames({ language: 'en', frameMs: transport === 'http' ? 500 : 200 }),
    pace({ speed }),
    stream,
  ] as const;
  try {
    await transcribe();
  } catch (error) {
    throw Object.assign(error as Error, { run: { ...run(), error } });
  }
  return run();

  async function transcribe(): Promise<void> {
    if (kind === 'stt') {
      // sttStream's own committed words: assembleTranscript would hide a word said twice.
      await pipeline(
        ...frames,
        new Transform({
          objectMode: true,
          transform(record: AsrRecord, _e, cb) {
            alive();
            if (record.is_speech_final || record.is_final) items.push(...record.words);
            cb(null, record);
          },
        }),
        assembleTranscript(),
        new Writable({
          objectMode: true,
          write(event: TranscriptEvent, _e, cb) {
            if (event.type === 'final') lost = (event as FinalEvent).lost !== undefined;
            cb();
          },
        }),
        { signal },
      );
    } else {
      await pipeline(
        ...frames,
        new Writable({
          objectMode: true,
          write(record: DiarizationRecord & { lost_audio?: unknown }, _e, cb) {
            alive();
            const segments = record.is_final
              ? [...record.final_segments, ...record.active_segments]
              : record.final_segments;
            for (const s of segments)
              items.push({ start_time: s.start_time, end_time: s.end_time ?? s.start_time, word: '' });
            if (record.is_final) lost = record.lost_audio !== undefined;
            cb();
          },
        }),
        { signal },
      );
    }
  }
}

/**
 * Reference items (words, closed segments) whose audio the run left out and no reported range
 * covers, and their seconds. Left out: less than half of the item's span is under items of the
 * run. (Matching items one to one is not enough: after a restart the emulator can cut the same
 * speech into words at other places, and a word whose audio was transcribed matches none.) A
 * failed run is judged up to the end of its last reported range (or its last item): the audio
 * after it was never taken in, and the run's error says so.
 */
function unreported(
  reference: readonly TimedWord[],
  run: LiveRun,
): { count: number; sec: number; words: TimedWord[] } {
  const until =
    run.error === undefined
      ? Number.POSITIVE_INFINITY
      : Math.max(run.lostRanges.at(-1)?.end_time ?? 0, run.items.at(-1)?.end_time ?? 0);
  const heard = (w: TimedWord) =>
    run.items.reduce(
      (sum, x) => sum + Math.max(0, Math.min(x.end_time, w.end_time) - Math.max(x.start_time, w.start_time)),
      0,
    );
  const missing = lostWords(reference, run.items).filter(
    (w) =>
      w.start_time < until &&
      heard(w) < (w.end_time - w.start_time) / 2 &&
      !run.lostRanges.some((r) => w.end_time > r.start_time - 1e-6 && w.start_time < r.end_time + 1e-6),
  );
  return {
    count: missing.length,
    sec: missing.reduce((s, w) => s + (w.end_time - w.start_time), 0),
    words: missing,
  };
}

/**
 * Run `fn` under a watchdog: it fails when it goes `watchdogMs` without ending or, for one that
 * says so (`alive`: a live run's records and new sessions), without progress. The longest wait
 * is the longest of those stretches.
 */
class Waits {
  longestMs = 0;
  unbounded = 0;
  readonly #watchdogMs: number;
  constructor(watchdogMs: number) {
    this.#watchdogMs = watchdogMs;
  }
  async run<T>(fn: (signal: AbortSignal, alive: () => void) => Promise<T>): Promise<T> {
    let since = performance.now();
    const ctl = new AbortController();
    const timer = setTimeout(() => {
      this.unbounded++;
      ctl.abort(new Error(`watchdog: the operation went ${this.#watchdogMs} ms without ending or progress`));
    }, this.#watchdogMs);
    const alive = () => {
      const now = performance.now();
      this.longestMs = Math.max(this.longestMs, now - since);
      since = now;
      timer.refresh();
    };
    try {
      return await fn(ctl.signal, alive);
    } finally {
      clearTimeout(timer);
      this.longestMs = Math.max(this.longestMs, performance.now() - since);
    }
  }
}

/** Least-squares slope of (seconds, MiB) samples, in MiB per minute. */
function slopePerMinute(samples: readonly [number, number][]): number {
  const n = samples.length;
  if (n < 2) return 0;
  const mx = samples.reduce((s, [x]) => s + x, 0) / n;
  const my = samples.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of samples) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 60;
}

function resources(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const type of process.getActiveResourcesInfo()) count(out, type);
  return out;
}

const MiB = 1024 * 1024;

/** The soak emulator's live session expiry (the interface's is 60 s): see `slotsHeld`. */
export const SOAK_SESSION_EXPIRY_SEC = 5;

export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const log = options.log ?? (() => {});
  const speed = options.pace ?? 4;
  const handlesBefore = resources();
  const pcm = await speechWithPauses(SENTENCES, 700);
  const wav = encodeWav(pcm, 16_000);
  // A live run's speech: the sentences, repeated up to `clipSec`.
  const clipBytes = Math.round((options.clipSec ?? 0) * 16_000) * 2;
  const livePcm =
    clipBytes > pcm.length
      ? Buffer.concat(Array.from({ length: Math.ceil(clipBytes / pcm.length) }, () => pcm)).subarray(
          0,
          clipBytes,
        )
      : pcm;
  const clipSec = livePcm.length / 32_000;
  const waits = new Waits(options.watchdogMs ?? 60_000);

  // Fault-free references of the same audio, on an emulator of their own.
  const references = new Map<string, TimedWord[]>();
  const fastReference = new Map<string, TimedWord[]>();
  {
    const clean = await startEmulator();
    const client = createClient({ ...CLIENT_OPTIONS, apiUrl: clean.url, apiKey: clean.apiKey });
    try {
      for (const kind of ['stt', 'diarization'] as const) {
        for (const transport of ['http', 'socketio'] as const) {
          const run = await liveRun(client, kind, transport, livePcm, 1000, new AbortController().signal);
          references.set(`${kind}.${transport}`, run.items);
        }
      }
      for (const transport of ['http', 'socketio'] as const) {
        const words: TimedWord[] = [];
        for await (const r of client.fast.transcribe(wav, { transport, language: 'en' }))
          words.push(...r.words);
        fastReference.set(transport, words);
      }
    } finally {
      await client.close();
      await clean.close();
    }
  }
  log(`references: ${[...references].map(([k, v]) => `${k} ${v.length}`).join(', ')}`);

  const emulator: Emulator = await startEmulator({
    jobTiming: { queuedMs: 20, processingMs: 50 },
    limits: { sessionExpirySec: SOAK_SESSION_EXPIRY_SEC },
  });
  const client = createClient({ ...CLIENT_OPTIONS, apiUrl: emulator.url, apiKey: emulator.apiKey });
  const deadline = performance.now() + options.durationSec * 1000;
  /** Live loops at work: the other workloads run as long as they do. */
  let liveLoops = 0;
  const running = () => liveLoops > 0;

  const memory: { rss: [number, number][]; heap: [number, number][] } = { rss: [], heap: [] };
  const t0 = performance.now();
  const sample = () => {
    const m = process.memoryUsage();
    const t = (performance.now() - t0) / 1000;
    memory.rss.push([t, m.rss / MiB]);
    memory.heap.push([t, m.heapUsed / MiB]);
  };
  sample();
  const sampler = setInterval(sample, 1000);

  let planIndex = 0;
  const added: { remove(): void }[] = [];
  const faulting = setInterval(() => {
    const liveFault = LIVE_PLAN[planIndex % LIVE_PLAN.length]!;
    for (const operation of LIVE_OPERATIONS) added.push(emulator.faults.add(liveFault(operation)));
    added.push(emulator.faults.add(PLAN[planIndex % PLAN.length]!));
    planIndex++;
  }, options.faultPeriodMs ?? 2000);

  const live: Record<string, LiveResult> = {};
  const liveLoop = async (kind: 'stt' | 'diarization', transport: 'http' | 'socketio') => {
    const name = `${kind}.${transport}`;
    const reference = references.get(name)!;
    const result: LiveResult = {
      runs: 0,
      failedRuns: 0,
      reference: reference.length,
      lost: 0,
      duplicated: 0,
      resegmented: 0,
      extra: 0,
      restarts: 0,
      replayedSec: 0,
      lossReported: 0,
      speechSec: 0,
      unreportedLost: 0,
      unreportedLostSec: 0,
      errors: {},
    };
    live[name] = result;
    const more = () =>
      options.speechSec === undefined
        ? performance.now() < deadline
        : result.speechSec + 1e-9 < options.speechSec &&
          result.runs < 10 * (options.speechSec / clipSec) + 10;
    liveLoops++;
    try {
      while (more()) {
        result.runs++;
        let run: LiveRun | undefined;
        try {
          run = await waits.run((signal, alive) =>
            liveRun(client, kind, transport, livePcm, speed, signal, alive),
          );
          const diff = diffWords(reference, run.items);
          result.lost += diff.lost;
          result.duplicated += diff.duplicated;
          result.resegmented += diff.resegmented;
          result.extra += diff.extra;
          result.speechSec += clipSec;
          if (run.lost) result.lossReported++;
        } catch (err) {
          result.failedRuns++;
          count(result.errors, codeOf(err));
          run = (err as { run?: LiveRun }).run;
          log(
            `${name}: run ${result.runs} failed (${(err as Error).message}): ${run?.trace.slice(-12).join('; ')}`,
          );
        }
        if (!run) continue;
        result.restarts += run.changes.filter((c) => c.reason === 'restart').length;
        result.replayedSec += run.changes.reduce((s, c) => s + (c.replaySec ?? 0), 0);
        const missing = unreported(reference, run);
        result.unreportedLost += missing.count;
        result.unreportedLostSec += missing.sec;
        const around = (w: TimedWord) =>
          run!.items
            .filter((x) => x.end_time > w.start_time - 1 && x.start_time < w.end_time + 1)
            .map((x) => `${x.start_time.toFixed(2)}-${x.end_time.toFixed(2)} ${x.word}`)
            .join(', ');
        for (const w of missing.words)
          log(
            `${name}: run ${result.runs}: not reported lost: ${w.start_time.toFixed(2)}-${w.end_time.toFixed(2)} ${w.word} (the run has: ${around(w)}; sessions began at ${run.changes.map((c) => c.offsetSec.toFixed(2)).join(', ')})`,
          );
      }
    } finally {
      liveLoops--;
    }
  };

  /** Between two operations of a fast, batch or TTS loop. */
  const gap = () =>
    options.gapMs ? new Promise((resolve) => setTimeout(resolve, options.gapMs)) : undefined;

  const fast: SoakReport['fast'] = {};
  const fastLoop = async (transport: 'http' | 'socketio') => {
    const result = { runs: 0, ok: 0, errors: {}, lost: 0, duplicated: 0 };
    fast[transport] = result;
    while (running()) {
      result.runs++;
      try {
        const words: TimedWord[] = [];
        await waits.run(async (signal) => {
          for await (const r of client.fast.transcribe(wav, { transport, language: 'en', signal }))
            words.push(...r.words);
        });
        const diff = diffWords(fastReference.get(transport)!, words);
        result.lost += diff.lost;
        result.duplicated += diff.duplicated;
        result.ok++;
      } catch (err) {
        count(result.errors, codeOf(err));
      }
      await gap();
    }
  };

  const batch = { runs: 0, ok: 0, errors: {} as Record<string, number>, jobsCreated: 0, duplicateJobs: 0 };
  let submitted = 0;
  const batchLoop = async () => {
    while (running()) {
      batch.runs++;
      try {
        await waits.run(async (signal) => {
          const ack = await client.batch.submit(wav, { language: 'en', signal });
          submitted++;
          await client.batch.wait(ack.jobId, {
            signal,
            initialIntervalMs: 50,
            maxIntervalMs: 200,
            timeoutMs: 20_000,
          });
        });
        batch.ok++;
      } catch (err) {
        // An ambiguous submission may have created a job: it counts as submitted, never resent.
        if ((err as { ambiguous?: boolean }).ambiguous) submitted++;
        count(batch.errors, codeOf(err));
      }
      await gap();
    }
  };

  const tts: SoakReport['tts'] = {};
  const ttsLoop = async (transport: 'http' | 'socketio') => {
    const result = { runs: 0, ok: 0, errors: {} };
    tts[transport] = result;
    while (running()) {
      result.runs++;
      try {
        await waits.run((signal) =>
          client.tts.synthesizeToBuffer({
            text: 'Nothing lost, nothing leaked, nothing hangs.',
            transport,
            signal,
          }),
        );
        result.ok++;
      } catch (err) {
        count(result.errors, codeOf(err));
      }
      await gap();
    }
  };

  try {
    await Promise.all([
      liveLoop('stt', 'http'),
      liveLoop('stt', 'socketio'),
      liveLoop('diarization', 'http'),
      liveLoop('diarization', 'socketio'),
      fastLoop('http'),
      fastLoop('socketio'),
      batchLoop(),
      ttsLoop('http'),
      ttsLoop('socketio'),
    ]);
  } finally {
    clearInterval(faulting);
    clearInterval(sampler);
    for (const f of added) f.remove();
  }
  sample();

  // What is still held once everything ended: client slots (a failed session's slot is held
  // until it was ended at the service), then what the service counts as running.
  const held = () => Object.fromEntries(Object.entries(emulator.stats().concurrent).filter(([, n]) => n > 0));
  const settle = performance.now() + 10_000;
  while (performance.now() < settle && client.admissionStats().some((s) => s.running > 0)) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const slotsHeldAtEnd = held();
  const expired = performance.now() + (SOAK_SESSION_EXPIRY_SEC + 2) * 1000;
  while (performance.now() < expired && Object.keys(held()).length > 0) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const stats = emulator.stats();
  batch.jobsCreated = stats.jobsCreated;
  batch.duplicateJobs = Math.max(0, stats.jobsCreated - submitted);
  const slotsHeld = {
    service: Object.fromEntries(Object.entries(stats.concurrent).filter(([, n]) => n > 0)),
    client: Object.fromEntries(
      client
        .admissionStats()
        .filter((s) => s.running > 0)
        .map((s) => [s.workload, s.running]),
    ),
  };
  const faultsApplied = stats.faultsApplied;
  await client.close();
  await emulator.close();
  await new Promise((resolve) => setTimeout(resolve, 100));
  const handlesAfter = resources();
  const handlesLeftOpen: Record<string, number> = {};
  for (const [type, n] of Object.entries(handlesAfter)) {
    const extra = n - (handlesBefore[type] ?? 0);
    if (extra > 0) handlesLeftOpen[type] = extra;
  }
  const last = (xs: [number, number][]) => xs.at(-1)![1];
  return {
    durationSec: options.durationSec,
    ...(options.speechSec !== undefined ? { speechSec: options.speechSec } : {}),
    pace: speed,
    faultPeriodMs: options.faultPeriodMs ?? 2000,
    live,
    fast,
    batch,
    tts,
    faultsApplied,
    slotsHeld,
    slotsHeldAtEnd,
    memory: {
      rssStartMiB: Math.round(memory.rss[0]![1]),
      rssEndMiB: Math.round(last(memory.rss)),
      rssSlopeMiBPerMin: Number(slopePerMinute(memory.rss).toFixed(2)),
      heapSlopeMiBPerMin: Number(slopePerMinute(memory.heap).toFixed(2)),
    },
    handlesLeftOpen,
    longestWaitMs: Math.round(waits.longestMs),
    unboundedWaits: waits.unbounded,
  };
}

function formatReport(r: SoakReport): string {
  const lines = [
    `soak: ${r.speechSec === undefined ? `${r.durationSec} s` : `${r.speechSec} s of speech per live workload`}, live at ${r.pace}x, faults every ${r.faultPeriodMs} ms`,
  ];
  lines.push(
    'workload               ref  runs  speech s  failed  lost  dup  reseg  extra  restarts  replayed s  loss reported  not reported lost (s)',
  );
  for (const [name, x] of Object.entries(r.live)) {
    lines.push(
      `${name.padEnd(20)}${String(x.reference).padStart(6)}${String(x.runs).padStart(6)}${x.speechSec.toFixed(0).padStart(10)}${String(x.failedRuns).padStart(8)}${String(x.lost).padStart(6)}${String(x.duplicated).padStart(5)}${String(x.resegmented).padStart(7)}${String(x.extra).padStart(7)}${String(x.restarts).padStart(10)}${x.replayedSec.toFixed(1).padStart(12)}${String(x.lossReported).padStart(15)}${`${x.unreportedLost} (${x.unreportedLostSec.toFixed(2)})`.padStart(24)}`,
    );
  }
  for (const [name, x] of Object.entries(r.fast))
    lines.push(
      `fast.${name}: ${x.ok}/${x.runs} ok, lost ${x.lost}, dup ${x.duplicated}, errors ${JSON.stringify(x.errors)}`,
    );
  lines.push(
    `batch: ${r.batch.ok}/${r.batch.runs} ok, jobs created ${r.batch.jobsCreated}, duplicate jobs ${r.batch.duplicateJobs}, errors ${JSON.stringify(r.batch.errors)}`,
  );
  for (const [name, x] of Object.entries(r.tts))
    lines.push(`tts.${name}: ${x.ok}/${x.runs} ok, errors ${JSON.stringify(x.errors)}`);
  lines.push(`faults applied: ${JSON.stringify(r.faultsApplied)}`);
  lines.push(
    `slots held after the service's ${SOAK_SESSION_EXPIRY_SEC} s expiry: ${JSON.stringify(r.slotsHeld)}; as the client finished: ${JSON.stringify(r.slotsHeldAtEnd)}`,
  );
  lines.push(`memory: ${JSON.stringify(r.memory)}`);
  lines.push(`handles left open: ${JSON.stringify(r.handlesLeftOpen)}`);
  lines.push(`longest wait: ${r.longestWaitMs} ms; unbounded waits: ${r.unboundedWaits}`);
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const value = (name: string, fallback: number) => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  const speech = args.includes('--speech') ? value('--speech', 0) : undefined;
  const clip = args.includes('--clip') ? value('--clip', 0) : undefined;
  const report = await runSoak({
    durationSec: value('--duration', 60),
    ...(speech !== undefined ? { speechSec: speech } : {}),
    ...(clip !== undefined ? { clipSec: clip } : {}),
    pace: value('--pace', 4),
    faultPeriodMs: value('--period', 2000),
    gapMs: value('--gap', 0),
    log: (line) => console.error(line),
  });
  console.log(args.includes('--json') ? JSON.stringify(report, null, 2) : formatReport(report));
}
