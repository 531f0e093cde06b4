// wavFile(): a Writable that stores PCM16LE as a WAV file and, the file being seekable, writes
// the real RIFF and data sizes into the header when the stream finishes. A FIFO, pipe or
// terminal (/dev/stdout) cannot seek: it gets the streaming header, written in order.

import { type FileHandle, open } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { WavEncoder, type WavFormatOptions } from '../transforms/to-wav.ts';

/** Options of {@link wavFile}: the PCM's format and how the file is opened. */
export interface WavFileOptions extends WavFormatOptions {
  /** File open flags. Default `'w'` (create or truncate). */
  flags?: string;
}

/**
 * A Writable of PCM16LE that writes `path` as a WAV file: a streaming header first, the samples,
 * then on finish the sizes patched in place when `path` is a regular file opened without `'a'`
 * (appending cannot write at an offset). PCM ending inside a sample frame fails with
 * `MediaError` (the file keeps its streaming header and the whole frames).
 */
export function wavFile(path: string, options: WavFileOptions = {}): Writable {
  const encoder = new WavEncoder(options, 'wavFile');
  const flags = options.flags ?? 'w';
  let file: FileHandle | undefined;
  /** Where the next byte goes; null for a destination that cannot seek (written in order). */
  let position: number | null = 0;

  const write = async (bytes: Buffer) => {
    let done = 0;
    while (done < bytes.length) {
      const { bytesWritten } = await file!.write(bytes, done, bytes.length - done, position);
      done += bytesWritten;
      if (position !== null) position += bytesWritten;
    }
  };

  return new Writable({
    construct(callback) {
      open(path, flags)
        .then(async (handle) => {
          file = handle;
          const seekable = (await handle.stat()).isFile() && !flags.includes('a');
          if (!seekable) position = null;
          await write(encoder.header());
        })
        .then(() => callback(), callback);
    },
    write(chunk: Buffer, _encoding, callback) {
      write(encoder.push(chunk)).then(() => callback(), callback);
    },
    final(callback) {
      const finish = async () => {
        encoder.end();
        if (position !== null) {
          for (const { offset, bytes } of encoder.sizePatches())
            await file!.write(bytes, 0, bytes.length, offset);
        }
        await file!.close();
        file = undefined;
      };
      finish().then(() => callback(), callback);
    },
    destroy(err, callback) {
      const handle = file;
      file = undefined;
      if (!handle) callback(err);
      else
        handle.close().then(
          () => callback(err),
          () => callback(err),
        );
    },
  });
}
