// The Socket.IO side: handshake authentication (x-api-key and Origin), live frames
// (`audio_stream`, `diarization_stream`), fast transcription (`audio_file`), TTS (`tts_request`
// → `tts_audio`) and the voice listing, with frame acknowledgements and fault injection.

import type { Server, Socket } from 'socket.io';
import { decodeFrame } from '../protocol/frame.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { AudioFilePayload, FrameAck } from '../protocol/socket-events.ts';
import { LIVE_BYTES_PER_SECOND, SOCKET_EVENTS, SOCKET_TTS_SAMPLE_RATE } from '../protocol/socket-events.ts';
import { checkTtsRequest } from '../protocol/tts-request.ts';
import { bytesToUuid, isZeroUuid } from '../protocol/uuid.ts';
import { isObject } from '../protocol/validate.ts';
import type { Admit, RequestAdmission } from './admission.ts';
import { UploadAnalyzer } from './audio-analysis.ts';
import type { EmulatorContext } from './context.ts';
import {
  type FaultAnswer,
  type FaultPlan,
  failureRejection,
  faultAfterEffect,
  faultAfterValidation,
  faultsBefore,
  OutputMeter,
  type OutputUnit,
} from './faults.ts';
import { toRejection } from './http-operation.ts';
import { limitData, newRequestId, Rejection, reject, tooLarge } from './rejection.ts';
import { checkFastRequest, fastRecords } from './routes/fast.ts';
import {
  type ServerSession,
  type ServerSessions,
  type SessionKind,
  type SessionRecord,
  type SessionScope,
  sessionScope,
} from './sessions.ts';
import { admitTts, beginSpeech, sendSpeech } from './tts-service.ts';
import type { EmulatorKey } from './types.ts';
import { listVoices } from './voices.ts';

type Ack = (response: unknown) => void;

interface SocketState {
  key: EmulatorKey;
  keyHeader: string;
  /** Aborted when the socket disconnects. */
  abort: AbortController;
  /**
   * Live frames of one stream are handled one after another, in arrival order; streams do not
   * wait for each other (a stalled frame holds its own stream only). Keyed by stream id.
   */
  frames: Map<string, Promise<void>>;
  /** Bytes of each stream's frames waiting for their turn (not yet being handled). */
  waiting: Map<string, number>;
}

/** A live stream's events, sent one frame's records after another. */
interface StreamOutput {
  meter: OutputMeter;
  sent: Promise<void>;
}

const FEED_BYTES = 256 * 1024;

/**
 * The Origin header as one value. A client that sets Origin itself on top of one its library
 * adds sends it twice, which Node joins as `"a, a"`: the same origin repeated is that origin;
 * differing ones are refused (an origin never holds a comma).
 */
function singleOrigin(header: string | string[] | undefined): string | undefined {
  if (header === undefined) return undefined;
  const values = (Array.isArray(header) ? header : [header])
    .flatMap((v) => v.split(','))
    .map((v) => v.trim());
  const first = values[0];
  if (first === undefined || values.some((v) => v !== first)) {
    throw reject('AUTH_UNAUTHORIZED', `the Origin header names different origins: ${values.join(', ')}`);
  }
  return first;
}

/** Handshake: a valid key and an `Origin` naming this service (scheme and host). */
export function authenticateHandshake(ctx: EmulatorContext, io: Server): void {
  io.use((socket, next) => {
    const headers = socket.handshake.headers;
    try {
      const key = ctx.keys.authenticate(headers['x-api-key']);
      const origin = singleOrigin(headers.origin);
      if (typeof origin !== 'string' || origin === '') {
        throw reject(
          'AUTH_UNAUTHORIZED',
          'the Socket.IO handshake needs an Origin header (scheme and host of the service)',
        );
      }
      let originHost: string | undefined;
      let host: string | undefined;
      try {
        const url = new URL(origin);
        originHost = url.protocol === 'http:' || url.protocol === 'https:' ? url.host : undefined;
        // The Host header read as the origin's host is (a host is case-insensitive, and the
        // scheme's default port is the same address): `LOCALHOST:8080` was another origin.
        if (originHost !== undefined && headers.host) host = new URL(`${url.protocol}//${headers.host}`).host;
      } catch {
        originHost = undefined;
      }
      if (originHost === undefined || originHost !== host) {
        throw reject(
          'AUTH_UNAUTHORIZED',
          `the Origin header must be the scheme and host of the service, got ${origin}`,
        );
      }
      const header = headers['x-api-key'];
      const state: SocketState = {
        key,
        keyHeader: Array.isArray(header) ? header[0]! : header!,
        abort: new AbortController(),
        frames: new Map(),
        waiting: new Map(),
      };
      socket.data.emulator = state;
      next();
    } catch (err) {
      const rejection = toRejection(err) ?? reject('AUTH_UNAUTHORIZED', 'handshake rejected');
      ctx.stats.rejection(rejection.code);
      ctx.stats.socketConnections.rejected++;
      const error = new Error(rejection.detail) as Error & { data?: unknown };
      error.data = rejection.socketBody(newRequestId());
      next(error);
    }
  });
}

