// Multipart uploads of batch and fast transcription, read as a stream: the first part must be
// the `file` part, one audio part, at most N parts, a byte limit over the whole body, and (for
// batch) at most so many bytes after the recording. The audio is analysed while it arrives,
// taken from the request's own chunks (busboy parses the structure around it).

import type { IncomingHttpHeaders } from 'node:http';
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
 * The multipart parser for an upload, or 400 when it cannot read the content type (its grammar
 * is stricter than the boundary's pattern: `boundary=a b`, a parameter without a value).
 */
function multipartParser(headers: IncomingHttpHeaders): busboy.Busboy {
  try {
    return busboy({ headers, limits: { fieldSize: 1024 * 1024 } });
  } catch (err) {
    throw reject('VALIDATION_INVALID_FORMAT', `malformed multipart content type: ${(err as Error).message}`);
  }
}

/** What an upload's headers gave: its boundary, and the multipart parser made for them. */
export interface UploadHeaders {
  boundary: string;
  parser: busboy.Busboy;
}

/**
 * What the headers alone decide, before admission: a multipart body (400) its parser can read
 * (400), within the byte limit by its declared Content-Length (413). The parser is made once,
 * here, and handed to `receiveUpload`.
 */
export function checkUploadHeaders(ex: HttpExchange, rules: UploadRules): UploadHeaders {
  const boundary = multipartBoundary(ex.req.headers['content-type']);
  const parser = multipartParser(ex.req.headers);
  const declared = declaredLength(ex.req);
  if (declared !== undefined && declared > rules.maxBytes)
    throw tooLarge(rules.bytesBound, rules.maxBytes, declared, 'the request body');
  return { boundary, parser };
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
 * The first part's data taken from the request's own chunks up to the delimiter that closes it,
 * found with `Buffer.indexOf`, instead of through busboy's byte-by-byte search and its file
 * stream: busboy is given the part's headers and its first byte, then everything from that
 * delimiter on, so it still checks the whole structure (the part it sees has that one byte). A delimiter split across
 * chunks is found too: bytes at a chunk's end that could begin one are held back. The boundary
 * has no CR (checked before this is used), so only a chunk's last CR can begin one.
 */
export class PartDataSplitter {
  readonly #delimiter: Buffer;
  #held: Buffer | undefined;
  /** Part data bytes passed on so far. */
  bytes = 0;
  /** Whether the closing delimiter was found. */
  closed = false;

  constructor(boundary: string) {
    this.#delimiter = Buffer.from(`\r\n--${boundary}`);
  }

  /**
   * Split a chunk: part data first (`data`, zero to two pieces), then, once the closing
   * delimiter is found, the bytes from it on (`rest`, for busboy).
   */
  push(chunk: Buffer): { data: Buffer[]; rest: Buffer[] } {
    const delimiter = this.#delimiter;
    const data: Buffer[] = [];
    const held = this.#held;
    if (held) {
      this.#held = undefined;
      const need = delimiter.length - held.length;
      const n = Math.min(need, chunk.length);
      if (chunk.subarray(0, n).equals(delimiter.subarray(held.length, held.length + n))) {
        if (n === need) return this.#close(data, [held, chunk]);
        this.#held = Buffer.concat([held, chunk]);
        return { data, rest: [] };
      }
      data.push(held);
      this.bytes += held.length;
    }
    const at = chunk.indexOf(delimiter);
    if (at >= 0) {
      if (at > 0) data.push(chunk.subarray(0, at));
      this.bytes += at;
      return this.#close(data, [chunk.subarray(at)]);
    }
    let end = chunk.length;
    // The delimiter's only CR is its first byte: a tail that begins one starts at a CR.
    for (let cr = chunk.indexOf(13, Math.max(0, chunk.length - delimiter.length + 1)); cr >= 0; ) {
      const tail = chunk.subarray(cr);
      if (tail.equals(delimiter.subarray(0, tail.length))) {
        this.#held = Buffer.from(tail);
        end = cr;
        break;
      }
      cr = chunk.indexOf(13, cr + 1);
    }
    if (end > 0) data.push(end === chunk.length ? chunk : chunk.subarray(0, end));
    this.bytes += end;
    return { data, rest: [] };
  }

  #close(data: Buffer[], rest: Buffer[]): { data: Buffer[]; rest: Buffer[] } {
    this.closed = true;
    return { data, rest: rest.filter((b) => b.length > 0) };
  }
}

/**
 * Free a request chunk's memory now rather than at the next garbage collection, if the chunk is
 * the whole of its own ArrayBuffer (node:http copies each piece of a body into one of its own).
 * A large upload's chunks are external memory, and that much of it starts a full collection
 * every few tens of MB: over the emulator's heap those cost more than the upload's analysis.
 * Afterwards the chunk, and every view of its memory, is empty. Returns whether it was freed.
 */
export function releaseChunk(chunk: Buffer): boolean {
  const buffer = chunk.buffer as ArrayBuffer & { transfer?: (length: number) => ArrayBuffer };
  if (chunk.byteOffset !== 0 || buffer.byteLength !== chunk.length || typeof buffer.transfer !== 'function')
    return false;
  try {
    buffer.transfer(0);
    return true;
  } catch {
    return false; // not detachable (WebAssembly memory, say)
  }
}

/**
 * Read and validate an upload; resolves with the analysed audio or rejects with the
 * `Rejection` to answer. The request body may still be arriving when it rejects. `headers`:
 * what `checkUploadHeaders` gave (called before admission).
 */
export async function receiveUpload(
  ex: HttpExchange,
  rules: UploadRules,
  { boundary, parser: bb }: UploadHeaders,
): Promise<AnalyzedAudio> {
  const declared = declaredLength(ex.req);

  const analyzer = new UploadAnalyzer({
    lifecycle: ex.ctx.lifecycle,
    maxDurationSec: rules.maxDurationSec,
    durationBound: rules.durationBound,
    signal: ex.signal,
    hash: ex.ctx.hashUploads,
  });
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
  /** The audio part's stream from busboy, set (synchronously, in a write) when it is accepted. */
  let audioPart: Readable | undefined;
  /** Set when the audio part's data is read from the request chunks directly (see PartDataSplitter). */
  let direct: PartDataSplitter | undefined;
  /** Resolves with the direct part's byte count once its data is all analysed. */
  let directDone: Promise<number> | undefined;
  let endDirect!: (bytes: number) => void;
  /** The first part's headers ended at the end of a chunk: the next one decides. */
  let deciding = false;

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
    audioPart = stream;
    fileDone = (async () => {
      let bytes = 0;
      let ignored = 0;
      for await (const chunk of stream as AsyncIterable<Buffer>) {
        if (settled) continue;
        if (direct) {
          // Read directly, busboy sees one byte of this part; more would be a disagreement.
          ignored += chunk.length;
          if (ignored > 1) throw reject('VALIDATION_INVALID_FORMAT', 'malformed multipart body');
          continue;
        }
        bytes += chunk.length;
        await analyzer.write(chunk);
      }
      if (directDone) bytes = await directDone;
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

  // The request is paused while busboy or the analyzer has to catch up (`holds` reasons).
  let holds = 0;
  const hold = () => {
    if (holds++ === 0) req.pause();
  };
  const release = () => {
    if (--holds === 0 && !settled) req.resume();
  };
  const toBusboy = (chunk: Buffer) => {
    if (!bb.write(chunk)) {
      hold();
      bb.once('drain', release);
    }
  };
  /** Part data to the analyzer, in order; the request waits only when the analyzer does. */
  const analyse = (pieces: Buffer[]): Promise<void> | undefined => {
    for (let i = 0; i < pieces.length; i++) {
      const wait = analyzer.write(pieces[i]!);
      if (wait) {
        const rest = pieces.slice(i + 1);
        return wait.then(() => analyse(rest));
      }
    }
    return undefined;
  };
  /** One chunk of the audio part read directly: a promise when the analyzer has to wait. */
  const directStep = (chunk: Buffer): Promise<void> | undefined => {
    const { data, rest } = direct!.push(chunk);
    const after = () => {
      if (!direct!.closed) return;
      endDirect(direct!.bytes);
      for (const piece of rest) toBusboy(piece);
    };
    const wait = analyse(data);
    if (!wait) {
      after();
      return undefined;
    }
    return wait.then(() => {
      if (!settled) after();
    });
  };
  /** Steps still running (the analyzer waits): later chunks, and the end of the body, wait for them. */
  let directQueue: Promise<void> | undefined;
  const directData = (chunk: Buffer) => {
    let step: Promise<void> | undefined;
    if (directQueue) {
      step = directQueue.then(() => (settled ? undefined : directStep(chunk)));
    } else {
      try {
        step = directStep(chunk);
      } catch (err) {
        fail(err);
        return;
      }
      if (!step) return;
      hold();
      step.then(release, () => {});
    }
    directQueue = step;
    step.then(() => {
      if (directQueue === step) directQueue = undefined;
    }, fail);
  };
  const onData = (chunk: Buffer) => {
    if (settled) return;
    const chunkStart = total;
    total += chunk.length;
    stats.bytesIn += chunk.length;
    if (total > rules.maxBytes) {
      fail(tooLarge(rules.bytesBound, rules.maxBytes, rules.maxBytes + 1, 'the request body'));
      return;
    }
    if (direct && !direct.closed) {
      directData(chunk);
      // Analysed already, none of it kept (nor queued, nor given to busboy), and no other
      // listener to read it: its memory is freed now (see releaseChunk).
      if (
        !(settled || directQueue || direct.closed || analyzer.holdsInput) &&
        req.listenerCount('data') === 1
      )
        releaseChunk(chunk);
      return;
    }
    const located = locator.dataOffset !== undefined;
    locator.push(chunk);
    checkTail();
    const start = locator.dataOffset;
    if (!(deciding || (!located && start !== undefined)) || boundary.includes('\r')) return toBusboy(chunk);
    // The first part's headers have ended. Busboy holds back a header block's final CRLF (it
    // could begin a delimiter) until the next byte, so it is given one byte of data too: then
    // it says at once, in the write, whether this is the audio part. If so, the data is read
    // directly from its first byte (busboy's copy of that byte is ignored).
    const split = Math.max(0, start! - chunkStart);
    deciding = split >= chunk.length;
    if (deciding) return toBusboy(chunk);
    toBusboy(chunk.subarray(0, split + 1));
    if (!audioPart || settled) {
      if (!settled) toBusboy(chunk.subarray(split + 1));
      return;
    }
    direct = new PartDataSplitter(boundary);
    directDone = new Promise<number>((resolve) => {
      endDirect = resolve;
    });
    directData(chunk.subarray(split));
  };
  req.on('data', onData);
  req.once('end', () => {
    const end = () => {
      if (!settled) bb.end();
    };
    if (directQueue) directQueue.then(end, () => {});
    else end();
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
