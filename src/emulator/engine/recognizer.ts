// The emulator's recognizer: PocketSphinx processes, at most one per core, decoding utterances
// for live streams, fast requests and batch jobs out of the event loop. Work waits in a queue
// by class (live, then fast, then batch), served round-robin among its owners (a stream, a
// request, a job) so that no owner holds the others back; partial results are decoded only by
// a process that would otherwise be idle.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError } from '../../protocol/errors.ts';
import {
  type PocketSphinxInstall,
  PocketSphinxProcess,
  type RecognizedWord,
  RecognizerError,
  type Utterance,
} from './pocketsphinx.ts';

export type WorkClass = 'live' | 'fast' | 'batch';
const CLASSES: readonly WorkClass[] = ['live', 'fast', 'batch'];

/** The recognizer's side of `Emulator.stats()`. */
export interface RecognizerStats {
  /** Which engine gives the words: `generated` (from speech regions) or `pocketsphinx`. */
  engine: 'generated' | 'pocketsphinx';
  /** Processes that may decode at once (the machine's cores, shared among threads). */
  processes: number;
  /** Processes running now, and how many of them are decoding. */
  running: number;
  busy: number;
  /** Utterances waiting for a process now, their audio seconds, and the most that ever waited. */
  queued: number;
  queuedAudioSec: number;
  maxQueued: number;
  /** Utterances decoded (finals and partials), and their audio seconds. */
  utterances: number;
  audioSec: number;
  /** Partial results decoded, and partials skipped because no process was idle. */
  partials: number;
  partialsSkipped: number;
  /** CPU seconds the recognizer processes used (user + system). */
  cpuSec: number;
  /** Decodes that failed (a process that died or hung; each is tried again once). */
  failures: number;
}

export const generatedRecognizerStats = (): RecognizerStats => ({
  engine: 'generated',
  processes: 0,
  running: 0,
  busy: 0,
  queued: 0,
  queuedAudioSec: 0,
  maxQueued: 0,
  utterances: 0,
  audioSec: 0,
  partials: 0,
  partialsSkipped: 0,
  cpuSec: 0,
  failures: 0,
});

interface Job {
  utterance: Utterance;
  owner: object;
  partial: boolean;
  attempts: number;
  resolve: (words: RecognizedWord[]) => void;
  reject: (err: Error) => void;
}

/** Thrown to the owner of work that was cancelled (its stream or request ended). */
export class RecognitionCancelled extends Error {
  override name = 'RecognitionCancelled';
}

/** A process that stays idle this long exits (a fresh one starts when work comes). */
const IDLE_EXIT_MS = 10_000;
/** A decode taking longer than this (plus a factor of its audio) is taken for a hung process. */
const DECODE_TIMEOUT_MS = 30_000;
const DECODE_TIMEOUT_PER_AUDIO_SEC_MS = 5_000;

interface Worker {
  proc: PocketSphinxProcess;
  job: Job | undefined;
  idleTimer: NodeJS.Timeout | undefined;
}

export class RecognizerPool {
  readonly #install: PocketSphinxInstall;
  readonly processes: number;
  readonly #workers = new Set<Worker>();
  /** Waiting work per class: owners in turn order, each with its jobs in order. */
  readonly #queues = new Map<WorkClass, Map<object, Job[]>>(CLASSES.map((c) => [c, new Map()]));
  #dir: string | undefined;
  #fifoSeq = 0;
  #closed = false;
  #queued = 0;
  #queuedAudioSec = 0;
  #maxQueued = 0;
  #utterances = 0;
  #audioSec = 0;
  #partials = 0;
  #partialsSkipped = 0;
  #failures = 0;
  /** CPU seconds of processes that have exited. */
  #pastCpuSec = 0;

  constructor(install: PocketSphinxInstall, processes: number) {
    if (!(Number.isInteger(processes) && processes >= 1))
      throw new RangeError('recognizer processes must be an integer >= 1');
    this.#install = install;
    this.processes = processes;
    if (/\s/.test(tmpdir()))
      throw new ConfigError(
        `engine pocketsphinx: the temp directory ${tmpdir()} has white space, which PocketSphinx cannot read`,
      );
  }

