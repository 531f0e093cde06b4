// Fast transcription of one complete, bounded unit: HTTP multipart with an NDJSON response, or
// Socket.IO `audio_file`. Records come out as an async iterable that ends at `is_final: true`;
// a response that ends without it is an IncompleteStreamError. Failures before any record
// are retried with a fresh id (nothing was delivered); after output started, never.

import {
  IncompleteStreamError,
  ProtocolError,
  type SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import { REALTIME_OPERATIONS, realtimePath } from '../protocol/http-paths.ts';
import type { Language } from '../protocol/languages.ts';
import type { Limits } from '../protocol/limits.ts';
import { NdjsonDecoder } from '../protocol/ndjson.ts';
import { type FastRecord, validateFastRecord } from '../protocol/records.ts';
import { randomUuid } from '../protocol/uuid.ts';
import { isAdmissionRejection } from './admission.ts';
import { Deadline, type RetryPolicy } from './attempts.ts';
import { DEFAULT_DEADLINES } from './deadlines.ts';
import { decoded, type HttpTransport, transportError } from './http.ts';
import { oneShotRejection, type UploadInput, type UploadSource, uploadSource } from './input.ts';
import { checkUploadBytes, multipartBody, withInputError } from './multipart.ts';
import type { SocketTransport } from './socket.ts';

/** Options of {@link FastApi.transcribe} and {@link FastApi.transcribeFinal}. */
export interface FastOptions {
  /** Default `auto` (the service's environment default). */
  language?: Language;
  /** Model key (sent as `asr`); omitted uses the environment default. */
  model?: string;
  /** Default `http`. */
  transport?: 'http' | 'socketio';
  /** The request id; fresh by default (and fresh again on every retry). */
  id?: string;
  /** Aborts the transcription, including its wait for admission. */
  signal?: AbortSignal;
  /**
   * The longest the whole transcription may take, from its first attempt to its final record:
   * retries, pauses and waits included (`DeadlineExceededError` past it). Default the client's
   * `deadlines.fast` (10 min).
   */
  deadlineMs?: number;
  /** Socket.IO: longest wait for the next record. Default 120 s. */
  recordTimeoutMs?: number;
}

/**
 * What a {@link FastApi} shares with its client.
 * @internal
 */
export interface FastDeps {
  http: HttpTransport;
  socket: SocketTransport;
  policy: RetryPolicy;
  limits: Limits;
  realtimePrefix: string;
  /** Default `deadlines.fast`. */
  deadlineMs?: number;
}

/**
 * Fast transcription (`client.fast`): a complete recording uploaded over HTTP or Socket.IO,
 * its records streamed back. Made by {@link SpeechClient}.
 */
export class FastApi {
  readonly #deps: FastDeps;

  /**
   * Made by the client; use `client.fast`.
   * @internal
   */
  constructor(deps: FastDeps) {
    this.#deps = deps;
  }

  /**
   * Transcribe and iterate the records; the last one has `is_final: true`. Failures before the
   * first record are retried with a fresh id (nothing was delivered); after it, never.
   */
  async *transcribe(
    input: UploadInput,
    options: FastOptions = {},
  ): AsyncGenerator<FastRecord, void, undefined> {
    const source = await uploadSource(input);
    const limit = this.#deps.limits.fastAudioBytes;
    const socketio = options.transport === 'socketio';
    const operation = socketio ? 'fast.socket' : 'fast.http';
    // Over HTTP the service counts the whole multipart body; over Socket.IO the audio alone.
    checkUploadBytes(source.size, {
      limit,
      bound: 'fast_audio_bytes',
      operation,
      ...(socketio ? {} : { multipart: source }),
    });
    const deadline = new Deadline(
      operation,
      options.deadlineMs ?? this.#deps.deadlineMs ?? DEFAULT_DEADLINES.fast,
    );
    // Over Socket.IO the bytes are held, so the upload can always go again.
    const repeatable = () => socketio || source.reopenable;
    let audio: Buffer | undefined;
    let runs = 0;
    let started: {
      records: AsyncGenerator<FastRecord>;
      first: FastRecord | undefined;
      release: () => void;
      signal: AbortSignal;
    };
    try {
      started = await this.#deps.policy.run({
        operation,
        workload: 'fast',
        signal: options.signal,
        deadline,
        repeatable,
        run: async (attempt) => {
          const id = runs++ === 0 && options.id ? options.id : randomUuid();
          if (socketio) audio ??= await source.bytes(limit);
          const records = audio
            ? this.#socket(id, audio, options, attempt.signal, attempt.accepted)
            : this.#http(id, source, options, attempt.signal, attempt.accepted);
          // Up to the first record nothing was delivered: a failure may be retried.
          const first = await records.next();
          const release = attempt.keepSlot();
          return {
            records,
            first: first.done ? undefined : first.value,
            release: () => void release(),
            signal: attempt.signal,
          };
        },
      });
    } catch (err) {
      deadline.clear();
      if (isAdmissionRejection(err) && !repeatable()) throw oneShotRejection(err as SpeechServiceError);
      throw err;
    }
    const { records, first, release, signal } = started;
    // The caller's abort, the deadline or the client's close ends the transcription whether or
    // not its records are read again: the slot is given back at once, not when the iterator is
    // next read or returned (a consumer that holds it unread would hold the slot for good).
    if (signal.aborted) release();
    else signal.addEventListener('abort', release, { once: true });
    try {
      if (first === undefined) return;
      yield first;
      if (first.is_final) return;
      for await (const record of records) {
        yield record;
        if (record.is_final) return;
      }
    } finally {
      signal.removeEventListener('abort', release);
      deadline.clear();
      release();
      await records.return(undefined);
    }
  }

  /**
   * Transcribe and return the whole file as one record: every record's words in time order and
   * their transcriptions joined, `is_final: true`, the id and `seq` of the final record. The
   * service answers with a record per speech region, so the final record alone holds only the
   * last region's words. A word a later record repeats (same start and end) is kept once.
   */
  async transcribeFinal(input: UploadInput, options: FastOptions = {}): Promise<FastRecord> {
    const records: FastRecord[] = [];
    for await (const record of this.transcribe(input, options)) records.push(record);
    return mergeFastRecords(records);
  }

  /** `accepted`: the service took the request (its 200), for admission's success count. */
  async *#http(
    id: string,
    source: UploadSource,
    options: FastOptions,
    signal: AbortSignal,
    accepted: () => void,
  ): AsyncGenerator<FastRecord> {
    const { http } = this.#deps;
    const stream = source.open();
    if (!stream)
      throw new TransportError('ERR_CONNECTION_RESET', 'fast.http: the input stream was already consumed', {
        operation: 'fast.http',
      });
    const multipart = multipartBody({
      filename: source.filename,
      contentType: source.contentType,
      stream,
      size: source.size,
    });
    const res = await withInputError(
      multipart,
      http.send({
        operation: 'fast.http',
        method: 'POST',
        path: realtimePath(this.#deps.realtimePrefix, REALTIME_OPERATIONS.fastStt),
        query: { id, language: options.language ?? 'auto', asr: options.model },
        headers: {
          'content-type': multipart.contentType,
          accept: 'application/x-ndjson',
          ...(multipart.length === undefined ? {} : { 'content-length': String(multipart.length) }),
        },
        body: multipart.body,
        signal,
        headersTimeoutMs: http.timeouts.uploadHeadersMs,
      }),
    );
    if (res.status !== 200) throw await http.errorOf(res, 'fast.http');
    accepted();
    const decoder = new NdjsonDecoder();
    let received = 0;
    try {
      for await (const chunk of res.body) {
        for (const value of decoded((out) => decoder.push(chunk as Buffer, out))) {
          const record = checkRecord(value, id);
          received++;
          yield record;
          if (record.is_final) return;
        }
      }
      for (const value of decoded((out) => decoder.end(out))) {
        const record = checkRecord(value, id);
        received++;
        yield record;
        if (record.is_final) return;
      }
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if (err instanceof ProtocolError && err.code !== 'ERR_NDJSON_TRUNCATED') throw err;
      // Broken off before any record: nothing was delivered, so it may be retried.
      if (received === 0 && !(err instanceof ProtocolError)) throw transportError(err, 'fast.http', true);
      throw new IncompleteStreamError(`fast.http: response for ${id} broke off after ${received} records`, {
        operation: 'fast.http',
        id,
        received,
        cause: err,
      });
    } finally {
      res.body.destroy();
    }
    throw new IncompleteStreamError(
      `fast.http: response for ${id} ended without a record with is_final: true`,
      {
        operation: 'fast.http',
        id,
        received,
      },
    );
  }

  async *#socket(
    id: string,
    audio: Buffer,
    options: FastOptions,
    signal: AbortSignal,
    accepted: () => void,
  ): AsyncGenerator<FastRecord> {
    const { socket } = this.#deps;
    const queue: FastRecord[] = [];
    let failure: unknown;
    let wake: (() => void) | undefined;
    let received = 0;
    // Ends the acknowledgement wait when the upload fails before it (an `error` event naming
    // it, a disconnect), so that failure is the answer: the service does not acknowledge an
    // upload it refused with an event, and the wait would run to its 5 min timeout, then be
    // retried as an ambiguous timeout with the refusal lost.
    const starting = new AbortController();
    const unroute = socket.route(id, {
      operation: 'fast.socket',
      onResult: (event, payload) => {
        if (event !== socket.events.transcriptionResult) return;
        try {
          queue.push(checkRecord(payload, id));
        } catch (err) {
          failure ??= err;
        }
        wake?.();
      },
      onError: (err) => {
        failure ??= err;
        starting.abort(failure);
        wake?.();
      },
      onDisconnect: (err) => {
        failure ??=
          err.code !== 'ERR_CLIENT_CLOSED' && (received > 0 || queue.length > 0)
            ? new IncompleteStreamError(`fast.socket: connection lost during ${id}`, {
                operation: 'fast.socket',
                id,
                received,
                cause: err,
              })
            : err;
        starting.abort(failure);
        wake?.();
      },
    });
    try {
      const payload = {
        id,
        language: options.language ?? 'auto',
        audio,
        ...(options.model ? { model: options.model } : {}),
      };
      // The service acknowledges `audio_file` once it has received and validated the whole
      // upload (up to 64 MiB), as it answers an HTTP upload: the upload's wait, not a frame's.
      let ack: Awaited<ReturnType<SocketTransport['emitWithAck']>>;
      try {
        ack = await socket.emitWithAck('fast.socket', socket.events.audioFile, payload, {
          timeoutMs: this.#deps.http.timeouts.uploadHeadersMs,
          signal: AbortSignal.any([signal, starting.signal]),
        });
      } catch (err) {
        throw failure ?? err;
      }
      const rejected = socket.ackError(ack, 'fast.socket');
      if (rejected) throw rejected;
      accepted();
      const timeoutMs = options.recordTimeoutMs ?? 120_000;
      while (true) {
        if (queue.length > 0) {
          const record = queue.shift()!;
          received++;
          yield record;
          if (record.is_final) return;
          continue;
        }
        if (failure !== undefined) throw failure;
        signal.throwIfAborted();
        const timedOut = await new Promise<boolean>((resolve) => {
          const settle = (value: boolean) => {
            clearTimeout(timer);
            signal.removeEventListener('abort', onAbort);
            wake = undefined;
            resolve(value);
          };
          const timer = setTimeout(() => settle(true), timeoutMs);
          const onAbort = () => settle(false);
          signal.addEventListener('abort', onAbort, { once: true });
          wake = () => settle(false);
        });
        if (timedOut) {
          throw new IncompleteStreamError(`fast.socket: no record for ${id} within ${timeoutMs} ms`, {
            operation: 'fast.socket',
            id,
            received,
          });
        }
      }
    } finally {
      unroute();
    }
  }
}

