// A streaming multipart/form-data body whose first (and only) part is the `file`: the
// recording is never held in memory, and the length is exact when the file size is known.

import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { InvalidArgumentError, localServiceError } from '../protocol/errors.ts';
import type { OperationName } from '../protocol/operations.ts';

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
  /**
   * The file stream's own error, once it failed (a file that cannot be opened, a read error):
   * the upload failed because of its input, not the connection, so it is not a transport failure.
   */
  readonly inputError: unknown;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it replaces
const UNQUOTABLE = /[\u0000-\u001f\u007f"\\]/g;

/** A file name inside a quoted header parameter: no quote, backslash or control character (a
 * terminal escape in a file name made the part header malformed). */
function quote(value: string): string {
  return value.replace(UNQUOTABLE, '_');
}

/** The part header and the closing delimiter around the file's bytes. */
function envelope(boundary: string, filename: string, contentType: string): { head: Buffer; tail: Buffer } {
  const head = Buffer.from(
    `--${boundary}\r\n` +
      `Content-Disposition: form-data; name="file"; filename="${quote(filename)}"\r\n` +
      `Content-Type: ${contentType}\r\n\r\n`,
  );
  return { head, tail: Buffer.from(`\r\n--${boundary}--\r\n`) };
}

const newBoundary = () => `speechpipe-${randomBytes(12).toString('hex')}`;

/**
 * Bytes the multipart framing adds to a file of this name and type. The service's upload byte
 * limits count the whole body, so pre-flight compares the file size plus this.
 */
export function multipartOverhead(filename: string, contentType: string): number {
  // Every boundary has the same length, so any one measures the framing.
  const { head, tail } = envelope(newBoundary(), filename, contentType);
  return head.length + tail.length;
}

/**
 * Pre-flight of an upload of `size` bytes (unknown: nothing to check) against a byte limit of
 * the service, which counts the whole multipart body over HTTP (`filename`, `contentType` set)
 * and the audio alone over Socket.IO: the PAYLOAD_TOO_LARGE it would answer, before sending.
 */
export function checkUploadBytes(
  size: number | undefined,
  check: {
    limit: number;
    bound: string;
    operation: OperationName;
    multipart?: { filename: string; contentType: string };
  },
): void {
  if (size === undefined) return;
  const { limit, bound, operation, multipart } = check;
  const observed = multipart ? size + multipartOverhead(multipart.filename, multipart.contentType) : size;
  if (observed <= limit) return;
  const what = multipart
    ? `request of ${observed} bytes (a recording of ${size} and its multipart framing)`
    : `upload of ${observed} bytes`;
  throw localServiceError('PAYLOAD_TOO_LARGE', `${what} exceeds ${limit}`, {
    data: { limit, observed, unit: 'bytes', bound },
    operation,
  });
}

export function multipartBody(file: MultipartFile): MultipartBody {
  const boundary = newBoundary();
  const { head, tail } = envelope(boundary, file.filename, file.contentType);
  let inputError: unknown;
  // The declared length goes out as Content-Length: an input that gives more or fewer bytes
  // (a file that grew or shrank after its size was read) fails as the input, before undici
  // would fail the request as a lost connection (and, cut short, as one that may have acted).
  const wrongSize = (what: string) => {
    inputError ??= new InvalidArgumentError(
      `the input ${what} the ${file.size} bytes of its declared size (it changed while it was read?)`,
    );
    return inputError;
  };
  async function* parts() {
    yield head;
    let bytes = 0;
    for await (const chunk of file.stream) {
      bytes += (chunk as Buffer).length;
      if (file.size !== undefined && bytes > file.size) throw wrongSize('gives more than');
      yield chunk as Buffer;
    }
    if (file.size !== undefined && bytes < file.size) throw wrongSize(`ended after ${bytes} of`);
    yield tail;
  }
  const chunks = parts();
  const body = new Readable({
    highWaterMark: 64 * 1024,
    read() {
      chunks.next().then(
        (next) => this.push(next.done ? null : next.value),
        (err: Error) => this.destroy(err),
      );
    },
    // Destroying the body (request aborted) releases the file stream at once. Not on 'close':
    // Readable.from would close only after the input's next chunk, never for a stalled input.
    destroy(err, callback) {
      file.stream.destroy();
      callback(err);
    },
  });
  // Listened to from the start: a file stream fails as soon as it cannot be opened, before the
  // body is read (the request may still be connecting), and an 'error' without a listener
  // would be an uncaught exception. The body fails with it.
  file.stream.on('error', (err) => {
    inputError ??= err;
    body.destroy(err);
  });
  return {
    body,
    contentType: `multipart/form-data; boundary=${boundary}`,
    length: file.size === undefined ? undefined : head.length + file.size + tail.length,
    get inputError() {
      return inputError;
    },
  };
}

/**
 * The answer to a request that sent `multipart`. When the input failed, the request fails
 * with the input's own error: not a connection failure (nothing to retry), and the caller who
 * gave the input can recognise it.
 */
export async function withInputError<T>(multipart: MultipartBody, request: Promise<T>): Promise<T> {
  try {
    return await request;
  } catch (err) {
    throw multipart.inputError ?? err;
  }
}
