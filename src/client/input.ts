// Upload inputs (a path, bytes, a Readable, or a function returning a fresh Readable)
// normalized to something that can be streamed, measured when possible, and opened again for a
// retry when possible (not a one-shot Readable).

import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { Readable } from 'node:stream';
import { InvalidArgumentError, SpeechServiceError } from '../protocol/errors.ts';

/** Opens the recording anew on every call, so the client can send it again for a retry. */
export type StreamFactory = () => Readable;

/**
 * A recording to upload: a file path or `file:` URL (size read from the file), bytes, a Readable
 * (sent once, never again for a retry), a {@link StreamFactory} (opened anew for each
 * attempt), or one of these streams with its filename, size in bytes and content type.
 */
export type UploadInput =
  | string
  | URL
  | Uint8Array
  | Readable
  | StreamFactory
  | { stream: Readable | StreamFactory; filename?: string; size?: number; contentType?: string };

export interface UploadSource {
  filename: string;
  contentType: string;
  /** Bytes, when known before reading. */
  size: number | undefined;
  /** A fresh stream of the bytes; `undefined` once a one-shot stream was used. */
  open(): Readable | undefined;
  /** Whether `open()` can be called again (files and buffers can; streams cannot). */
  readonly reopenable: boolean;
  /** The bytes, for transports that need them whole (Socket.IO). */
  bytes(maxBytes: number): Promise<Buffer>;
}

const TYPES: Record<string, string> = {
  wav: 'audio/wav',
  mp3: 'audio/mpeg',
  flac: 'audio/flac',
  ogg: 'audio/ogg',
  opus: 'audio/ogg',
  webm: 'audio/webm',
  m4a: 'audio/mp4',
  mp4: 'audio/mp4',
  aac: 'audio/aac',
};

function typeOf(name: string): string {
  return TYPES[name.split('.').pop()?.toLowerCase() ?? ''] ?? 'application/octet-stream';
}

async function collect(stream: Readable, maxBytes: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream) {
    total += (chunk as Buffer).length;
    if (total > maxBytes) {
      stream.destroy();
      throw new InvalidArgumentError(`input is larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export async function uploadSource(input: UploadInput): Promise<UploadSource> {
  if (typeof input === 'string' || input instanceof URL) {
    const path = input instanceof URL ? input : input;
    const info = await stat(path).catch((err: NodeJS.ErrnoException) => {
      throw new InvalidArgumentError(`cannot read input file: ${err.code ?? err.message}`);
    });
    if (!info.isFile()) throw new InvalidArgumentError('input path is not a file');
    const name = basename(typeof path === 'string' ? path : path.pathname);
    return {
      filename: name,
      contentType: typeOf(name),
      size: info.size,
      reopenable: true,
      open: () => createReadStream(path, { highWaterMark: 256 * 1024 }),
      bytes: (max) => collect(createReadStream(path), max),
    };
  }
  if (input instanceof Uint8Array) {
    const buf = Buffer.from(input.buffer, input.byteOffset, input.byteLength);
    return {
      filename: 'audio',
      contentType: 'application/octet-stream',
      size: buf.length,
      reopenable: true,
      open: () => Readable.from([buf], { objectMode: false }),
      bytes: async (max) => {
        if (buf.length > max) throw new InvalidArgumentError(`input is larger than ${max} bytes`);
        return buf;
      },
    };
  }
  const described = input instanceof Readable || typeof input === 'function' ? { stream: input } : input;
  const name = described.filename ?? 'audio';
  if (typeof described.stream === 'function') {
    const factory = described.stream;
    const open = (): Readable => {
      const stream = factory();
      if (!(stream instanceof Readable))
        throw new InvalidArgumentError('the input factory must return a Readable');
      return stream;
    };
    return {
      filename: name,
      contentType: described.contentType ?? typeOf(name),
      size: described.size,
      reopenable: true,
      open,
      bytes: (max) => collect(open(), max),
    };
  }
  if (!(described.stream instanceof Readable))
    throw new InvalidArgumentError('unsupported input: pass a path, bytes, a Readable or a () => Readable');
  const stream = described.stream;
  let used = false;
  return {
    filename: name,
    contentType: described.contentType ?? typeOf(name),
    size: described.size,
    reopenable: false,
    open: () => {
      if (used) return undefined;
      used = true;
      return stream;
    },
    bytes: (max) => {
      if (used) throw new InvalidArgumentError('the input stream was already consumed');
      used = true;
      return collect(stream, max);
    },
  };
}

/**
 * An admission 429 for a one-shot stream input, which cannot be sent again: the service's error
 * (still retryable by the caller, with its Retry-After) saying why the client did not retry it.
 */
export function oneShotRejection(err: SpeechServiceError): SpeechServiceError {
  const why =
    'not retried: the input is a one-shot stream that was already sent; pass a path, bytes or a () => Readable to let the client retry';
  return new SpeechServiceError({
    status: err.status,
    code: err.code,
    retryable: err.retryable,
    retryAfterMs: err.retryAfterMs,
    detail: err.detail ? `${err.detail} (${why})` : why,
    requestId: err.requestId,
    jobId: err.jobId,
    data: err.data,
    timestamp: err.timestamp,
    origin: err.origin,
    operation: err.operation,
    ambiguous: err.ambiguous,
    cause: err,
  });
}
