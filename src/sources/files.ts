// File sources: audio files found under paths (a deterministic walk that never follows
// directory symlinks), and a Readable of one file.

import { createReadStream, type ReadStream } from 'node:fs';
import { lstat, readdir, stat } from 'node:fs/promises';
import { basename, extname, join, relative } from 'node:path';
import { InvalidArgumentError } from '../protocol/errors.ts';

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
}

export interface WalkOptions {
  extensions?: ReadonlySet<string>;
  signal?: AbortSignal;
}

/**
 * Audio files under `inputs` (files or directories), in a stable order: each directory's
 * entries sorted by name, hidden entries skipped, directory symlinks not followed (no loops).
 */
export async function* walkAudioFiles(
  inputs: readonly string[],
  options: WalkOptions = {},
): AsyncGenerator<AudioFile> {
  const extensions = options.extensions ?? AUDIO_EXTENSIONS;
  const isAudio = (name: string) => extensions.has(extname(name).slice(1).toLowerCase());
  for (const input of inputs) {
    options.signal?.throwIfAborted();
    const info = await stat(input).catch((err: NodeJS.ErrnoException) => {
      throw new InvalidArgumentError(`cannot read ${input}: ${err.code ?? err.message}`);
    });
    if (info.isFile()) {
      yield { path: input, relative: basename(input), size: info.size, mtimeMs: info.mtimeMs };
      continue;
    }
    if (!info.isDirectory()) throw new InvalidArgumentError(`${input} is neither a file nor a directory`);
    const pending = [input];
    while (pending.length > 0) {
      const dir = pending.shift()!;
      const entries = (await readdir(dir, { withFileTypes: true })).sort((a, b) =>
        a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
      );
      const subdirs: string[] = [];
      for (const entry of entries) {
        options.signal?.throwIfAborted();
        if (entry.name.startsWith('.')) continue;
        const path = join(dir, entry.name);
        if (entry.isDirectory()) subdirs.push(path);
        else if ((entry.isFile() || entry.isSymbolicLink()) && isAudio(entry.name)) {
          const file = entry.isSymbolicLink() ? await stat(path).catch(() => undefined) : await lstat(path);
          if (file?.isFile())
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
