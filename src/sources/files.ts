// File sources: audio files found under paths (a deterministic walk that reports what it does
// not take, and follows symlinks only inside the inputs unless told), and a Readable of one file.

import { createReadStream, type Dirent, type ReadStream, type Stats } from 'node:fs';
import { lstat, open, readdir, realpath, stat } from 'node:fs/promises';
import { basename, extname, join, relative, resolve, sep } from 'node:path';
import picomatch from 'picomatch';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { destroyOnAbort } from '../transforms/abort.ts';

/**
 * Extensions of audio and video containers taken by `walkAudioFiles` (lower case, no dot).
 * A file without an extension is taken when its first bytes are a media container's.
 */
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
  'mkv',
  'mov',
  'm4v',
  'ts',
  'mts',
  'm2ts',
  'mxf',
  '3gp',
  '3g2',
  'avi',
]);

const startsWith = (b: Buffer, text: string, at = 0) =>
  b.length >= at + text.length && b.toString('latin1', at, at + text.length) === text;

/**
 * Whether `head` (a file's first bytes, 4 KiB are enough) is the start of a media container
 * or stream ffmpeg reads: RIFF/WAVE, AVI, MP3 (ID3 or a frame header), FLAC, Ogg, Matroska and
 * WebM, ISO media (MP4, MOV, M4A, 3GP), MPEG-TS, MXF, AMR, ADTS AAC, ASF (WMA).
 */
export function isMediaHead(head: Buffer): boolean {
  if (head.length < 4) return false;
  if (startsWith(head, 'RIFF') && (startsWith(head, 'WAVE', 8) || startsWith(head, 'AVI ', 8))) return true;
  if (startsWith(head, 'RIFX') || startsWith(head, 'RF64')) return true;
  if (startsWith(head, 'ID3') || startsWith(head, 'fLaC') || startsWith(head, 'OggS')) return true;
  if (startsWith(head, '#!AMR')) return true;
  if (head.readUInt32BE(0) === 0x1a45dfa3) return true; // EBML: Matroska, WebM
  if (head.readUInt32BE(0) === 0x060e2b34) return true; // MXF's SMPTE universal label
  if (head.readUInt32BE(0) === 0x3026b275) return true; // ASF
  if (['ftyp', 'moov', 'mdat', 'free', 'wide'].some((box) => startsWith(head, box, 4))) return true;
  // MPEG-TS: a sync byte every 188 bytes.
  if (head[0] === 0x47 && head.length >= 377 && head[188] === 0x47 && head[376] === 0x47) return true;
  // An MPEG audio frame (MP3, MP2) or ADTS AAC: 11 sync bits, then a valid layer/version.
  if (head[0] === 0xff && (head[1]! & 0xe0) === 0xe0) {
    const version = (head[1]! >> 3) & 3;
    const layer = (head[1]! >> 1) & 3;
    if (layer === 0) return (head[1]! & 0xf6) === 0xf0; // ADTS
    return version !== 1 && (head[2]! & 0xf0) !== 0xf0;
  }
  return false;
}

