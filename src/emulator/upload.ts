// Multipart uploads of batch and fast transcription, read as a stream: the first part must be
// the `file` part, one audio part, at most N parts, a byte limit over the whole body, and (for
// batch) at most so many bytes after the recording. The audio is analysed while it arrives.

import type { Readable } from 'node:stream';
import busboy from 'busboy';
import type { Limits } from '../protocol/limits.ts';
import { UploadAnalyzer } from './audio-analysis.ts';
import type { AnalyzedAudio } from './engine/recording.ts';
import { declaredLength, type HttpExchange } from './http-exchange.ts';
import { limitData, type Rejection, reject, tooLarge } from './rejection.ts';

export interface UploadRules {
  /** Bytes of the whole request body, and the bound that names them. */
  maxBytes: number;
  bytesBound: 'request_bytes' | 'fast_audio_bytes';
  fileParts: number;
  multipartParts: number;
  /** Bytes allowed after the recording (`unvalidatable_tail_bytes`); undefined: not checked. */
  maxTailBytes: number | undefined;
  maxDurationSec: number;
  durationBound: 'audio_duration' | 'fast_audio_duration';
}

/** The upload rules of batch submission and of fast transcription, from the limits. */
export function uploadRules(limits: Limits, kind: 'batch' | 'fast'): UploadRules {
  const parts = { fileParts: limits.batchFileParts, multipartParts: limits.batchMultipartParts };
  return kind === 'batch'
    ? {
        ...parts,
        maxBytes: limits.batchRequestBytes,
        bytesBound: 'request_bytes',
        maxTailBytes: limits.batchUnvalidatableTailBytes,
        maxDurationSec: limits.batchAudioDurationSec,
        durationBound: 'audio_duration',
      }
    : {
        ...parts,
        maxBytes: limits.fastAudioBytes,
        bytesBound: 'fast_audio_bytes',
        maxTailBytes: undefined,
        maxDurationSec: limits.fastAudioDurationSec,
        durationBound: 'fast_audio_duration',
      };
}

/** The multipart boundary of a `multipart/form-data` content type, or 400. */
export function multipartBoundary(contentType: string | undefined): string {
  const type = contentType ?? '';
  if (!/^\s*multipart\/form-data\s*(;|$)/i.test(type)) {
    throw reject('VALIDATION_INVALID_FORMAT', 'the body must be multipart/form-data');
  }
  const m = /;\s*boundary=(?:"([^"]+)"|([^\s;]+))/i.exec(type);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) throw reject('VALIDATION_INVALID_FORMAT', 'the multipart content type has no boundary');
  return boundary;
}

/**
 * What the headers alone decide, before admission: a multipart body (400) within the byte
 * limit by its declared Content-Length (413). Returns the boundary.
 */
export function checkUploadHeaders(ex: HttpExchange, rules: UploadRules): string {
  const boundary = multipartBoundary(ex.req.headers['content-type']);
  const declared = declaredLength(ex.req);
  if (declared !== undefined && declared > rules.maxBytes)
    throw tooLarge(rules.bytesBound, rules.maxBytes, declared, 'the request body');
  return boundary;
}

const CRLF = Buffer.from('\r\n');
const HEADER_END = Buffer.from('\r\n\r\n');

/**
 * Where the first part's data begins, found as the body streams in and as busboy reads it:
 * after the first `\r\n--boundary\r\n` (the body counts as starting with CRLF, so a delimiter
 * on the first line needs none) and then the `\r\n\r\n` ending that part's header block. Only
 * a few bytes are kept between chunks, so a preamble of any length still leaves the recording's
 * end, and with it the unvalidatable tail, known.
 */
class FirstPartLocator {
  readonly #delimiter: Buffer;
  #stage: 'delimiter' | 'headers' = 'delimiter';
  /** Unmatched bytes kept from earlier chunks, and the body offset of their first byte. */
  #carry: Buffer = CRLF;
  #carryAt = -CRLF.length;
  /** Body offset of the first part's data, once known. */
  dataOffset: number | undefined;

  constructor(boundary: string) {
    this.#delimiter = Buffer.from(`\r\n--${boundary}\r\n`);
  }

  push(chunk: Buffer): void {
    if (this.dataOffset !== undefined) return;
    let window = this.#carry.length > 0 ? Buffer.concat([this.#carry, chunk]) : chunk;
    let at = this.#carryAt;
    for (;;) {
      const needle = this.#stage === 'delimiter' ? this.#delimiter : HEADER_END;
      const i = window.indexOf(needle);
      if (i < 0) {
        const keep = Math.min(window.length, needle.length - 1);
        this.#carry = Buffer.from(window.subarray(window.length - keep));
        this.#carryAt = at + window.length - keep;
        return;
      }
      if (this.#stage === 'headers') {
        this.dataOffset = at + i + HEADER_END.length;
        this.#carry = Buffer.alloc(0);
        return;
      }
      // The header block's end is searched from the CRLF that ends the delimiter line.
      this.#stage = 'headers';
      const from = i + needle.length - CRLF.length;
      window = window.subarray(from);
      at += from;
    }
  }
}

/**
 * Read and validate an upload; resolves with the analysed audio or rejects with the
 * `Rejection` to answer. The request body may still be arriving when it rejects.
 */