function checkRecord(value: unknown, id: string): FastRecord {
  const check = validateFastRecord(value);
  if (!check.ok) {
    throw new ProtocolError(
      'ERR_INVALID_RECORD',
      `fast record: ${check.issues.map((i) => `${i.path} ${i.message}`).join('; ')}`,
      {
        issues: check.issues,
      },
    );
  }
  if (check.value.id.toLowerCase() !== id.toLowerCase()) {
    throw new ProtocolError('ERR_INVALID_RECORD', `fast record for ${check.value.id}, expected ${id}`);
  }
  return check.value;
}

/** The records of one fast transcription as one: see `FastApi.transcribeFinal`. */
export function mergeFastRecords(records: readonly FastRecord[]): FastRecord {
  const last = records.at(-1);
  if (last === undefined) throw new IncompleteStreamError('fast transcription ended without a record');
  const seen = new Set<string>();
  const words: FastRecord['words'] = [];
  const texts: string[] = [];
  for (const record of records) {
    let fresh = false;
    for (const word of record.words) {
      const key = `${word.start_time}:${word.end_time}`;
      if (seen.has(key)) continue;
      seen.add(key);
      words.push(word);
      fresh = true;
    }
    const text = record.transcription.trim();
    if (text !== '' && (fresh || record.words.length === 0)) texts.push(text);
  }
  words.sort((a, b) => a.start_time - b.start_time);
  return { id: last.id, seq: last.seq, transcription: texts.join(' '), words, is_final: true };
}
