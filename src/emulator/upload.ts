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
import { FirstPartLocator, PartDataSplitter, releaseChunk } from './multipart-scan.ts';
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

/**
 * Read and validate an upload; resolves with the analysed audio or rejects with the
 * `Rejection` to answer. The request body may still be arriving when it rejects. `headers`:
 * what `checkUploadHeaders` gave (called before admission).
 */
export function receiveUpload(
  ex: HttpExchange,
  rules: UploadRules,
  headers: UploadHeaders,
  keepAudio = false,
): Promise<AnalyzedAudio> {
  return new UploadReceiver(ex, rules, headers, keepAudio).receive();
}

/** An upload's outcome, decided once: the first failure, or success when the parser closes. */
class Outcome {
  readonly promise: Promise<void>;
  #settled = false;
  #resolve!: () => void;
  #reject!: (reason: unknown) => void;

  constructor() {
    this.promise = new Promise<void>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  get settled(): boolean {
    return this.#settled;
  }

  fail(reason: unknown): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#reject(reason);
  }

  succeed(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve();
  }
}

/** The request, paused while anything has to catch up (the parser, the analyzer), for each such reason. */
class RequestHold {
  readonly #req: Readable;
  readonly #outcome: Outcome;
  #holds = 0;

  constructor(req: Readable, outcome: Outcome) {
    this.#req = req;
    this.#outcome = outcome;
  }

