// wavFile(): a Writable that stores PCM16LE as a WAV file and, the file being seekable, writes
// the real RIFF and data sizes into the header when the stream finishes.

import { type FileHandle, open } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { writeWavHeader } from '../protocol/riff.ts';
import { checkWavFormat, partialFrameError, type WavFormatOptions } from '../transforms/to-wav.ts';

export interface WavFileOptions extends WavFormatOptions {
  /** File open flags. Default `'w'` (create or truncate). */
  flags?: string;
}

/** Largest data size a RIFF header can state; beyond it the streaming sizes stay. */
const MAX_RIFF_DATA = 0xffffffff - 36;

/**
 * A Writable of PCM16LE that writes `path` as a WAV file: a streaming header first, the samples,
 * then on finish the sizes patched in place. PCM ending inside a sample frame fails with
 * `MediaError` (the file keeps its streaming header and the whole frames).
 */
export function wavFile(path: string, options: WavFileOptions = {}): Writable {
  const format = checkWavFormat('wavFile', options);
  const aligner = new ByteAligner(2 * format.channels);
  let file: FileHandle | undefined;
  let position = 0;
  let dataBytes = 0;

  const write = async (bytes: Buffer) => {
    let done = 0;
    while (done < bytes.length) {
      const { bytesWritten } = await file!.write(bytes, done, bytes.length - done, position);
      done += bytesWritten;
      position += bytesWritten;
    }
  };

  return new Writable({
    construct(callback) {
      open(path, options.flags ?? 'w')
        .then(async (handle) => {
          file = handle;
          await write(writeWavHeader(format));
        })
        .then(() => callback(), callback);
    },
    write(chunk: Buffer, _encoding, callback) {
      const whole = aligner.push(chunk);
      dataBytes += whole.length;
      write(whole).then(() => callback(), callback);
    },
    final(callback) {
      if (aligner.pending > 0) {
        callback(partialFrameError(aligner.pending, aligner.blockBytes));
        return;
      }
      const patch = async () => {
        if (dataBytes <= MAX_RIFF_DATA) {
          const sizes = Buffer.alloc(4);
          sizes.writeUInt32LE(36 + dataBytes, 0);
          await file!.write(sizes, 0, 4, 4);
          sizes.writeUInt32LE(dataBytes, 0);
          await file!.write(sizes, 0, 4, 40);
        }
        await file!.close();
        file = undefined;
      };
      patch().then(() => callback(), callback);
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