export function handleConnections(ctx: EmulatorContext, io: Server, sessions: ServerSessions): void {
  io.on('connection', (socket) => {
    const state = socket.data.emulator as SocketState;
    const where = sessionScope('socket', socket.id);
    ctx.stats.socketConnections.opened++;
    ctx.stats.socketConnections.active++;
    socket.on('disconnect', () => {
      ctx.stats.socketConnections.active--;
      state.abort.abort(new Error('the socket disconnected'));
      sessions.cancelScope(where);
    });
    const op = new SocketOps(ctx, socket, state, sessions, where);
    const frameHandler =
      (kind: SessionKind) =>
      (...args: unknown[]) => {
        const { payload, ack: reply } = eventArgs(args);
        const stream = streamIdOf(payload) ?? '';
        // Frames waiting behind their stream's turn (a recognizer behind on it, a delay) hold
        // their bytes: past the burst of the byte rate, a frame is refused at once (429, the
        // stream stays live) instead of queued. A client that sent without waiting for its
        // acknowledgements queued its frames without bound (150 MB in two seconds).
        const bytes = binary(payload)?.length ?? 0;
        const ahead = state.frames.get(stream);
        const waiting = (state.waiting.get(stream) ?? 0) + bytes;
        if (ahead && waiting > ctx.limits.sessionAudioRateBurstBytes) {
          void op.refuseFrame(kind, payload, reply, waiting);
          return;
        }
        state.waiting.set(stream, waiting);
        const turn = (ahead ?? Promise.resolve())
          .then(() => {
            const left = (state.waiting.get(stream) ?? bytes) - bytes;
            if (left > 0) state.waiting.set(stream, left);
            else state.waiting.delete(stream);
            return op.frame(kind, payload, reply);
          })
          .catch(() => {}); // op.frame answers its own errors; a later frame must still run
        state.frames.set(stream, turn);
        // The last frame of a stream takes its entry with it: the map holds only streams in flight.
        void turn.finally(() => {
          if (state.frames.get(stream) === turn) state.frames.delete(stream);
        });
      };
    socket.on(SOCKET_EVENTS.audioStream, frameHandler('stt'));
    socket.on(SOCKET_EVENTS.diarizationStream, frameHandler('diarization'));
    socket.on(SOCKET_EVENTS.audioFile, (...args: unknown[]) => {
      const { payload, ack } = eventArgs(args);
      void op.audioFile(payload, ack);
    });
    socket.on(SOCKET_EVENTS.ttsRequest, (...args: unknown[]) => {
      const { payload, ack } = eventArgs(args);
      void op.tts(payload, ack);
    });
    socket.on(SOCKET_EVENTS.listVoices, (...args: unknown[]) => {
      void op.voices(eventArgs(args).ack);
    });
  });
}

/**
 * An event's payload and acknowledgement. Socket.IO passes the acknowledgement last, after
 * whatever arguments the client sent: an event sent with no payload (or two) still gets its
 * answer as an acknowledgement (its payload is then missing, or the first argument), instead of
 * an `error` event while the client waits for an acknowledgement that never comes.
 */
function eventArgs(args: unknown[]): { payload: unknown; ack: Ack | undefined } {
  const last = args.at(-1);
  const ack = typeof last === 'function' ? (last as Ack) : undefined;
  return { payload: ack && args.length === 1 ? undefined : args[0], ack };
}

/** One socket's operations. */
class SocketOps {
  readonly #ctx: EmulatorContext;
  readonly #socket: Socket;
  readonly #state: SocketState;
  readonly #sessions: ServerSessions;
  readonly #where: SessionScope;
  readonly #streams = new WeakMap<ServerSession, StreamOutput>();

