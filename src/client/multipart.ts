// A streaming multipart/form-data body whose first (and only) part is the `file`: the
// recording is never held in memory, and the length is exact when the file size is known.

import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';

export interface MultipartFile {
  filename: string;
  contentType: string;
  stream: Readable;
  size: number | undefined;
}

export interface MultipartBody {
  body: Readable;
  contentType: string;
  /** Total bytes, when the file size is known. */
  length: number | undefined;
}

function quote(value: string): string {
  return value.replace(/[\r\n"\\]/g, '_');
}

export function multipartBody(file: MultipartFile): MultipartBody {
  const boundary = `speechpipe-${randomBytes(12).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\n` +
      `Content-Disposition: form-data; name="file"; filename="${quote(file.filename)}"\r\n` +
      `Content-Type: ${file.contentType}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  async function* parts() {
    yield head;
    for await (const chunk of file.stream) yield chunk as Buffer;
    yield tail;
  }
  const body = Readable.from(parts(), { objectMode: false, highWaterMark: 64 * 1024 });
  // Destroying the body (request aborted) must release the file stream too.
  body.once('close', () => file.stream.destroy());
  return {
    body,
    contentType: `multipart/form-data; boundary=${boundary}`,
    length: file.size === undefined ? undefined : head.length + file.size + tail.length,
  };
}