  hold(): void {
    if (this.#holds++ === 0) this.#req.pause();
  }

  /** One reason less; the request flows again when none is left (and the upload goes on). */
  release = (): void => {
    if (--this.#holds === 0 && !this.#outcome.settled) this.#req.resume();
  };
}

/** Part data to the analyzer, in order; a promise only when the analyzer makes it wait. */
function analyseInOrder(analyzer: UploadAnalyzer, pieces: Buffer[]): Promise<void> | undefined {
  for (let i = 0; i < pieces.length; i++) {
    const wait = analyzer.write(pieces[i]!);
    if (wait) {
      const rest = pieces.slice(i + 1);
      return wait.then(() => analyseInOrder(analyzer, rest));
    }
  }
  return undefined;
}

/**
 * The audio part read from the request's chunks directly (see `PartDataSplitter`): each chunk's
 * part data goes to the analyzer and, once the closing delimiter is found, the bytes from it on
 * go to the parser. A chunk that arrives while the analyzer makes an earlier one wait, and the
 * body's end, wait behind it.
 */
class DirectAudioRead {
  readonly splitter: PartDataSplitter;
  /** Resolves with the part's byte count once its data is all analysed. */
  readonly done: Promise<number>;
  /** The steps still running (the analyzer waits): later chunks, and the end of the body, wait for them. */
  queue: Promise<void> | undefined;
  #endDone!: (bytes: number) => void;
  readonly #analyzer: UploadAnalyzer;
  readonly #outcome: Outcome;
  readonly #hold: RequestHold;
  readonly #toParser: (chunk: Buffer) => void;

  constructor(
    boundary: string,
    analyzer: UploadAnalyzer,
    outcome: Outcome,
    hold: RequestHold,
    toParser: (chunk: Buffer) => void,
  ) {
    this.splitter = new PartDataSplitter(boundary);
    this.done = new Promise<number>((resolve) => {
      this.#endDone = resolve;
    });
    this.#analyzer = analyzer;
    this.#outcome = outcome;
    this.#hold = hold;
    this.#toParser = toParser;
  }

  get closed(): boolean {
    return this.splitter.closed;
  }

  /** A chunk of the body from the part's data on: now, or behind the steps still running. */
  push(chunk: Buffer): void {
    const outcome = this.#outcome;
    let step: Promise<void> | undefined;
    if (this.queue) {
      step = this.queue.then(() => (outcome.settled ? undefined : this.#step(chunk)));
    } else {
      try {
        step = this.#step(chunk);
      } catch (err) {
        outcome.fail(err);
        return;
      }
      if (!step) return;
      this.#hold.hold();
      step.then(this.#hold.release, () => {});
    }
    this.queue = step;
    step.then(
      () => {
        if (this.queue === step) this.queue = undefined;
      },
      (err: unknown) => outcome.fail(err),
    );
  }

  /** One chunk: a promise when the analyzer has to wait. */
  #step(chunk: Buffer): Promise<void> | undefined {
    const { data, rest } = this.splitter.push(chunk);
    const after = () => {
      if (!this.splitter.closed) return;
      this.#endDone(this.splitter.bytes);
      for (const piece of rest) this.#toParser(piece);
    };
    const wait = analyseInOrder(this.#analyzer, data);
    if (!wait) {
      after();
      return undefined;
    }
    return wait.then(() => {
      if (!this.#outcome.settled) after();
    });
  }
}

/**
 * Where the request's chunks go:
 * - `headers`: the first part's header block is still arriving (the locator watches for its end);
 * - `deciding`: it ended with the last chunk, so the next one decides whether the part is audio;
 * - `direct`: the audio part's data, read directly until its closing delimiter;
 * - `parser`: everything else (the parts after the audio, a first part that is not audio, or a
 *   boundary with a CR, whose delimiter the direct read cannot find), given to busboy.
 */
type Route = 'headers' | 'deciding' | 'direct' | 'parser';

/**
 * One upload being received. Busboy parses the multipart structure and says which parts there
 * are (the part rules: the first is `file`, one audio part, at most N parts); the audio part's
 * data is analysed as it arrives, taken from the request's own chunks; the bytes over the whole
 * body and after the recording (the tail) are counted against their limits.
 */
class UploadReceiver {
  readonly #ex: HttpExchange;
  readonly #req: HttpExchange['req'];
  readonly #rules: UploadRules;
  readonly #boundary: string;
  readonly #parser: busboy.Busboy;
  readonly #declared: number | undefined;
  readonly #analyzer: UploadAnalyzer;
  readonly #outcome = new Outcome();
  readonly #hold: RequestHold;
  readonly #locator: FirstPartLocator;
  #route: Route = 'headers';
  /** Body bytes received. */
  #total = 0;
  /** Parts seen, and of them file parts. */
  #parts = 0;
  #fileParts = 0;
  /** The audio part's stream from busboy, set (synchronously, in a write) when it is accepted. */
  #audioPart: Readable | undefined;
  /** The audio part read, to its end (its byte count known and the tail measured from there). */
  #audioRead: Promise<void> | undefined;
  /** Set when the audio part's data is read from the request chunks directly. */
  #direct: DirectAudioRead | undefined;
  /** Offset where the bytes after the recording's closing delimiter begin, once known. */
  #tailStart: number | undefined;
  /** The parser closed: the whole body was parsed. */
  #parsed = false;

  constructor(ex: HttpExchange, rules: UploadRules, { boundary, parser }: UploadHeaders, keepAudio: boolean) {
    this.#ex = ex;
    this.#req = ex.req;
    this.#rules = rules;
    this.#boundary = boundary;
    this.#parser = parser;
    this.#declared = declaredLength(ex.req);
    this.#analyzer = new UploadAnalyzer({
      lifecycle: ex.ctx.lifecycle,
      maxDurationSec: rules.maxDurationSec,
      durationBound: rules.durationBound,
      signal: ex.signal,
      hash: ex.ctx.hashUploads,
      keepAudio,
    });
    this.#hold = new RequestHold(ex.req, this.#outcome);
    this.#locator = new FirstPartLocator(boundary);
  }

  async receive(): Promise<AnalyzedAudio> {
    const req = this.#req;
    const bb = this.#parser;
    const outcome = this.#outcome;
    bb.on('file', (name: string, stream: Readable) => this.#onFilePart(name, stream));
    bb.on('field', (name: string) => this.#onField(name));
    bb.on('error', (err: Error) =>
      outcome.fail(reject('VALIDATION_INVALID_FORMAT', `malformed multipart body: ${err.message}`)),
    );
    bb.on('close', () => {
      this.#parsed = true;
      if (this.#fileParts === 0)
        outcome.fail(reject('VALIDATION_REQUIRED_FIELD', 'the multipart body has no `file` part'));
      else outcome.succeed();
    });
    req.on('data', this.#onData);
    req.once('end', () => {
      const end = () => {
        if (!outcome.settled) bb.end();
      };
      const queue = this.#direct?.queue;
      if (queue) queue.then(end, () => {});
      else end();
    });
    req.once('error', (err) => outcome.fail(err));
    const { signal } = this.#ex;
    signal.addEventListener('abort', () => outcome.fail(signal.reason), { once: true });

    try {
      await outcome.promise;
      await this.#audioRead;
      if (!this.#parsed) throw reject('VALIDATION_INVALID_FORMAT', 'the multipart body ended early');
      const tail = this.#tailRejection();
      if (tail) throw tail;
      return await this.#analyzer.finish();
    } catch (err) {
      req.off('data', this.#onData);
      bb.removeAllListeners('drain');
      req.resume();
      throw err as Rejection;
    } finally {
      this.#analyzer.dispose();
      if (!bb.destroyed) bb.destroy();
    }
  }

  // --- the part rules (busboy's events) ---

  /** Count a part: false (the upload failed) past the multipart part limit. */
  #countPart(): boolean {
    this.#parts++;
    const limit = this.#rules.multipartParts;
    if (this.#parts > limit) {
      this.#outcome.fail(
        reject('FILE_COUNT_EXCEEDED', `more than ${limit} multipart parts`, {
          data: limitData('multipart_parts', limit, this.#parts),
        }),
      );
      return false;
    }
    return true;
  }

  #onFilePart(name: string, stream: Readable): void {
    const outcome = this.#outcome;
    // A part cut short by a rejection errors; that is expected, not a crash.
    stream.on('error', () => {});
    if (outcome.settled || !this.#countPart()) {
      stream.resume();
      return;
    }
    this.#fileParts++;
    if (this.#parts === 1 && name !== 'file') {
      stream.resume();
      outcome.fail(reject('VALIDATION_REQUIRED_FIELD', 'the first multipart field must be `file`'));
      return;
    }
    const limit = this.#rules.fileParts;
    if (this.#fileParts > limit) {
      stream.resume();
      outcome.fail(
        reject('FILE_COUNT_EXCEEDED', `more than ${limit} audio part`, {
          data: limitData('file_parts', limit, this.#fileParts),
        }),
      );
      return;
    }
    this.#audioPart = stream;
    this.#audioRead = this.#readAudioPart(stream);
    this.#audioRead.catch((err: unknown) => outcome.fail(err));
  }

  #onField(name: string): void {
    if (this.#outcome.settled || !this.#countPart()) return;
    if (this.#parts === 1) {
      this.#outcome.fail(
        reject(
          'VALIDATION_REQUIRED_FIELD',
          name === 'file' ? '`file` must be a file part' : 'the first multipart field must be `file`',
        ),
      );
    }
  }

  /**
   * The audio part's data to the analyzer as busboy gives it, unless it is read directly (then
   * busboy's part holds one byte); at its end, where the tail begins.
   */
  async #readAudioPart(stream: Readable): Promise<void> {
    let bytes = 0;
    let ignored = 0;
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (this.#outcome.settled) continue;
      if (this.#direct) {
        // Read directly, busboy sees one byte of this part; more would be a disagreement.
        ignored += chunk.length;
        if (ignored > 1) throw reject('VALIDATION_INVALID_FORMAT', 'malformed multipart body');
        continue;
      }
      bytes += chunk.length;
      await this.#analyzer.write(chunk);
    }
    if (this.#direct) bytes = await this.#direct.done;
    // The locator saw every byte busboy parsed, so it knows where this part began; if it
    // ever disagreed with busboy the tail could not be measured: refuse rather than skip it.
    const start = this.#locator.dataOffset;
    if (start === undefined) throw reject('VALIDATION_INVALID_FORMAT', 'malformed multipart body');
    this.#tailStart = start + bytes + Buffer.byteLength(`\r\n--${this.#boundary}`);
    this.#checkTail();
  }

  // --- the tail after the recording ---

  #tailRejection(): Rejection | undefined {
    const limit = this.#rules.maxTailBytes;
    if (this.#tailStart === undefined || limit === undefined) return undefined;
    const what = 'the data after the recording';
    const declared = this.#declared;
    if (declared !== undefined) {
      // Errors rule 2: with a declared Content-Length, that is what a 413 observes.
      return declared - this.#tailStart > limit
        ? tooLarge('unvalidatable_tail_bytes', limit, declared, what)
        : undefined;
    }
    return this.#total - this.#tailStart > limit
      ? tooLarge('unvalidatable_tail_bytes', limit, limit + 1, what)
      : undefined;
  }

  #checkTail(): void {
    const r = this.#tailRejection();
    if (r) this.#outcome.fail(r);
  }

  // --- the request's chunks, by route ---

  #toParser = (chunk: Buffer): void => {
    if (!this.#parser.write(chunk)) {
      this.#hold.hold();
      this.#parser.once('drain', this.#hold.release);
    }
  };

  #onData = (chunk: Buffer): void => {
    const outcome = this.#outcome;
    if (outcome.settled) return;
    const chunkStart = this.#total;
    this.#total += chunk.length;
    this.#ex.ctx.stats.bytesIn += chunk.length;
    const { maxBytes, bytesBound } = this.#rules;
    if (this.#total > maxBytes) {
      outcome.fail(tooLarge(bytesBound, maxBytes, maxBytes + 1, 'the request body'));
      return;
    }
    if (this.#route === 'direct') {
      const direct = this.#direct!;
      if (!direct.closed) {
        direct.push(chunk);
        // Analysed already, none of it kept (nor queued, nor given to busboy), and no other
        // listener to read it: its memory is freed now (see releaseChunk).
        if (
          !(outcome.settled || direct.queue || direct.closed || this.#analyzer.holdsInput) &&
          this.#req.listenerCount('data') === 1
        )
          releaseChunk(chunk);
        return;
      }
      this.#route = 'parser';
    }
    this.#locator.push(chunk);
    this.#checkTail();
    const start = this.#locator.dataOffset;
    if (this.#route === 'headers' && start !== undefined)
      this.#route = this.#boundary.includes('\r') ? 'parser' : 'deciding';
    if (this.#route === 'deciding') this.#decide(chunk, Math.max(0, start! - chunkStart));
    else this.#toParser(chunk);
  };

  /**
   * The first part's headers have ended, and its data begins at `split` in `chunk`. Busboy holds
   * back a header block's final CRLF (it could begin a delimiter) until the next byte, so it is
   * given one byte of data too: then it says at once, in the write, whether this is the audio
   * part. If so, the data is read directly from its first byte (busboy's copy of that byte is
   * ignored).
   */
  #decide(chunk: Buffer, split: number): void {
    if (split >= chunk.length) {
      this.#toParser(chunk); // the next chunk decides
      return;
    }
    this.#toParser(chunk.subarray(0, split + 1));
    const outcome = this.#outcome;
    if (!this.#audioPart || outcome.settled) {
      this.#route = 'parser';
      if (!outcome.settled) this.#toParser(chunk.subarray(split + 1));
      return;
    }
    this.#route = 'direct';
    this.#direct = new DirectAudioRead(this.#boundary, this.#analyzer, outcome, this.#hold, this.#toParser);
    this.#direct.push(chunk.subarray(split));
  }
}
