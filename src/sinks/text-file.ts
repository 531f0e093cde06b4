// Writing result files atomically: a reader (or a resumed run) never sees half a file, and a
// file renamed into place was on disk first (a power loss cannot leave it empty).

import { randomBytes } from 'node:crypto';
import { type FileHandle, mkdir, open, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** File names are at most 255 bytes on the usual file systems. */
const NAME_MAX = 255;
const TEMPORARY = /\.\d+\.[0-9a-f]{8}\.tmp$/;

/**
 * The temporary file beside `path`: `<name>.<pid>.<8 hex>.tmp`, or, when that would pass the
 * 255-byte name limit, `.speechpipe.<pid>.<8 hex>.tmp` (a name near the limit must not fail
 * for its suffix).
 */
function temporaryName(path: string): string {
  const suffix = `.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  const name = basename(path);
  return Buffer.byteLength(name + suffix) <= NAME_MAX
    ? `${path}${suffix}`
    : join(dirname(path), `.speechpipe${suffix}`);
}

/** A file name writeFileAtomic uses for its temporary files (left behind by a killed run). */
export function isAtomicTemporary(name: string): boolean {
  return TEMPORARY.test(name);
}

/**
 * Write all of `text` at the handle's position. A write may take only part of what it is given
 * (a disk filling up takes what fits, and only the next write fails with ENOSPC): the rest is
 * written again, so a short write is never taken for the whole.
 */
async function writeAll(handle: FileHandle, text: string): Promise<void> {
  const bytes = Buffer.from(text);
  let done = 0;
  while (done < bytes.length) done += (await handle.write(bytes, done, bytes.length - done)).bytesWritten;
}

/**
 * Write `data` to `path` through a temporary file in the same directory, synced, then rename.
 * `data` may be an iterable of strings (written in batches: no one string of the whole file).
 */
export async function writeFileAtomic(
  path: string,
  data: string | Uint8Array | Iterable<string>,
): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  const temp = temporaryName(path);
  try {
    const handle = await open(temp, 'w');
    try {
      if (typeof data === 'string' || data instanceof Uint8Array) await handle.writeFile(data);
      else {
        let batch: string[] = [];
        for (const piece of data) {
          batch.push(piece);
          if (batch.length === 1000) {
            await writeAll(handle, batch.join(''));
            batch = [];
          }
        }
        await writeAll(handle, batch.join(''));
      }
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
}
