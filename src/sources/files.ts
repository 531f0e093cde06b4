// File sources: audio files found under paths (a deterministic walk that never follows
// directory symlinks), and a Readable of one file.

import { createReadStream, type Dirent, type ReadStream, type Stats } from 'node:fs';
import { lstat, readdir, stat } from 'node:fs/promises';
import { basename, extname, join, relative } from 'node:path';

/** Extensions treated as audio by `walkAudioFiles` (lower case, no dot). */
export const AUDIO_EXTENSIONS: ReadonlySet<string> = new Set([
  'wav',
  'wave',
  'mp3',
  'flac',
  'm4a',
  'mp4',
  'aac',
  'ogg',
  'oga',
  'opus',
  'webm',
  'mka',
  'alaw',
  'mulaw',
  'ulaw',
  'amr',
  'wma',
]);

export interface AudioFile {
  path: string;
  /** Path relative to the directory given (a file given directly: its base name). */
  relative: string;
  size: number;
  mtimeMs: number;
  /**
   * Set when the walk could not read this path (a directory it may not list, a broken symlink,
   * a file gone between listing and reading it): the path is reported, not skipped, so every
   * input ends with a recorded reason. `size` and `mtimeMs` are 0 then.
   */
  unreadable?: { code: string; message: string };
}

export interface WalkOptions {
  extensions?: ReadonlySet<string>;
  signal?: AbortSignal;
}

function unreadable(path: string, relative: string, err: unknown, what: string): AudioFile {
  const code = (err as NodeJS.ErrnoException)?.code ?? 'ERR_UNREADABLE';
  return {
    path,
    relative,
    size: 0,
    mtimeMs: 0,
    unreadable: { code, message: `cannot read ${what} ${path}: ${code}` },
  };
}

/**
 * Audio files under `inputs` (files or directories), in a stable order: each directory's
 * entries sorted by name, hidden entries skipped, directory symlinks not followed (no loops).
 * A path the walk cannot read is yielded with `unreadable` set rather than thrown, and the walk
 * goes on. Abort stops it with the signal's reason.
 */
export async function* walkAudioFiles(
  inputs: readonly string[],
  options: WalkOptions = {},
): AsyncGenerator<AudioFile> {
  const extensions = options.extensions ?? AUDIO_EXTENSIONS;
  const isAudio = (name: string) => extensions.has(extname(name).slice(1).toLowerCase());
  for (const input of inputs) {
    options.signal?.throwIfAborted();
    let info: Stats;
    try {
      info = await stat(input);
    } catch (err) {
      yield unreadable(input, basename(input), err, 'input');
      continue;
    }
    if (info.isFile()) {
      yield { path: input, relative: basename(input), size: info.size, mtimeMs: info.mtimeMs };
      continue;
    }
    if (!info.isDirectory()) {
      const message = `${input} is neither a file nor a directory`;
      yield {
        path: input,
        relative: basename(input),
        size: 0,
        mtimeMs: 0,
        unreadable: { code: 'ERR_NOT_A_FILE', message },
      };
      continue;
    }
    const pending = [input];
    while (pending.length > 0) {
      const dir = pending.shift()!;
      let entries: Dirent[];
      try {
        entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) =>
          a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
        );
      } catch (err) {
        yield unreadable(dir, relative(input, dir) || basename(dir), err, 'directory');
        continue;
      }
      const subdirs: string[] = [];
      for (const entry of entries) {
        options.signal?.throwIfAborted();
        if (entry.name.startsWith('.')) continue;
        const path = join(dir, entry.name);
        if (entry.isDirectory()) subdirs.push(path);
        else if ((entry.isFile() || entry.isSymbolicLink()) && isAudio(entry.name)) {
          let file: Stats;
          try {
            file = entry.isSymbolicLink() ? await stat(path) : await lstat(path);
          } catch (err) {
            // A broken symlink, or a file removed since the listing.
            yield unreadable(path, relative(input, path), err, 'file');
            continue;
          }
          if (file.isFile())
            yield { path, relative: relative(input, path), size: file.size, mtimeMs: file.mtimeMs };
        }
      }
      pending.unshift(...subdirs);
    }
  }
}

/** A Readable of a file, with a read size suited to decoding. */
export function fromFile(
  path: string,
  options: { highWaterMark?: number; signal?: AbortSignal } = {},
): ReadStream {
  return createReadStream(path, {
    highWaterMark: options.highWaterMark ?? 256 * 1024,
    ...(options.signal ? { signal: options.signal } : {}),
  });
}
