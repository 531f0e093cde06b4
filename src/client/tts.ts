// Text-to-speech: direct HTTP (the 16 kHz service-frame stream, demultiplexed to PCM) or
// Socket.IO (playable 24 kHz PCM), and the voice listing. The body is checked before sending
// with the service's own rules; failures before output are retried with a fresh UUID, never
// after; a body that ends before its final frame is an IncompleteStreamError.

import { Readable } from 'node:stream';
import {
  IncompleteStreamError,
  localServiceError,
  ProtocolError,
  type SpeechServiceError,
} from '../protocol/errors.ts';
import { REALTIME_OPERATIONS, realtimePath } from '../protocol/http-paths.ts';
import type { Limits, Tier } from '../protocol/limits.ts';
import {
  HTTP_TTS_SAMPLE_RATE,
  SOCKET_TTS_SAMPLE_RATE,
  type VoiceProfile,
} from '../protocol/socket-events.ts';
import { TtsDemuxer } from '../protocol/tts-frames.ts';
import { checkTtsRequest, DEFAULT_TTS_MODEL, type TtsRequestBody } from '../protocol/tts-request.ts';
import { isUuid, randomUuid } from '../protocol/uuid.ts';
import { isObject } from '../protocol/validate.ts';
import { type Admission, isAdmissionRejection } from './admission.ts';
import { type HttpTransport, transportError } from './http.ts';
import { backoffDelay, DEFAULT_RETRY, isRetryableFailure, type RetryOptions, sleep } from './retry.ts';
import type { SocketTransport } from './socket.ts';

export interface VoiceReferenceInput {
  /** A RIFF/WAVE file of mono PCM16 (bytes, or standard base64 of them). */
  audio: Uint8Array | string;
  /** Its transcript. */
  text: string;
}

export interface SynthesizeOptions {
  text: string;
  voiceId?: string;
  voiceReferences?: VoiceReferenceInput[];
  /** Default `nebula` (sent explicitly, as the interface advises). */
  model?: string;
  /** `http` (16 kHz, protocol capture) or `socketio` (24 kHz, playable). Default `http`. */
  transport?: 'http' | 'socketio';
  signal?: AbortSignal;
}

export interface TtsSynthesis {
  /** The request UUID of the attempt that produced the audio. */
  id: string;
  transport: 'http' | 'socketio';
  sampleRate: number;
  channels: 1;
  /** PCM16LE mono at `sampleRate`. Ends after the final frame; errors if the body is cut. */
  audio: Readable;
}

export interface TtsDeps {
  http: HttpTransport;
  socket: SocketTransport;
  admission: Admission;
  limits: Limits;
  tier: Tier | undefined;
  retry: RetryOptions;
  realtimePrefix: string;
}

export class TtsApi {
  readonly #deps: TtsDeps;

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
    const maxAttempts = this.#deps.retry.maxAttempts ?? DEFAULT_RETRY.maxAttempts;
    for (let attempt = 0; ; attempt++) {
      const body = this.body(options);
      const slot = await this.#deps.admission.acquire('tts', {
        signal: options.signal,
        retrying: attempt > 0,
      });
      try {
        return options.transport === 'socketio'
          ? await this.#socket(body, options, slot.release)
          : await this.#http(body, options, slot.release);
      } catch (err) {
        slot.release();
        if (isAdmissionRejection(err) && attempt < 100) {
          slot.rejected(err, attempt);
          continue;
        }
        if (options.signal?.aborted || !isRetryableFailure(err) || attempt + 1 >= maxAttempts) throw err;
        await sleep(
          backoffDelay(attempt, this.#deps.retry, (err as SpeechServiceError).retryAfterMs),
          options.signal,
        );
      }
    }
  }

  /** Synthesize and collect the whole PCM. */
  async synthesizeToBuffer(
    options: SynthesizeOptions,
  ): Promise<{ id: string; sampleRate: number; pcm: Buffer }> {
    const synthesis = await this.synthesize(options);
    const chunks: Buffer[] = [];
    for await (const chunk of synthesis.audio) chunks.push(chunk as Buffer);
    return { id: synthesis.id, sampleRate: synthesis.sampleRate, pcm: Buffer.concat(chunks) };
  }

  /** The voice profiles (Socket.IO only: no HTTP operation lists voices). */
  async listVoices(options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<VoiceProfile[]> {
    const { socket } = this.#deps;
    const ack: unknown = await socket.emitWithAck(
      'voices.socket',
      socket.events.listVoices,
      {},
      {
        timeoutMs: options.timeoutMs ?? 30_000,
        signal: options.signal,
      },
    );
    if (isObject(ack) && ack.ok === false) throw socket.ackError(ack as never, 'voices.socket');
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
          for (const piece of demuxer.push(chunk as Buffer)) if (piece.pcm.length > 0) yield piece.pcm;
        }
        for (const piece of demuxer.end()) if (piece.pcm.length > 0) yield piece.pcm;
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
        res.body.destroy();
        release();
      }
    }
    const audio = Readable.from(pcm(), { objectMode: false });
    // A generator that never started skips its finally: release on close as well.
    audio.once('close', () => {
      res.body.destroy();
      release();
    });
    return { id, transport: 'http', sampleRate: HTTP_TTS_SAMPLE_RATE, channels: 1, audio };
  }

  async #socket(
    body: TtsRequestBody,
    options: SynthesizeOptions,
    release: () => void,
  ): Promise<TtsSynthesis> {
    const { socket } = this.#deps;
    const id = body.id;
    let frames = 0;
    let carry: number | undefined;
    const audio = new Readable({
      read() {},
      destroy(err, callback) {
        cleanup();
        callback(err);
      },
    });
    const fail = (err: Error) => {
      if (!audio.destroyed && !audio.readableEnded) audio.destroy(err);
    };
    const unroute = socket.route(id, {
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
        }
      },
      onError: (err) => fail(err),
      onDisconnect: (err) =>
        fail(
          new IncompleteStreamError(`tts.socket: connection lost during ${id}`, {
            operation: 'tts.socket',
            id,
            received: frames,
            cause: err,
          }),
        ),
    });
    let cleaned = false;
    function cleanup() {
      if (cleaned) return;
      cleaned = true;
      unroute();
      release();
      options.signal?.removeEventListener('abort', onAbort);
    }
    const onAbort = () => fail(options.signal!.reason);
    options.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const ack = await socket.emitWithAck('tts.socket', socket.events.ttsRequest, body, {
        timeoutMs: 60_000,
        signal: options.signal,
      });
      const rejected = socket.ackError(ack, 'tts.socket');
      if (rejected) throw rejected;
    } catch (err) {
      cleaned = true; // the caller releases the slot before retrying
      unroute();
      options.signal?.removeEventListener('abort', onAbort);
      audio.destroy();
      throw err;
    }
    return { id, transport: 'socketio', sampleRate: SOCKET_TTS_SAMPLE_RATE, channels: 1, audio };
  }
}
