// Text-to-speech: direct HTTP (the 16 kHz service-frame stream, demultiplexed to PCM) or
// Socket.IO (playable 24 kHz PCM), and the voice listing. The body is checked before sending
// with the service's own rules; failures before output are retried with a fresh UUID, never
// after; a body that ends before its final frame is an IncompleteStreamError.

import { Readable } from 'node:stream';
import { IncompleteStreamError, localServiceError, ProtocolError } from '../protocol/errors.ts';
import { REALTIME_OPERATIONS, realtimePath } from '../protocol/http-paths.ts';
import type { Limits, Tier } from '../protocol/limits.ts';
import {
  HTTP_TTS_SAMPLE_RATE,
  SOCKET_TTS_SAMPLE_RATE,
  type VoiceProfile,
} from '../protocol/socket-events.ts';
import { type TtsChunk, TtsDemuxer } from '../protocol/tts-frames.ts';
import { checkTtsRequest, DEFAULT_TTS_MODEL, type TtsRequestBody } from '../protocol/tts-request.ts';
import { isUuid, randomUuid } from '../protocol/uuid.ts';
import { isObject } from '../protocol/validate.ts';
import type { Attempt, RetryPolicy } from './attempts.ts';
import { DEFAULT_DEADLINES, type OperationDeadlines } from './deadlines.ts';
import { decoded, type HttpTransport, transportError } from './http.ts';
import { isRetryableFailure } from './retry.ts';
import type { SocketTransport } from './socket.ts';

/** A reference recording of the voice to synthesize with, and its transcript. */
export interface VoiceReferenceInput {
  /** A RIFF/WAVE file of mono PCM16 (bytes, or standard base64 of them). */
  audio: Uint8Array | string;
  /** Its transcript. */
  text: string;
}

/** Options of {@link TtsApi.synthesize}. */
export interface SynthesizeOptions {
  /** The text to speak; checked before sending against the tier's length limit. */
  text: string;
  /** A voice from {@link TtsApi.listVoices}. */
  voiceId?: string;
  /** Reference recordings of a voice to clone, instead of `voiceId`. */
  voiceReferences?: VoiceReferenceInput[];
  /** Default `nebula` (sent explicitly, as the interface advises). */
  model?: string;
  /** `http` (16 kHz, protocol capture) or `socketio` (24 kHz, playable). Default `http`. */
  transport?: 'http' | 'socketio';
  /** Aborts the synthesis, including its audio stream. */
  signal?: AbortSignal;
  /**
   * The longest the synthesis may take to begin (`synthesize`: attempts, pauses and waits until
   * its audio begins; the audio then ends by itself or fails after `idleTimeoutMs` of silence)
   * or to complete (`synthesizeToBuffer`: the whole audio). Default the client's
   * `deadlines.ttsStart` (60 s) or `deadlines.ttsBuffer` (3 min).
   */
  deadlineMs?: number;
  /**
   * Socket.IO: wait for the service to accept the request. Default: the client's (30 s), above
   * the service's 25 s synthesis deadline: the emulator acknowledges once synthesis has begun,
   * and past the deadline refuses with `TTS_DEADLINE_EXCEEDED` rather than staying silent.
   */
  ackTimeoutMs?: number;
  /**
   * Socket.IO: longest silence between two `tts_audio` events before the audio fails with
   * `IncompleteStreamError`. Default: the client's body-idle timeout (120 s), as over HTTP.
   */
  idleTimeoutMs?: number;
  /**
   * Socket.IO: most audio bytes held for a consumer that does not read; past it the audio fails
   * with `IncompleteStreamError`. Default 16 MiB, well above the audio of the longest text the
   * tiers allow (1,000 code points), so only a stalled consumer reaches it.
   */
  maxBufferedBytes?: number;
}

/**
 * Audio that failed because its reader did not keep up (`maxBufferedBytes`): not the
 * service's doing, so `synthesizeToBuffer` does not speak it again.
 */
