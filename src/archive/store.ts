// The archive's results directory: the manifest, collision-safe result names, the result files
// (written atomically), and what a resumed run skips or waits for. One per run; shared by
// transcribeEach (resume decisions, batch job ids recorded the moment the service accepts them)
// and writeTranscripts (results and manifest entries).

import { createHash } from 'node:crypto';
import { access, readdir, rm } from 'node:fs/promises';
import { extname, join, relative, resolve } from 'node:path';
import { Manifest, type ManifestEntry, type ManifestSettings } from '../sinks/manifest.ts';
import { isAtomicTemporary, writeFileAtomic } from '../sinks/text-file.ts';
import type { AudioFile } from '../sources/files.ts';
import { renderSpeakerSvg } from '../transforms/speaker-svg.ts';
import { renderCaptions } from '../transforms/to-captions.ts';
import {
  ARCHIVE_FORMATS,
  type ArchiveFormat,
  type ArchiveSettings,
  DEFAULT_ARCHIVE_FORMATS,
  settingsOf,
} from './settings.ts';
import type { FileResult } from './transcribe-file.ts';

/** Options of {@link openArchiveStore}. */
export interface ArchiveStoreOptions extends ArchiveSettings {
  /** Where results go (`out/<relative path>.<format>`) and `out/manifest.ndjson`. */
  out: string;
  /** Default `['vtt', 'json']`. */
  formats?: readonly ArchiveFormat[];
  /**
   * Skip inputs the manifest says are done, unchanged, with the same settings and whose
   * outputs exist; wait for batch jobs an earlier run submitted instead of submitting again;
   * remove the temporary files a killed run left in `out`. Default false.
   */
  resume?: boolean;
}

/** What to do with one input. */
export type ArchivePlan =
  | { action: 'skip'; outputs: string[] }
  | { action: 'run'; outputs: string[]; pendingJob?: string };

/**
 * Open (or start) an archive's results directory. With `resume`, the temporary files a killed
 * run left are removed first (`removedTemporary` says how many).
 */
export async function openArchiveStore(options: ArchiveStoreOptions): Promise<ArchiveStore> {
  const manifest = await Manifest.open(join(options.out, 'manifest.ndjson'));
  const removed = options.resume ? await removeTemporaryFiles(options.out) : 0;
  return new ArchiveStore(options, manifest, removed);
}

/**
 * An archive's results directory: the manifest, collision-safe result names, the result files,
 * and what a resumed run skips or waits for. One per run; open it with {@link openArchiveStore}.
 */
export class ArchiveStore {
  /** The results directory. */
  readonly out: string;
  /** The formats written for each input. */
  readonly formats: readonly ArchiveFormat[];
  /** The run's settings, recorded with each manifest entry. */
  readonly settings: ArchiveSettings;
  /** Whether inputs done in an earlier run are skipped. */
  readonly resume: boolean;
  /** The run's manifest, `out/manifest.ndjson`. */
  readonly manifest: Manifest;
  /** Temporary files of a killed run removed on open (`resume` only). */
  readonly removedTemporary: number;
  readonly #names: OutputNames;

  /** A store over a manifest already open; {@link openArchiveStore} opens both. */
  constructor(options: ArchiveStoreOptions, manifest: Manifest, removedTemporary = 0) {
    this.out = options.out;
    this.formats = options.formats ?? DEFAULT_ARCHIVE_FORMATS;
    this.settings = settingsOf(options);
    this.resume = options.resume === true;
    this.manifest = manifest;
    this.removedTemporary = removedTemporary;
    this.#names = new OutputNames(options.out, manifest.entries(), ARCHIVE_FORMATS);
  }