async function readHead(path: string, bytes = 4096): Promise<Buffer> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(bytes);
    const { bytesRead } = await handle.read(buffer, 0, bytes, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** One input found by {@link walkAudioFiles}. */
export interface AudioFile {
  /** Its path: the input given, or joined under the directory given. */
  path: string;
  /** Path relative to the directory given (a file given directly: its base name). */
  relative: string;
  /** Bytes. */
  size: number;
  /** Modification time, milliseconds since the epoch. */
  mtimeMs: number;
  /**
   * Set when the walk could not read this path (a directory it may not list, a broken symlink,
   * a file gone between listing and reading it): the path is reported, not skipped, so every
   * input ends with a recorded reason. `size` and `mtimeMs` are 0 then.
   */
  unreadable?: { code: string; message: string };
  /**
   * Set when the walk found this path and did not take it, with the reason: a hidden entry
   * (`ERR_HIDDEN`), a FIFO, socket or device (`ERR_NOT_REGULAR`: opening a FIFO could block
   * for good), a symlink leading outside the roots (`ERR_SYMLINK_OUTSIDE`) or to a directory
   * (`ERR_SYMLINK_DIR`) when symlinks are not followed. `size` and `mtimeMs` are 0 then.
   */
  skipped?: { code: string; message: string };
}

/** Options of {@link walkAudioFiles}: which files are taken. */
export interface WalkOptions {
  /** Extensions taken (lowercase, without the dot). Default {@link AUDIO_EXTENSIONS}. */
  extensions?: ReadonlySet<string>;
  /** Stops the walk: it throws the signal's reason. */
  signal?: AbortSignal;
  /**
   * Globs (picomatch syntax, matched against the path relative to the directory given, with
   * `/`): only files matching one are taken. Default: every media file.
   */
  include?: readonly string[];
  /**
   * Globs of files and directories left out (a directory matching one is not walked). Files
   * given directly are always taken.
   */
  exclude?: readonly string[];
  /**
   * Follow symlinks wherever they lead (directories too; a loop is walked once). Default
   * false: a file symlink is taken only when its target lies inside the roots given, and a
   * directory symlink is not followed.
   */
  followSymlinks?: boolean;
}

function skipped(path: string, relative: string, code: string, message: string): AudioFile {
  return { path, relative, size: 0, mtimeMs: 0, skipped: { code, message } };
}

function specialKind(entry: Dirent | Stats): string | undefined {
  if (entry.isFIFO()) return 'a FIFO';
  if (entry.isSocket()) return 'a socket';
  if (entry.isCharacterDevice() || entry.isBlockDevice()) return 'a device';
  return undefined;
}

const inside = (root: string, path: string) => path === root || path.startsWith(`${root}${sep}`);

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
 * goes on. A path reached twice (a file given and inside a directory given, `d/./a.wav` and
 * `d/a.wav`) is yielded once, the first time. Abort stops it with the signal's reason.
 */
export async function* walkAudioFiles(
  inputs: readonly string[],
  options: WalkOptions = {},
): AsyncGenerator<AudioFile> {
  const seen = new Set<string>();
  for await (const file of walk(inputs, options)) {
    const key = resolve(file.path);
    if (seen.has(key)) continue;
    seen.add(key);
    yield file;
  }
}

async function* walk(inputs: readonly string[], options: WalkOptions): AsyncGenerator<AudioFile> {
  const extensions = options.extensions ?? AUDIO_EXTENSIONS;
  const hasAudioExtension = (name: string) => extensions.has(extname(name).slice(1).toLowerCase());
  const noExtension = (name: string) => extname(name) === '';
  const isAudio = (name: string) => hasAudioExtension(name) || noExtension(name);
  const globs = (list: readonly string[] | undefined, what: string) => {
    if (list === undefined || list.length === 0) return undefined;
    for (const glob of list)
      if (typeof glob !== 'string' || glob === '')
        throw new InvalidArgumentError(`walkAudioFiles: ${what} globs must be nonempty strings`);
    return picomatch([...list], { dot: true });
  };
  const included = globs(options.include, 'include');
  const excluded = globs(options.exclude, 'exclude');
  const posix = (rel: string) => (sep === '/' ? rel : rel.split(sep).join('/'));
  /** A file without an extension is taken only when its content is media. */
  const isMedia = async (path: string, name: string) =>
    !noExtension(name) || isMediaHead(await readHead(path).catch(() => Buffer.alloc(0)));
  const follow = options.followSymlinks === true;
  // The roots as the file system names them, for "does this symlink lead outside them".
  const roots: string[] = [];
  for (const input of inputs) roots.push(await realpath(input).catch(() => resolve(input)));
  const visited = new Set<string>();
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
    // A stack, the next directory last: a directory's subdirectories go on in reverse, so they
    // are walked in name order, each before the directories after its parent.
    const pending = [input];
    while (pending.length > 0) {
      const dir = pending.pop()!;
      // Each directory once, whichever way it was reached (a followed symlink, a loop).
      const real = await realpath(dir).catch(() => resolve(dir));
      if (visited.has(real)) continue;
      visited.add(real);
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
        const path = join(dir, entry.name);
        const rel = relative(input, path);
        if (entry.name.startsWith('.')) {
          if (entry.isDirectory() || hasAudioExtension(entry.name))
            yield skipped(path, rel, 'ERR_HIDDEN', `${path} is hidden`);
          continue;
        }
        if (excluded?.(posix(rel))) continue;
        const special = specialKind(entry);
        if (special) {
          yield skipped(path, rel, 'ERR_NOT_REGULAR', `${path} is ${special}, not a regular file`);
          continue;
        }
        if (entry.isDirectory()) {
          subdirs.push(path);
          continue;
        }
        if (included && !included(posix(rel))) continue;
        if (!entry.isFile() && !entry.isSymbolicLink()) continue;
        let file: Stats;
        let target = path;
        try {
          if (entry.isSymbolicLink()) {
            target = await realpath(path);
            file = await stat(target);
          } else file = await lstat(path);
        } catch (err) {
          // A broken symlink, or a file removed since the listing.
          if (hasAudioExtension(entry.name)) yield unreadable(path, rel, err, 'file');
          continue;
        }
        if (entry.isSymbolicLink()) {
          if (file.isDirectory()) {
            if (!follow) yield skipped(path, rel, 'ERR_SYMLINK_DIR', `${path} links to a directory`);
            else subdirs.push(path);
            continue;
          }
          if (!isAudio(entry.name)) continue;
          if (!follow && !roots.some((root) => inside(root, target))) {
            yield skipped(
              path,
              rel,
              'ERR_SYMLINK_OUTSIDE',
              `${path} links outside the inputs (--follow-symlinks)`,
            );
            continue;
          }
        } else if (!isAudio(entry.name)) continue;
        const kind = specialKind(file);
        if (kind) yield skipped(path, rel, 'ERR_NOT_REGULAR', `${path} is ${kind}, not a regular file`);
        else if (file.isFile() && (await isMedia(target, entry.name)))
          yield { path, relative: rel, size: file.size, mtimeMs: file.mtimeMs };
      }
      // Not unshift(...subdirs): spread arguments overflow the call stack past ~125,000 of them.
      for (let i = subdirs.length - 1; i >= 0; i--) pending.push(subdirs[i]!);
    }
  }
}

/**
 * A Readable of a file, with a read size suited to decoding. Abort destroys it with the
 * signal's own reason, as `decode()` (not Node's `AbortError` wrapping it).
 */
export function fromFile(
  path: string,
  options: { highWaterMark?: number; signal?: AbortSignal } = {},
): ReadStream {
  const stream = createReadStream(path, { highWaterMark: options.highWaterMark ?? 256 * 1024 });
  destroyOnAbort(stream, options.signal);
  return stream;
}