const OVERFLOWED = new WeakSet<Error>();

/** See `SynthesizeOptions.maxBufferedBytes`: 16 MiB is about 5.8 min of 24 kHz PCM16. */
export const DEFAULT_TTS_MAX_BUFFERED_BYTES = 16 * 1024 * 1024;

/** A synthesis under way: its audio as a stream, and its format. */
export interface TtsSynthesis {
  /** The request UUID of the attempt that produced the audio. */
  id: string;
  /** The transport that produced the audio. */
  transport: 'http' | 'socketio';
  /** Hz: 16,000 over HTTP, 24,000 over Socket.IO. */
  sampleRate: number;
  /** Always mono. */
  channels: 1;
  /** PCM16LE mono at `sampleRate`. Ends after the final frame; errors if the body is cut. */
  audio: Readable;
}

/**
 * What a {@link TtsApi} shares with its client.
 * @internal
 */
export interface TtsDeps {
  http: HttpTransport;
  socket: SocketTransport;
  policy: RetryPolicy;
  limits: Limits;
  tier: Tier | undefined;
  realtimePrefix: string;
  /** Wait for Socket.IO acknowledgements. Default: the Socket.IO transport's (30 s). */
  socketAckTimeoutMs?: number;
  /** Defaults of `deadlineMs` (`ttsStart`, `ttsBuffer`, `voices`). */
  deadlines?: Partial<Pick<OperationDeadlines, 'ttsStart' | 'ttsBuffer' | 'voices'>>;
}

/**
 * Speech synthesis (`client.tts`) over HTTP or Socket.IO, and the voice listing. Made by
 * {@link SpeechClient}.
 */
export class TtsApi {
  readonly #deps: TtsDeps;

  /**
   * Made by the client; use `client.tts`.
   * @internal
   */
  constructor(deps: TtsDeps) {
    this.#deps = deps;
  }

  /** The request body for `options` with a fresh `id`, checked as the service would. */
  body(options: SynthesizeOptions, id: string = randomUuid()): TtsRequestBody {
    const body: Record<string, unknown> = {
      id,
      text: options.text,
      model: options.model ?? DEFAULT_TTS_MODEL,
    };
    if (options.voiceId !== undefined) body.voice_id = options.voiceId;
    if (options.voiceReferences !== undefined) {
      body.voice_references = options.voiceReferences.map((ref) => ({
        audio:
          typeof ref.audio === 'string'
            ? ref.audio
            : Buffer.from(ref.audio.buffer, ref.audio.byteOffset, ref.audio.byteLength).toString('base64'),
        text: ref.text,
      }));
    }
    const json = JSON.stringify(body);
    const check = checkTtsRequest(body, {
      tier: this.#deps.tier,
      limits: this.#deps.limits,
      bodyBytes: Buffer.byteLength(json),
    });
    if (!check.ok) {
      const { status, code, detail, data } = check.rejection;
      throw localServiceError(code, detail, {
        status,
        ...(data ? { data } : {}),
        operation: options.transport === 'socketio' ? 'tts.socket' : 'tts.http',
      });
    }
    return check.body;
  }