  /** Closed with the emulator: no more work is taken. */
  get closed(): boolean {
    return this.#closed;
  }

  /** A private directory for utterance files and the processes' FIFOs (made when first needed). */
  get directory(): string {
    this.#dir ??= mkdtempSync(join(tmpdir(), 'speechpipe-recognizer-'));
    return this.#dir;
  }

  /** Decode `utterance` when a process is free: `owner`'s work waits its turn in `workClass`. */
  recognize(utterance: Utterance, owner: object, workClass: WorkClass): Promise<RecognizedWord[]> {
    if (this.#closed) return Promise.reject(new RecognitionCancelled('the recognizer closed'));
    return new Promise((resolve, reject) => {
      const job: Job = { utterance, owner, partial: false, attempts: 0, resolve, reject };
      const queue = this.#queues.get(workClass)!;
      let jobs = queue.get(owner);
      if (!jobs) {
        jobs = [];
        queue.set(owner, jobs);
      }
      jobs.push(job);
      this.#queued++;
      this.#queuedAudioSec += seconds(utterance);
      this.#maxQueued = Math.max(this.#maxQueued, this.#queued);
      this.#dispatch();
    });
  }

  /**
   * Whether a partial result would be decoded now: by a process that would otherwise be idle,
   * with nothing queued, one process always left for finals when there are several. Partials
   * never wait and never hold back a final; one that cannot run is counted as skipped.
   */
  partialWouldRun(): boolean {
    let free = this.processes - this.#workers.size;
    for (const w of this.#workers) if (!w.job && !w.proc.dead) free++;
    const ok = !this.#closed && this.#queued === 0 && free >= (this.processes > 1 ? 2 : 1);
    if (!ok) this.#partialsSkipped++;
    return ok;
  }

  /** Decode a partial result now if `partialWouldRun()`; undefined (skipped) otherwise. */
  recognizePartial(utterance: Utterance, owner: object): Promise<RecognizedWord[]> | undefined {
    if (!this.partialWouldRun()) return undefined;
    return new Promise((resolve, reject) => {
      const job: Job = { utterance, owner, partial: true, attempts: 1, resolve, reject };
      this.#run(this.#idleWorker() ?? this.#spawn(), job);
    });
  }

  /**
   * `owner` is gone: its waiting work is dropped (rejected with `RecognitionCancelled`) and a
   * process decoding for it is stopped, so an ended stream or request costs no more CPU.
   */
  cancel(owner: object): void {
    for (const queue of this.#queues.values()) {
      const jobs = queue.get(owner);
      if (!jobs) continue;
      queue.delete(owner);
      for (const job of jobs) {
        this.#unqueue(job);
        job.reject(new RecognitionCancelled('its stream or request ended'));
      }
    }
    for (const worker of this.#workers) {
      if (worker.job?.owner !== owner) continue;
      const job = worker.job;
      worker.job = undefined;
      job.reject(new RecognitionCancelled('its stream or request ended'));
      this.#retire(worker);
    }
    this.#dispatch();
  }

  stats(): RecognizerStats {
    let busy = 0;
    let cpuSec = this.#pastCpuSec;
    for (const w of this.#workers) {
      if (w.job) busy++;
      cpuSec += w.proc.cpuSeconds();
    }
    return {
      engine: 'pocketsphinx',
      processes: this.processes,
      running: this.#workers.size,
      busy,
      queued: this.#queued,
      queuedAudioSec: round3(this.#queuedAudioSec),
      maxQueued: this.#maxQueued,
      utterances: this.#utterances,
      audioSec: round3(this.#audioSec),
      partials: this.#partials,
      partialsSkipped: this.#partialsSkipped,
      cpuSec: round3(cpuSec),
      failures: this.#failures,
    };
  }

  /** Stop every process (waiting for them to exit) and drop all waiting work. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const queue of this.#queues.values()) {
      for (const jobs of queue.values())
        for (const job of jobs) job.reject(new RecognitionCancelled('the recognizer closed'));
      queue.clear();
    }
    this.#queued = 0;
    this.#queuedAudioSec = 0;
    const exits: Promise<void>[] = [];
    for (const worker of [...this.#workers]) {
      exits.push(worker.proc.exited);
      const job = worker.job;
      worker.job = undefined;
      job?.reject(new RecognitionCancelled('the recognizer closed'));
      this.#retire(worker);
    }
    await Promise.all(exits);
    if (this.#dir) rmSync(this.#dir, { recursive: true, force: true });
  }

  #idleWorker(): Worker | undefined {
    for (const w of this.#workers) if (!w.job && !w.proc.dead) return w;
    return undefined;
  }

  #spawn(): Worker {
    const proc = new PocketSphinxProcess(this.#install, join(this.directory, `decoder-${++this.#fifoSeq}`));
    const worker: Worker = { proc, job: undefined, idleTimer: undefined };
    this.#workers.add(worker);
    void proc.exited.then(() => {
      this.#pastCpuSec += proc.cpuSeconds();
      this.#workers.delete(worker);
      this.#dispatch();
    });
    return worker;
  }

  /** Take the next job: the first class with work, its next owner in turn (who goes last). */
  #next(): Job | undefined {
    for (const workClass of CLASSES) {
      const queue = this.#queues.get(workClass)!;
      for (const [owner, jobs] of queue) {
        const job = jobs.shift()!;
        queue.delete(owner);
        if (jobs.length > 0) queue.set(owner, jobs);
        this.#unqueue(job);
        return job;
      }
    }
    return undefined;
  }

  #dispatch(): void {
    if (this.#closed) return;
    while (this.#queued > 0) {
      const worker = this.#idleWorker() ?? (this.#workers.size < this.processes ? this.#spawn() : undefined);
      if (!worker) return;
      this.#run(worker, this.#next()!);
    }
  }

  #run(worker: Worker, job: Job): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    worker.job = job;
    job.attempts++;
    const audio = seconds(job.utterance);
    const watchdog = setTimeout(
      () => worker.proc.stop(),
      DECODE_TIMEOUT_MS + audio * DECODE_TIMEOUT_PER_AUDIO_SEC_MS,
    );
    watchdog.unref();
    worker.proc.decode(job.utterance).then(
      (words) => {
        clearTimeout(watchdog);
        if (worker.job !== job) return; // cancelled meanwhile
        worker.job = undefined;
        this.#utterances++;
        this.#audioSec += audio;
        if (job.partial) this.#partials++;
        job.resolve(words);
        this.#idle(worker);
      },
      (err: Error) => {
        clearTimeout(watchdog);
        if (worker.job !== job) return;
        worker.job = undefined;
        this.#failures++;
        this.#retire(worker);
        if (job.attempts < 2 && !this.#closed) {
          // A process that died or hung: once more on a fresh one, ahead of the queue.
          this.#run(this.#spawn(), job);
          return;
        }
        job.reject(err instanceof RecognizerError ? err : new RecognizerError(String(err)));
        this.#dispatch();
      },
    );
  }

  #idle(worker: Worker): void {
    this.#dispatch();
    if (worker.job || this.#closed) return;
    worker.idleTimer = setTimeout(() => {
      worker.idleTimer = undefined;
      if (!worker.job) this.#retire(worker);
    }, IDLE_EXIT_MS);
    worker.idleTimer.unref();
  }

  #retire(worker: Worker): void {
    if (worker.idleTimer) clearTimeout(worker.idleTimer);
    worker.idleTimer = undefined;
    worker.proc.stop();
  }

  #unqueue(job: Job): void {
    this.#queued--;
    this.#queuedAudioSec = Math.max(0, this.#queuedAudioSec - seconds(job.utterance));
  }
}

const seconds = (u: Utterance): number => Math.max(0, u.endSec - u.startSec);
const round3 = (x: number): number => Math.round(x * 1000) / 1000;
