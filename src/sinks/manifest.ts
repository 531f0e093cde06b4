// A resumable run manifest: one NDJSON line per finished input, saying where its results are
// or why it failed. Appended as each input ends, so a crash loses at most the line being
// written; a torn last line is ignored when the manifest is read back.

import { appendFile, mkdir, readFile } from 'node:fs/promises';
import { dirname } from 'node:path';

export interface ManifestEntry {
  /** The input's path as given to the run. */
  input: string;
  size: number;
  mtimeMs: number;
  status: 'done' | 'failed';
  /** Files written for this input (done). */
  outputs?: string[];
  /** Why it failed: a stable code and a message (failed). */
  error?: { code: string; message: string };
  audioSeconds?: number;
  /** Done, but the decoder skipped input it could not decode (a damaged or cut packet). */
  warnings?: Array<{ code: string; message: string }>;
  /** ISO time the entry was written. */
  at: string;
}

export class Manifest {
  readonly path: string;
  readonly #latest = new Map<string, ManifestEntry>();
  #writing: Promise<void> = Promise.resolve();

  private constructor(path: string) {
    this.path = path;
  }

  /** Open (or start) a manifest; earlier entries are loaded for resuming. */
  static async open(path: string): Promise<Manifest> {
    const manifest = new Manifest(path);
    const text = await readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return '';
      throw err;
    });
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      try {
        const entry = JSON.parse(line) as ManifestEntry;
        if (typeof entry.input === 'string') manifest.#latest.set(entry.input, entry);
      } catch {
        // A line torn by a crash: that input simply runs again.
      }
    }
    await mkdir(dirname(path), { recursive: true });
    return manifest;
  }

  /** The last entry recorded for `input`. */
  get(input: string): ManifestEntry | undefined {
    return this.#latest.get(input);
  }

  /** Whether `file` finished earlier and has not changed since (same size and mtime). */
  isDone(file: { path: string; size: number; mtimeMs: number }): boolean {
    const entry = this.#latest.get(file.path);
    return entry?.status === 'done' && entry.size === file.size && entry.mtimeMs === file.mtimeMs;
  }

  /** Append an entry (writes are serialized, in call order). */
  record(entry: Omit<ManifestEntry, 'at'>): Promise<void> {
    const full: ManifestEntry = { ...entry, at: new Date().toISOString() };
    this.#latest.set(full.input, full);
    this.#writing = this.#writing.then(() => appendFile(this.path, `${JSON.stringify(full)}\n`));
    return this.#writing;
  }

  entries(): ManifestEntry[] {
    return [...this.#latest.values()];
  }

  /** Wait for pending writes. */
  flush(): Promise<void> {
    return this.#writing;
  }
}