  #identity(file: AudioFile) {
    return {
      input: file.path,
      size: file.size,
      mtimeMs: file.mtimeMs,
      settings: this.settings as ManifestSettings,
    };
  }

  /**
   * Give `file` its result name now. Names go to inputs in the order they are claimed (a
   * colliding later one gets the hash), so a run that starts inputs in another order claims
   * them in walk order first. `plan` claims what was not claimed.
   */
  claim(file: AudioFile): void {
    this.#names.for(file);
  }

  /**
   * The result files of `file`, and whether it runs. Every input claims its name here, in walk
   * order, even unreadable ones: names must not depend on which inputs could be read.
   */
  async plan(file: AudioFile): Promise<ArchivePlan> {
    const name = this.#names.for(file);
    const outputs = this.formats.map((format) => join(this.out, `${name}.${format}`));
    if (!this.resume || file.skipped || file.unreadable) return { action: 'run', outputs };
    const settings = this.settings as ManifestSettings;
    if (this.manifest.isDone(file, { settings, outputs })) {
      const exist = await Promise.all(
        outputs.map((o) =>
          access(o).then(
            () => true,
            () => false,
          ),
        ),
      );
      if (exist.every(Boolean)) return { action: 'skip', outputs };
    }
    const pendingJob = this.manifest.pendingJob(file, settings);
    return pendingJob === undefined ? { action: 'run', outputs } : { action: 'run', outputs, pendingJob };
  }

  /** A batch job holds `file`'s work: recorded before it is waited for. */
  submitted(file: AudioFile, jobId: string): Promise<void> {
    return this.manifest.record({ ...this.#identity(file), status: 'submitted', jobId });
  }

  /** The walk found `file` and did not take it. */
  skipped(file: AudioFile, reason: { code: string; message: string }): Promise<void> {
    return this.manifest.record({ ...this.#identity(file), status: 'skipped', error: reason });
  }

  /**
   * `file` failed. A batch job that holds its work stays recorded (the one given, or for an
   * unreadable input the one an earlier run recorded), so a later resume waits for it.
   */
  failed(file: AudioFile, error: { code: string; message: string }, jobId?: string): Promise<void> {
    let job: Partial<ManifestEntry> = jobId === undefined ? {} : { jobId };
    if (jobId === undefined && file.unreadable) {
      const previous = this.manifest.get(file.path);
      if (previous?.jobId !== undefined && previous.status !== 'done')
        job = {
          size: previous.size,
          mtimeMs: previous.mtimeMs,
          ...(previous.settings ? { settings: previous.settings } : {}),
          jobId: previous.jobId,
        };
    }
    return this.manifest.record({ ...this.#identity(file), ...job, status: 'failed', error });
  }

  /** Write `file`'s results (each atomically), then record it done. */
  async done(file: AudioFile, outputs: readonly string[], result: FileResult): Promise<void> {
    await writeResults(file, outputs, result, this.formats, this.settings);
    await this.recordDone(file, outputs, result);
  }

  /** Record `file` done, its results written already (by a cluster worker). */
  recordDone(
    file: AudioFile,
    outputs: readonly string[],
    result: Pick<FileResult, 'jobId' | 'audioSeconds' | 'warnings'>,
  ): Promise<void> {
    return this.manifest.record({
      ...this.#identity(file),
      status: 'done',
      ...(result.jobId === undefined ? {} : { jobId: result.jobId }),
      outputs: [...outputs],
      ...(result.audioSeconds === undefined ? {} : { audioSeconds: result.audioSeconds }),
      ...(result.warnings ? { warnings: result.warnings } : {}),
    });
  }

  /** Resolves once every manifest entry recorded so far is written. */
  flush(): Promise<void> {
    return this.manifest.flush();
  }
}

/** Write `file`'s result files, `outputs[i]` in `formats[i]`, each atomically. */
export async function writeResults(
  file: AudioFile,
  outputs: readonly string[],
  result: FileResult,
  formats: readonly ArchiveFormat[],
  settings: ArchiveSettings,
): Promise<void> {
  for (const [i, format] of formats.entries())
    await writeFileAtomic(outputs[i]!, renderResult(format, file, result, settings));
}

/** One result file's text. */
export function renderResult(
  format: ArchiveFormat,
  file: AudioFile,
  result: FileResult,
  settings: ArchiveSettings,
): string {
  // The recording's length bounds the cues and the timeline's axis (a service's nonsense: unknown).
  const seconds =
    result.audioSeconds !== undefined && Number.isFinite(result.audioSeconds) && result.audioSeconds > 0
      ? result.audioSeconds
      : undefined;
  if (format === 'vtt' || format === 'srt')
    return renderCaptions(result.words, {
      format,
      ...(seconds === undefined ? {} : { audioDurationMs: seconds * 1000 }),
    });
  if (format === 'txt') return `${result.transcript}\n`;
  if (format === 'svg')
    return renderSpeakerSvg(result.words, {
      title: file.relative,
      ...(seconds === undefined ? {} : { audioDurationSec: seconds }),
    });
  return `${JSON.stringify(
    {
      input: file.path,
      mode: settings.mode,
      language: settings.language,
      audioSeconds: result.audioSeconds,
      transcript: result.transcript,
      words: result.words,
    },
    null,
    2,
  )}\n`;
}

/** Remove the temporary files of writeFileAtomic (ours only, by their name) under `dir`. */
export async function removeTemporaryFiles(dir: string): Promise<number> {
  let removed = 0;
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    if (!entry.isFile() || !isAtomicTemporary(entry.name)) continue;
    await rm(join(entry.parentPath, entry.name), { force: true });
    removed++;
  }
  return removed;
}

/**
 * Result names: the input's path relative to the directory given (a file given directly: its
 * base name). When two inputs would share one, the later gets `~` and 8 hex digits of its
 * absolute path's hash. Names the manifest recorded stay with their inputs, so a name does not
 * move to another input because one became unreadable, was deleted or was added.
 */
class OutputNames {
  readonly #owner = new Map<string, string>();
  readonly #recorded = new Map<string, string>();

  constructor(out: string, entries: readonly ManifestEntry[], formats: readonly string[]) {
    for (const entry of entries) {
      const first = entry.outputs?.[0];
      if (first === undefined) continue;
      const ext = formats.find((f) => first.endsWith(`.${f}`)) ?? extname(first).slice(1);
      const name = relative(out, first.slice(0, first.length - ext.length - 1));
      const path = resolve(entry.input);
      // Two entries with one name (a manifest written before names were kept apart): the
      // first keeps it, the other gets a name of its own when it runs again.
      const owner = this.#owner.get(name);
      if (owner !== undefined && owner !== path) continue;
      this.#owner.set(name, path);
      this.#recorded.set(path, name);
    }
  }

  for(file: AudioFile): string {
    const path = resolve(file.path);
    const recorded = this.#recorded.get(path);
    if (recorded !== undefined) return recorded;
    const wanted = fitName(file.relative, path);
    const owner = this.#owner.get(wanted);
    if (owner === undefined || owner === path) {
      this.#owner.set(wanted, path);
      this.#recorded.set(path, wanted);
      return wanted;
    }
    const name = `${fitName(file.relative, path, 9)}~${pathHash(path)}`;
    this.#owner.set(name, path);
    this.#recorded.set(path, name);
    return name;
  }
}

const pathHash = (path: string) => createHash('sha256').update(path).digest('hex').slice(0, 8);

/** Bytes a result name may use: 255 less the longest `.format` (and writeFileAtomic's temp
 * files fall back to a short name of their own). */
const NAME_BYTES = 255 - '.json'.length;

/**
 * The result name for `relative`, its last segment cut (at a character boundary) so that with
 * `reserve` more bytes and the format it stays within the 255-byte limit: a cut name ends in
 * `~` and 8 hex digits of the input's path, stable across runs.
 */
function fitName(relative: string, path: string, reserve = 0): string {
  const slash = Math.max(relative.lastIndexOf('/'), relative.lastIndexOf('\\'));
  const dir = relative.slice(0, slash + 1);
  const base = relative.slice(slash + 1);
  const limit = NAME_BYTES - reserve;
  if (Buffer.byteLength(base) <= limit) return relative;
  let cut = '';
  for (const ch of base) {
    if (Buffer.byteLength(cut + ch) > limit - 9) break;
    cut += ch;
  }
  return `${dir}${cut}~${pathHash(path)}`;
}