  /** Start a synthesis; resolves when output begins. */
  async synthesize(options: SynthesizeOptions): Promise<TtsSynthesis> {
    this.body(options); // fail fast, before queueing
    return this.#deps.policy.run({
      operation: this.#operation(options),
      workload: 'tts',
      signal: options.signal,
      deadline: options.deadlineMs ?? this.#deps.deadlines?.ttsStart ?? DEFAULT_DEADLINES.ttsStart,
      run: (attempt) => this.#begin(options, attempt),
    });
  }

  /**
   * Synthesize and collect the whole PCM. A synthesis whose audio breaks off (the body cut, the
   * connection lost, the final event never coming: `IncompleteStreamError`) is started again
   * with a fresh request id: nothing was handed out, so nothing is lost or doubled. Every
   * attempt counts toward the client's `retry.maxAttempts`, those failed before output too, and
   * all of them together toward `deadlineMs`. Not audio over `maxBufferedBytes`: a bound that
   * one burst of events passes is passed again.
   */
  async synthesizeToBuffer(
    options: SynthesizeOptions,
  ): Promise<{ id: string; sampleRate: number; pcm: Buffer }> {
    this.body(options);
    return this.#deps.policy.run({
      operation: this.#operation(options),
      workload: 'tts',
      signal: options.signal,
      deadline: options.deadlineMs ?? this.#deps.deadlines?.ttsBuffer ?? DEFAULT_DEADLINES.ttsBuffer,
      retryable: (err) =>
        isRetryableFailure(err) || (err instanceof IncompleteStreamError && !OVERFLOWED.has(err)),
      run: async (attempt) => {
        const synthesis = await this.#begin({ ...options, signal: attempt.signal }, attempt);
        const chunks: Buffer[] = [];
        for await (const chunk of synthesis.audio) chunks.push(chunk as Buffer);
        return { id: synthesis.id, sampleRate: synthesis.sampleRate, pcm: Buffer.concat(chunks) };
      },
    });
  }

  #operation(options: SynthesizeOptions): 'tts.socket' | 'tts.http' {
    return options.transport === 'socketio' ? 'tts.socket' : 'tts.http';
  }

  /** One attempt: a fresh request id, until the audio begins; the slot is held while it plays. */
  async #begin(options: SynthesizeOptions, attempt: Attempt): Promise<TtsSynthesis> {
    const body = this.body(options);
    const scoped = { ...options, signal: attempt.signal };
    // The slot is the policy's until the audio begins, then the audio's: it is given back when
    // the audio ends, which can be before the synthesis is handed out (the final event may come
    // with the acknowledgement).
    let release: (() => Promise<void>) | undefined;
    let ended = false;
    const done = () => {
      ended = true;
      void release?.();
    };
    const synthesis =
      options.transport === 'socketio'
        ? await this.#socket(body, scoped, done)
        : await this.#http(body, scoped, done);
    // The 200 or the acknowledgement came: a success for admission, reported before the slot
    // may be given back (a released slot counts no success, and the audio may be over already).
    attempt.accepted();
    release = attempt.keepSlot();
    if (ended) void release();
    return synthesis;
  }

  /** The voice profiles (Socket.IO only: no HTTP operation lists voices). */
  async listVoices(
    options: { signal?: AbortSignal; timeoutMs?: number; deadlineMs?: number } = {},
  ): Promise<VoiceProfile[]> {
    const { socket } = this.#deps;
    const ack: unknown = await this.#deps.policy.run({
      operation: 'voices.socket',
      signal: options.signal,
      deadline: options.deadlineMs ?? this.#deps.deadlines?.voices ?? DEFAULT_DEADLINES.voices,
      effectful: false,
      // A refusal is the attempt's failure, so the service's `retryable` flag decides whether it
      // is tried again (a 503 of a storage outage is), as for every other operation.
      run: async ({ signal }) => {
        const answer: unknown = await socket.emitWithAck(
          'voices.socket',
          socket.events.listVoices,
          {},
          {
            timeoutMs: options.timeoutMs ?? this.#deps.socketAckTimeoutMs,
            signal,
          },
        );
        if (isObject(answer) && answer.ok === false) throw socket.ackError(answer as never, 'voices.socket');
        return answer;
      },
    });
    const voices = isObject(ack) ? ack.voices : undefined;
    if (
      !Array.isArray(voices) ||
      !voices.every(
        (v) => isObject(v) && isUuid(v.id) && typeof v.name === 'string' && Array.isArray(v.languages),
      )
    ) {
      throw new ProtocolError('ERR_INVALID_RECORD', 'voice listing is not {voices: [{id, name, languages}]}');
    }
    return voices as VoiceProfile[];
  }

  async #http(body: TtsRequestBody, options: SynthesizeOptions, release: () => void): Promise<TtsSynthesis> {
    const { http } = this.#deps;
    const res = await http.send({
      operation: 'tts.http',
      method: 'POST',
      path: realtimePath(this.#deps.realtimePrefix, REALTIME_OPERATIONS.tts),
      headers: { 'content-type': 'application/json', accept: 'application/octet-stream' },
      body: Buffer.from(JSON.stringify(body)),
      signal: options.signal,
    });
    if (res.status !== 200) throw await http.errorOf(res, 'tts.http');
    const id = body.id;
    async function* pcm(): AsyncGenerator<Buffer> {
      const demuxer = new TtsDemuxer(id);
      try {
        for await (const chunk of res.body) {
          for (const piece of decoded<TtsChunk>((out) => demuxer.push(chunk as Buffer, out)))
            if (piece.pcm.length > 0) yield piece.pcm;
        }
        for (const piece of decoded<TtsChunk>((out) => demuxer.end(out)))
          if (piece.pcm.length > 0) yield piece.pcm;
      } catch (err) {
        if (err instanceof ProtocolError || err instanceof IncompleteStreamError || options.signal?.aborted)
          throw err;
        throw new IncompleteStreamError(`tts.http: body for ${id} broke off (${(err as Error).message})`, {
          operation: 'tts.http',
          id,
          received: demuxer.frames,
          cause: transportError(err, 'tts.http', true),
        });
      } finally {
        done();
      }
    }
    // The caller's abort ends the synthesis whether or not its audio is ever read: the body
    // and the slot are released at once (the audio fails with the reason when it is read).
    const signal = options.signal;
    const done = () => {
      signal?.removeEventListener('abort', done);
      res.body.destroy();
      release();
    };
    if (signal?.aborted) done();
    else signal?.addEventListener('abort', done, { once: true });
    const audio = Readable.from(pcm(), { objectMode: false });
    // A generator that never started skips its finally: release on close as well.
    audio.once('close', done);
    return { id, transport: 'http', sampleRate: HTTP_TTS_SAMPLE_RATE, channels: 1, audio };
  }

  async #socket(
    body: TtsRequestBody,
    options: SynthesizeOptions,
    release: () => void,
  ): Promise<TtsSynthesis> {
    const { socket } = this.#deps;
    const id = body.id;
    const idleMs = options.idleTimeoutMs ?? this.#deps.http.timeouts.bodyIdleMs;
    const maxBuffered = options.maxBufferedBytes ?? DEFAULT_TTS_MAX_BUFFERED_BYTES;
    let frames = 0;
    let carry: number | undefined;
    /** The caller holds `audio` (the acknowledgement came): failures go to the stream. */
    let handed = false;
    let failure: Error | undefined;
    let idle: NodeJS.Timeout | undefined;
    // Ends the acknowledgement wait when the synthesis fails before it (an `error` event, a
    // disconnect, the caller's abort), so the failure reaches the caller as the rejection.
    const starting = new AbortController();
    const audio = new Readable({
      read() {},
      destroy(err, callback) {
        cleanup();
        callback(err);
      },
    });
    // Destroying with an error a stream no one listens to yet throws it as an uncaught
    // exception; such a failure waits until the caller starts consuming.
    const consuming = () =>
      audio.listenerCount('error') > 0 ||
      audio.listenerCount('readable') > 0 ||
      audio.readableFlowing === true;
    const onListener = (event: string | symbol) => {
      if (event !== 'error' && event !== 'data' && event !== 'readable') return;
      audio.off('newListener', onListener);
      process.nextTick(() => audio.destroy(failure));
    };
    const fail = (err: Error) => {
      if (failure !== undefined || cleaned) return;
      failure = err;
      if (!handed) {
        starting.abort(err);
        return;
      }
      cleanup();
      if (consuming()) audio.destroy(err);
      else audio.on('newListener', onListener);
    };
    const armIdle = () => {
      clearTimeout(idle);
      idle = setTimeout(
        () =>
          fail(
            new IncompleteStreamError(`tts.socket: no audio for ${id} within ${idleMs} ms`, {
              operation: 'tts.socket',
              id,
              received: frames,
            }),
          ),
        idleMs,
      );
    };
    const unroute = socket.route(id, {
      operation: 'tts.socket',
      onResult: (event, payload) => {
        if (event !== socket.events.ttsAudio) return;
        const p = payload as { audio?: unknown; is_final?: unknown };
        const bytes =
          p.audio instanceof Uint8Array
            ? Buffer.from(p.audio)
            : p.audio instanceof ArrayBuffer
              ? Buffer.from(p.audio)
              : undefined;
        if (!bytes || typeof p.is_final !== 'boolean') {
          fail(
            new ProtocolError(
              'ERR_INVALID_RECORD',
              'tts_audio must be {id, audio: binary, is_final: boolean}',
            ),
          );
          return;
        }
        frames++;
        if (handed) armIdle();
        // Whole samples only; a half sample waits for the next event.
        let data = carry === undefined ? bytes : Buffer.concat([Buffer.of(carry), bytes]);
        carry = undefined;
        if (data.length % 2) {
          carry = data[data.length - 1];
          data = data.subarray(0, data.length - 1);
        }
        if (data.length > 0) audio.push(data);
        if (p.is_final) {
          if (carry !== undefined)
            fail(new ProtocolError('ERR_TTS_FRAME', 'TTS audio ends with half a PCM16 sample'));
          else {
            cleanup();
            audio.push(null);
          }
          return;
        }
        // Socket.IO cannot pause one event stream without stalling every other operation on
        // the shared connection, so audio the consumer does not read is buffered up to a bound,
        // then the synthesis fails rather than holding memory without limit. (Events can come in
        // the same tick as the acknowledgement: the caller gets its turn to read first.)
        if (handed && audio.readableLength > maxBuffered) {
          const overflow = new IncompleteStreamError(
            `tts.socket: ${id} stopped: ${audio.readableLength} bytes of audio unread, over maxBufferedBytes ${maxBuffered} (read the audio as it arrives)`,
            { operation: 'tts.socket', id, received: frames },
          );
          OVERFLOWED.add(overflow);
          fail(overflow);
        }
      },
      onError: (err) => fail(err),
      onDisconnect: (err) =>
        fail(
          // Before the acknowledgement nothing was output: the transport error, so it is retried.
          // A closed client says so, rather than that the audio broke off.
          handed && err.code !== 'ERR_CLIENT_CLOSED'
            ? new IncompleteStreamError(`tts.socket: connection lost during ${id}`, {
                operation: 'tts.socket',
                id,
                received: frames,
                cause: err,
              })
            : err,
        ),
    });
    let cleaned = false;
    function cleanup(releaseSlot = true) {
      if (cleaned) return;
      cleaned = true;
      clearTimeout(idle);
      unroute();
      if (releaseSlot) release();
      options.signal?.removeEventListener('abort', onAbort);
    }
    const onAbort = () => fail(options.signal!.reason);
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const ack = await socket.emitWithAck('tts.socket', socket.events.ttsRequest, body, {
        timeoutMs: options.ackTimeoutMs ?? this.#deps.socketAckTimeoutMs,
        signal: starting.signal,
      });
      const rejected = socket.ackError(ack, 'tts.socket');
      if (rejected) throw rejected;
    } catch (err) {
      cleanup(false); // synthesize() releases the slot, after reporting an admission rejection
      audio.destroy();
      throw failure ?? err;
    }
    if (failure !== undefined) {
      cleanup(false);
      audio.destroy();
      throw failure;
    }
    handed = true;
    // The final event may have come before the acknowledgement: then it is all over already.
    if (!cleaned) armIdle();
    return { id, transport: 'socketio', sampleRate: SOCKET_TTS_SAMPLE_RATE, channels: 1, audio };
  }
}