export async function receiveUpload(ex: HttpExchange, rules: UploadRules): Promise<AnalyzedAudio> {
  const boundary = checkUploadHeaders(ex, rules);
  const declared = declaredLength(ex.req);

  const analyzer = new UploadAnalyzer({
    lifecycle: ex.ctx.lifecycle,
    maxDurationSec: rules.maxDurationSec,
    durationBound: rules.durationBound,
    signal: ex.signal,
    hash: ex.ctx.hashUploads,
  });
  const bb = busboy({ headers: ex.req.headers, limits: { fieldSize: 1024 * 1024 } });
  const req = ex.req;
  const stats = ex.ctx.stats;

  let settled = false;
  let fail!: (r: unknown) => void;
  let succeed!: () => void;
  const outcome = new Promise<void>((resolve, rejectOutcome) => {
    fail = (r) => {
      if (settled) return;
      settled = true;
      rejectOutcome(r);
    };
    succeed = () => {
      if (settled) return;
      settled = true;
      resolve();
    };
  });

  let total = 0;
  let parts = 0;
  let fileParts = 0;
  const locator = new FirstPartLocator(boundary);
  /** Offset where the bytes after the recording's closing delimiter begin, once known. */
  let tailStart: number | undefined;
  let fileDone: Promise<void> | undefined;
  let bodyDone = false;

  const tailRejection = (): Rejection | undefined => {
    if (tailStart === undefined || rules.maxTailBytes === undefined) return undefined;
    const limit = rules.maxTailBytes;
    const what = 'the data after the recording';
    if (declared !== undefined) {
      // Errors rule 2: with a declared Content-Length, that is what a 413 observes.
      return declared - tailStart > limit
        ? tooLarge('unvalidatable_tail_bytes', limit, declared, what)
        : undefined;
    }
    return total - tailStart > limit
      ? tooLarge('unvalidatable_tail_bytes', limit, limit + 1, what)
      : undefined;
  };
  const checkTail = () => {
    const r = tailRejection();
    if (r) fail(r);
  };

  const countPart = (): boolean => {
    parts++;
    if (parts > rules.multipartParts) {
      fail(
        reject('FILE_COUNT_EXCEEDED', `more than ${rules.multipartParts} multipart parts`, {
          data: limitData('multipart_parts', rules.multipartParts, parts),
        }),
      );
      return false;
    }
    return true;
  };

  bb.on('file', (name: string, stream: Readable) => {
    // A part cut short by a rejection errors; that is expected, not a crash.
    stream.on('error', () => {});
    if (settled || !countPart()) {
      stream.resume();
      return;
    }
    fileParts++;
    if (parts === 1 && name !== 'file') {
      stream.resume();
      fail(reject('VALIDATION_REQUIRED_FIELD', 'the first multipart field must be `file`'));
      return;
    }
    if (fileParts > rules.fileParts) {
      stream.resume();
      fail(
        reject('FILE_COUNT_EXCEEDED', `more than ${rules.fileParts} audio part`, {
          data: limitData('file_parts', rules.fileParts, fileParts),
        }),
      );
      return;
    }
    fileDone = (async () => {
      let bytes = 0;
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        if (settled) continue;
        bytes += chunk.length;
        await analyzer.write(chunk);
      }
      // The locator saw every byte busboy parsed, so it knows where this part began; if it
      // ever disagreed with busboy the tail could not be measured: refuse rather than skip it.
      const start = locator.dataOffset;
      if (start === undefined) throw reject('VALIDATION_INVALID_FORMAT', 'malformed multipart body');
      tailStart = start + bytes + Buffer.byteLength(`\r\n--${boundary}`);
      checkTail();
    })();
    fileDone.catch(fail);
  });
  bb.on('field', (name: string) => {
    if (settled || !countPart()) return;
    if (parts === 1) {
      fail(
        reject(
          'VALIDATION_REQUIRED_FIELD',
          name === 'file' ? '`file` must be a file part' : 'the first multipart field must be `file`',
        ),
      );
    }
  });
  bb.on('error', (err: Error) =>
    fail(reject('VALIDATION_INVALID_FORMAT', `malformed multipart body: ${err.message}`)),
  );
  bb.on('close', () => {
    bodyDone = true;
    if (fileParts === 0) fail(reject('VALIDATION_REQUIRED_FIELD', 'the multipart body has no `file` part'));
    else succeed();
  });

  const onData = (chunk: Buffer) => {
    if (settled) return;
    total += chunk.length;
    stats.bytesIn += chunk.length;
    if (total > rules.maxBytes) {
      fail(tooLarge(rules.bytesBound, rules.maxBytes, rules.maxBytes + 1, 'the request body'));
      return;
    }
    locator.push(chunk);
    checkTail();
    if (!bb.write(chunk)) {
      req.pause();
      bb.once('drain', () => req.resume());
    }
  };
  req.on('data', onData);
  req.once('end', () => {
    if (!settled) bb.end();
  });
  req.once('error', (err) => fail(err));
  ex.signal.addEventListener('abort', () => fail(ex.signal.reason), { once: true });

  try {
    await outcome;
    await fileDone;
    if (!bodyDone) throw reject('VALIDATION_INVALID_FORMAT', 'the multipart body ended early');
    const tail = tailRejection();
    if (tail) throw tail;
    return await analyzer.finish();
  } catch (err) {
    req.off('data', onData);
    bb.removeAllListeners('drain');
    req.resume();
    throw err as Rejection;
  } finally {
    analyzer.dispose();
    if (!bb.destroyed) bb.destroy();
  }
}
