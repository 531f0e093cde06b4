// A resumable run manifest: one NDJSON line per event of an input (a batch job submitted, the
// input done or failed), saying where its results are or why it failed. Appended as each input
// ends, so a crash loses at most the line being written; a torn last line is ignored when the
// manifest is read back, and ended with a newline before the next append so it takes no other
// entry with it. Read line by line; rewritten with only each input's latest entry when most of
// its lines are superseded, so reruns over a large archive do not grow it without bound.

import { createReadStream } from 'node:fs';
import { appendFile, mkdir, open, stat } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { writeFileAtomic } from './text-file.ts';

/** What an input's results depend on besides the input itself. */
export interface ManifestSettings {
  mode: string;
  language: string;
  speakers: boolean;
  /** What answered (the API URL, `emulator:<engine>`); absent in entries of older runs. */
  service?: string;
}

/**
 * One line of a manifest: an event of one input (a batch job submitted, the input done, failed or
 * skipped).
 */
export interface ManifestEntry {
  /** The input's path as given to the run. */
  input: string;
  /** The input's size in bytes when the entry was written. */
  size: number;
  /** The input's modification time (ms since the epoch) when the entry was written. */
  mtimeMs: number;
  /**
   * `submitted`: a batch job holds this input's work (`jobId`), not finished yet. `skipped`:
   * the walk found the path and did not take it (`error` says why: hidden, not a regular file,
   * a symlink not followed).
   */
  status: 'done' | 'failed' | 'submitted' | 'skipped';
  /** The settings the input was transcribed with. */
  settings?: ManifestSettings;
  /** The batch job that has (or had) this input's work. */
  jobId?: string;
  /** Files written for this input (done). */
  outputs?: string[];
  /** Why it failed or was skipped: a stable code and a message. */
  error?: { code: string; message: string };
  /** The input's audio duration in seconds (done). */
  audioSeconds?: number;
  /** Done, but the decoder skipped input it could not decode (a damaged or cut packet). */
  warnings?: Array<{ code: string; message: string }>;
  /** ISO time the entry was written. */
  at: string;
}

/** Compact on open when there are more than this many lines and most are superseded. */
const COMPACT_MIN_LINES = 1000;

/** Same settings; a service is compared only when both name one (older entries name none). */
function sameSettings(a: ManifestSettings | undefined, b: ManifestSettings): boolean {
  return (
    a !== undefined &&
    a.mode === b.mode &&
    a.language === b.language &&
    a.speakers === b.speakers &&
    (a.service === undefined || b.service === undefined || a.service === b.service)
  );
}

/**
 * A resumable run's manifest: an NDJSON file with one entry per event of an input, appended as it
 * happens, and read back to resume a run. Open it with {@link Manifest.open}.
 */
export class Manifest {
  /** The manifest file's path. */
  readonly path: string;
  readonly #latest = new Map<string, ManifestEntry>();
  #writing: Promise<void> = Promise.resolve();

  private constructor(path: string) {
    this.path = path;
  }

  /** Open (or start) a manifest; earlier entries are loaded for resuming. */
  static async open(given: string): Promise<Manifest> {
    // Absolute: entries are appended long after the open, wherever the process has changed
    // directory to since (a cluster run's follow records what workers did).
    const path = resolve(given);
    const manifest = new Manifest(path);
    await mkdir(dirname(path), { recursive: true });
    const info = await stat(path).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return undefined;
      throw err;
    });
    if (info === undefined || info.size === 0) return manifest;
    let lines = 0;
    const reader = createInterface({ input: createReadStream(path), crlfDelay: Infinity });
    for await (const line of reader) {
      if (!line.trim()) continue;
      lines++;
      try {
        const entry = JSON.parse(line) as ManifestEntry;
        if (typeof entry.input === 'string') manifest.#latest.set(entry.input, entry);
      } catch {
        // A line torn by a crash: that input simply runs again.
      }
    }
    if (lines > COMPACT_MIN_LINES && lines > 2 * manifest.#latest.size) {
      await manifest.#compact();
      return manifest;
    }
    // A torn last line (no newline): end it, so the next entry is a line of its own.
    const handle = await open(path, 'r');
    try {
      const last = Buffer.alloc(1);
      await handle.read(last, 0, 1, info.size - 1);
      if (last[0] !== 0x0a) await appendFile(path, '\n');
    } finally {
      await handle.close();
    }
    return manifest;
  }

  /** Rewrite the file with only the latest entry of each input (atomically, synced). */
  #compact(): Promise<void> {
    const latest = this.#latest;
    return writeFileAtomic(
      this.path,
      (function* () {
        for (const entry of latest.values()) yield `${JSON.stringify(entry)}\n`;
      })(),
    );
  }

  /** The last entry recorded for `input`. */
  get(input: string): ManifestEntry | undefined {
    return this.#latest.get(input);
  }

  /**
   * Whether `file` finished earlier with the same settings, has not changed since (same size
   * and mtime), and its entry lists every output now asked for (`outputs`; whether those files
   * still exist is the caller's check).
   */
  isDone(
    file: { path: string; size: number; mtimeMs: number },
    wanted: { settings: ManifestSettings; outputs: readonly string[] },
  ): boolean {
    const entry = this.#latest.get(file.path);
    return (
      entry?.status === 'done' &&
      entry.size === file.size &&
      entry.mtimeMs === file.mtimeMs &&
      sameSettings(entry.settings, wanted.settings) &&
      // The same file however the results directory was spelled (relative once, absolute
      // the next time): the paths are compared resolved.
      wanted.outputs.every((o) => entry.outputs?.some((e) => resolve(e) === resolve(o)))
    );
  }

  /**
   * The batch job to wait for instead of submitting `file` again: the latest entry says a job
   * was submitted (or its wait failed) for this unchanged input with the same settings.
   */
  pendingJob(
    file: { path: string; size: number; mtimeMs: number },
    settings: ManifestSettings,
  ): string | undefined {
    const entry = this.#latest.get(file.path);
    if (entry?.jobId === undefined || entry.status === 'done') return undefined;
    if (entry.size !== file.size || entry.mtimeMs !== file.mtimeMs || !sameSettings(entry.settings, settings))
      return undefined;
    // A job that itself ended failed is not waited for again.
    if (entry.status === 'failed' && entry.error?.code === 'ERR_JOB_NOT_DONE') return undefined;
    return entry.jobId;
  }

  /** Append an entry (writes are serialized, in call order). */
  record(entry: Omit<ManifestEntry, 'at'>): Promise<void> {
    const full: ManifestEntry = { ...entry, at: new Date().toISOString() };
    this.#latest.set(full.input, full);
    this.#writing = this.#writing.then(() => appendFile(this.path, `${JSON.stringify(full)}\n`));
    return this.#writing;
  }

  /** The latest entry of each input, in the order inputs were first recorded. */
  entries(): ManifestEntry[] {
    return [...this.#latest.values()];
  }

  /** Wait for pending writes. */
  flush(): Promise<void> {
    return this.#writing;
  }
}