  constructor(
    ctx: EmulatorContext,
    socket: Socket,
    state: SocketState,
    sessions: ServerSessions,
    where: SessionScope,
  ) {
    this.#ctx = ctx;
    this.#socket = socket;
    this.#state = state;
    this.#sessions = sessions;
    this.#where = where;
  }

  /** The socket's life: aborted on disconnect (and so when the emulator closes its sockets). */
  get #signal(): AbortSignal {
    return this.#state.abort.signal;
  }

  /**
   * The common course: count, faults before the operation, capability; then `run`, which
   * admits itself after its own validation (`admit`: rate, then concurrency). Errors become a
   * negative acknowledgement, or an `error` event with the id.
   */
  async #run(
    op: OperationName,
    ack: Ack | undefined,
    idOf: () => string | undefined,
    run: (plan: FaultPlan, out: Emitter, admit: Admit) => Promise<void>,
  ): Promise<void> {
    const ctx = this.#ctx;
    ctx.stats.request(op);
    const plan = ctx.faults.plan({ op, key: this.#state.keyHeader });
    const out = new Emitter(ctx, this.#socket, plan, this.#signal);
    let admission: RequestAdmission | undefined;
    try {
      const before = await faultsBefore(plan, ctx.lifecycle, this.#signal);
      // The socket closed while this event waited (a delay, or an earlier frame of its stream
      // that stalled): nobody is left to answer, and it must open nothing (a start frame opened
      // a stream after its socket's streams were cancelled, holding concurrency until expiry).
      if (this.#signal.aborted) return;
      if (before === 'reset') {
        this.#socket.disconnect(true);
        return;
      }
      if (before) throw before;
      ctx.keys.authorize(this.#state.key, op);
      const admitted = ctx.admission(this.#state.key, op);
      admission = admitted;
      await run(plan, out, (acquire) => {
        const fault = faultAfterValidation(plan);
        if (fault) throw fault;
        return admitted.admit(acquire);
      });
    } catch (err) {
      if (!this.#socket.connected) return;
      const rejection =
        toRejection(err) ??
        new Rejection('SERVER_INTERNAL', { detail: `emulator error: ${(err as Error)?.message ?? err}` });
      admission?.answered(rejection.status);
      this.#fail(rejection, idOf(), ack);
    }
  }

  #fail(rejection: Rejection, id: string | undefined, ack: Ack | undefined): void {
    this.#ctx.stats.rejection(rejection.code);
    const error = rejection.socketBody(newRequestId());
    if (id !== undefined) error.id = id;
    if (ack) ack({ ok: false, error } satisfies FrameAck);
    else this.#socket.emit(SOCKET_EVENTS.error, error);
  }

  /** After the effect, a `reset` or `status` fault at stage `afterEffect` answers instead. */
  #afterEffect(answer: FaultAnswer | undefined): void {
    if (answer === 'reset') {
      this.#socket.disconnect(true);
      throw new Error('reset');
    }
    if (answer) throw answer;
  }

  async frame(kind: SessionKind, payload: unknown, ack: Ack | undefined): Promise<void> {
    const op: OperationName = kind === 'stt' ? 'stt.socket' : 'diarization.socket';
    const event = kind === 'stt' ? SOCKET_EVENTS.transcriptionResult : SOCKET_EVENTS.diarizationResult;
    await this.#run(
      op,
      ack,
      () => streamIdOf(payload),
      async (plan, _out, admit) => {
        const ctx = this.#ctx;
        const bytes = binary(payload);
        if (!bytes) throw reject('VALIDATION_INVALID_FORMAT', `${op} carries one binary live input frame`);
        ctx.stats.bytesIn += bytes.length;
        const { limits } = ctx;
        const limit = kind === 'stt' ? limits.realtimeAsrFrameBytes : limits.realtimeDiarizationFrameBytes;
        if (bytes.length > limit) {
          throw tooLarge(
            kind === 'stt' ? 'realtime_asr_frame_bytes' : 'realtime_diarization_frame_bytes',
            limit,
            bytes.length,
            'the frame',
          );
        }
        const frame = decodeFrame(bytes);
        // A stream the recognizer is behind on is answered late: its frame waits to be taken.
        await this.#sessions.find(kind, frame.streamId, this.#where)?.backlogWait();
        const { session, records, after } = this.#sessions.acceptFrame(
          frame,
          kind,
          this.#where,
          this.#state.key,
          admit,
          op,
          plan,
        );
        const output = this.#outputOf(session, plan);
        this.#afterEffect(after);
        ack?.({ ok: true } satisfies FrameAck);
        // This frame's slow body, the stream's byte and record cuts.
        const emitter = new Emitter(ctx, this.#socket, plan, this.#signal, output.meter);
        const emitRecords = async (records: SessionRecord[]) => {
          for (const record of records) {
            if (!session.live && !record.is_final) continue;
            if (record.is_final && ctx.faults.dropFinal({ op, key: this.#state.keyHeader })) {
              this.#sessions.end(session, 'cancelled');
              return;
            }
            if (!(await emitter.record(event, record))) return;
            if (record.is_final) this.#sessions.end(session, 'finished');
          }
        };
        // One chain per stream: a slowed frame's records still go out before the next frame's.
        output.sent = output.sent
          .then(() => records)
          .then(emitRecords)
          .catch(() => {});
      },
    );
  }

  /**
   * A frame refused on arrival: `waiting` bytes of its stream's frames (this one included) would
   * wait for their turn, more than the byte rate's burst. 429 `SESSION_BYTE_RATE_EXCEEDED` with
   * `Retry-After`; the stream is unchanged.
   */
  async refuseFrame(
    kind: SessionKind,
    payload: unknown,
    ack: Ack | undefined,
    waiting: number,
  ): Promise<void> {
    await this.#run(
      kind === 'stt' ? 'stt.socket' : 'diarization.socket',
      ack,
      () => streamIdOf(payload),
      async () => {
        const { limits } = this.#ctx;
        const burst = limits.sessionAudioRateBurstBytes;
        const rate = limits.sessionAudioRateRealtime * LIVE_BYTES_PER_SECOND;
        throw reject(
          'SESSION_BYTE_RATE_EXCEEDED',
          "the stream's frames are arriving faster than it takes them; the stream stays live",
          {
            retryAfterSec: Math.max(1, Math.ceil((waiting - burst) / rate)),
            data: limitData('session_audio_rate_burst', burst, waiting),
          },
        );
      },
    );
  }

  /**
   * The output of a live stream: its records go out in order, and `reset` after N bytes or
   * records counts over the whole stream, with the faults planned for its start frame (over
   * HTTP each POST's answer is counted on its own; here the stream's events are one answer).
   */
  #outputOf(session: ServerSession, plan: FaultPlan): StreamOutput {
    let output = this.#streams.get(session);
    if (!output) {
      output = { meter: new OutputMeter(plan), sent: Promise.resolve() };
      this.#streams.set(session, output);
    }
    return output;
  }

  async audioFile(payload: unknown, ack: Ack | undefined): Promise<void> {
    const p = isObject(payload)
      ? (payload as Partial<AudioFilePayload> & Record<string, unknown>)
      : undefined;
    const rawId = typeof p?.id === 'string' ? p.id : undefined;
    await this.#run(
      'fast.socket',
      ack,
      () => rawId,
      async (plan, out, admit) => {
        const ctx = this.#ctx;
        if (!p) throw reject('VALIDATION_INVALID_FORMAT', 'audio_file carries {id, language, model?, audio}');
        const { id, language } = checkFastRequest(p.id, p.language);
        ctx.asrModel(language, typeof p.model === 'string' && p.model !== '' ? p.model : undefined);
        const audio = binary(p.audio);
        if (!audio) throw reject('VALIDATION_INVALID_FORMAT', '`audio` must be binary');
        ctx.stats.bytesIn += audio.length;
        if (audio.length > ctx.limits.fastAudioBytes)
          throw tooLarge('fast_audio_bytes', ctx.limits.fastAudioBytes, audio.length, 'the audio');
        const release = admit(() => ctx.concurrency.acquire(this.#state.key.account, 'fast'));
        let analyzed: Awaited<ReturnType<UploadAnalyzer['finish']>> | undefined;
        try {
          const analyzer = new UploadAnalyzer({
            lifecycle: ctx.lifecycle,
            maxDurationSec: ctx.limits.fastAudioDurationSec,
            durationBound: 'fast_audio_duration',
            signal: this.#signal,
            hash: ctx.hashUploads,
            keepAudio: ctx.recognizes(language),
          });
          try {
            for (let at = 0; at < audio.length; at += FEED_BYTES)
              await analyzer.write(audio.subarray(at, at + FEED_BYTES));
            analyzed = await analyzer.finish();
          } finally {
            analyzer.dispose();
          }
          if (plan.fail) throw failureRejection('fast.socket');
          this.#afterEffect(faultAfterEffect(plan));
          ack?.({ ok: true } satisfies FrameAck);
          await ctx.lifecycle.sleep(ctx.perRequestMs + ctx.audioDelayMs(analyzed.durationSec), this.#signal);
          for (const record of await fastRecords(ctx, id, language, analyzed, this.#signal)) {
            if (record.is_final && ctx.faults.dropFinal({ op: 'fast.socket', key: this.#state.keyHeader }))
              return;
            if (!(await out.record(SOCKET_EVENTS.transcriptionResult, record))) return;
          }
        } finally {
          analyzed?.recording?.release();
          release();
        }
      },
    );
  }

  async tts(payload: unknown, ack: Ack | undefined): Promise<void> {
    const rawId = isObject(payload) && typeof payload.id === 'string' ? payload.id : undefined;
    await this.#run(
      'tts.socket',
      ack,
      () => rawId,
      async (plan, out, admit) => {
        const ctx = this.#ctx;
        const bodyBytes = jsonBytes(payload);
        ctx.stats.bytesIn += bodyBytes;
        const check = checkTtsRequest(payload, { tier: this.#state.key.tier, limits: ctx.limits, bodyBytes });
        const admitted = admitTts(ctx, check, this.#state.key, admit);
        try {
          const chunks = await beginSpeech(ctx, admitted, {
            op: 'tts.socket',
            plan,
            sampleRate: SOCKET_TTS_SAMPLE_RATE,
            signal: this.#signal,
            gone: () => !this.#socket.connected,
          });
          try {
            this.#afterEffect(faultAfterEffect(plan));
          } catch (err) {
            await chunks.return(undefined);
            throw err;
          }
          ack?.({ ok: true } satisfies FrameAck);
          const { id, text } = admitted.body;
          await sendSpeech(chunks, text, SOCKET_TTS_SAMPLE_RATE, plan.truncateTts, (audio, final) =>
            out.emit(SOCKET_EVENTS.ttsAudio, { id, audio, is_final: final }, audio.length, 'audio'),
          );
        } finally {
          admitted.release();
        }
      },
    );
  }

  async voices(ack: Ack | undefined): Promise<void> {
    await this.#run(
      'voices.socket',
      ack,
      () => undefined,
      async (plan, _out, admit) => {
        admit();
        if (plan.fail) throw failureRejection('voices.socket');
        this.#afterEffect(faultAfterEffect(plan));
        ack?.({ voices: listVoices() });
      },
    );
  }
}

/**
 * Emits one answer's events with the plan's slow body and byte or record cuts (counted as
 * `OutputMeter` says: a record is its NDJSON line, audio its PCM); false once the socket is gone
 * or a cut ended the answer.
 */
class Emitter {
  readonly #ctx: EmulatorContext;
  readonly #socket: Socket;
  readonly #plan: FaultPlan;
  readonly #signal: AbortSignal;
  readonly #meter: OutputMeter;
  #ended = false;

  constructor(
    ctx: EmulatorContext,
    socket: Socket,
    plan: FaultPlan,
    signal: AbortSignal,
    meter = new OutputMeter(plan),
  ) {
    this.#ctx = ctx;
    this.#socket = socket;
    this.#plan = plan;
    this.#signal = signal;
    this.#meter = meter;
  }

  /** A result record, counted as its NDJSON line (the bytes it is over HTTP). */
  record(event: string, record: unknown): Promise<boolean> {
    return this.emit(event, record, Buffer.byteLength(JSON.stringify(record)) + 1, 'record');
  }

  async emit(
    event: string,
    payload: unknown,
    bytes: number,
    unit: Exclude<OutputUnit, 'bytes'>,
  ): Promise<boolean> {
    if (!this.#socket.connected || this.#ended) return false;
    const { send, cut } = this.#meter.event(bytes, unit);
    if (send) {
      const bps = this.#plan.slowBytesPerSecond();
      if (bps !== undefined) {
        try {
          await this.#ctx.lifecycle.sleep((bytes / bps) * 1000, this.#signal);
        } catch {
          return false;
        }
        if (!this.#socket.connected) return false;
      }
      // Backpressure, as an HTTP answer has it: a client that does not read its events holds
      // this answer (and what it holds: a TTS slot) until it reads or the send timeout cuts it.
      if (outputBacklog(this.#socket.conn as unknown as EngineConnection) > SOCKET_OUTPUT_HIGH_WATER_BYTES) {
        await outputRoom(this.#socket, this.#signal);
        if (!this.#socket.connected) return false;
      }
      this.#socket.emit(event, payload);
      this.#ctx.stats.bytesOut += bytes;
    }
    if (cut === 'reset') this.#socket.disconnect(true);
    if (cut !== undefined) this.#ended = true;
    return cut === undefined;
  }
}

/**
 * Output a Socket.IO connection may hold unsent (not yet taken by the kernel) before an answer's
 * next event waits for it to go. Without a bound, TTS (a few bytes in, megabytes out) to a
 * client that stopped reading filled engine.io's buffer with every answer it asked for: 75 MB a
 * second, for the two minutes until the send timeout.
 */
export const SOCKET_OUTPUT_HIGH_WATER_BYTES = 1024 * 1024;

interface EngineConnection {
  writeBuffer?: { data?: unknown }[];
  transport?: {
    socket?: { bufferedAmount?: number };
    on(event: 'drain', listener: () => void): unknown;
    off(event: 'drain', listener: () => void): unknown;
  };
}

/** Bytes of a connection's output not yet taken by the kernel: what ws holds, and engine.io's packets waiting for it. */
function outputBacklog(conn: EngineConnection): number {
  let bytes = conn.transport?.socket?.bufferedAmount ?? 0;
  for (const packet of conn.writeBuffer ?? []) {
    const data = packet.data;
    if (typeof data === 'string') bytes += data.length;
    else if (data instanceof Uint8Array || data instanceof ArrayBuffer) bytes += data.byteLength;
  }
  return bytes;
}

/**
 * Resolves once the connection's unsent output is under the high-water mark (each write the
 * kernel takes is a `drain` of the transport), or the socket is gone (`signal`: it disconnected,
 * also when the send timeout cut it).
 */
async function outputRoom(socket: Socket, signal: AbortSignal): Promise<void> {
  const conn = socket.conn as unknown as EngineConnection;
  while (socket.connected && !signal.aborted && outputBacklog(conn) > SOCKET_OUTPUT_HIGH_WATER_BYTES) {
    const transport = conn.transport;
    if (!transport) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        transport.off('drain', done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      transport.on('drain', done);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}

/** The stream id at the head of a frame payload, when it has one (for error events). */
function streamIdOf(payload: unknown): string | undefined {
  const bytes = binary(payload);
  return bytes && bytes.length >= 16 && !isZeroUuid(bytes) ? bytesToUuid(bytes) : undefined;
}

/**
 * The bytes of a payload as the JSON body it stands for (a TTS request's size limit). Binary
 * values, which a JSON body cannot hold, count as their length plus the `null` standing for
 * them, and are not serialized: `JSON.stringify` makes a Buffer an array of numbers about four
 * times its size, and one event carrying 60 MB of it held the emulator's event loop for 9 s.
 * Walked with a stack of its own, not by recursion: a payload nested 100,000 arrays deep (a
 * body that parses) overflowed the call stack and was answered 500 `SERVER_INTERNAL`.
 */
function jsonBytes(payload: unknown): number {
  let bytes = 0;
  const pending: unknown[] = [payload ?? null];
  while (pending.length > 0) {
    const value = pending.pop();
    const bytesOf = binary(value);
    if (bytesOf) {
      bytes += NULL_BYTES + bytesOf.length;
    } else if (Array.isArray(value)) {
      // `[`, `]` and the commas; an element JSON cannot hold is written `null`.
      bytes += 2 + Math.max(0, value.length - 1);
      for (const item of value) pending.push(item === undefined || typeof item === 'function' ? null : item);
    } else if (isObject(value) && typeof value.toJSON !== 'function') {
      // `{`, `}`, the commas, and each `"key":`; a member JSON cannot hold is left out.
      let members = 0;
      for (const [key, item] of Object.entries(value)) {
        if (item === undefined || typeof item === 'function' || typeof item === 'symbol') continue;
        members++;
        bytes += Buffer.byteLength(JSON.stringify(key)) + 1;
        pending.push(item);
      }
      bytes += 2 + Math.max(0, members - 1);
    } else {
      bytes += Buffer.byteLength(JSON.stringify(value) ?? 'null');
    }
  }
  return bytes;
}
const NULL_BYTES = 4;

/** A binary Socket.IO payload as a Buffer, or undefined. */
function binary(value: unknown): Buffer | undefined {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return undefined;
}
