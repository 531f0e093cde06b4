// sttStream() and diarizationStream(): Duplex streams, live input frames in, records out.
// A frame's write completes only when the service accepted it, so a slow service slows the
// source. A session that expires, is retired or breaks is replaced by a fresh one (new UUID)
// without replaying accepted audio; record times keep increasing from the pipeline's start;
// a stalled source gets keepalive audio; a long session rotates at a speech boundary. Only the
// last session's final record is final downstream: the records read as one stream.

import { Duplex } from 'node:stream';
import { MediaError } from '../audio/media-error.ts';
import { closingSignalOf, type SpeechClient } from '../client/client.ts';
import type { LiveKind, LiveSession, LiveSessionOptions, LiveTransport } from '../client/live.ts';
import { anySignal, type BackoffOptions, backoffDelay, sleep } from '../client/retry.ts';
import {
  IncompleteStreamError,
  InvalidArgumentError,
  SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import { decodeFrame } from '../protocol/frame.ts';
import type { Language } from '../protocol/languages.ts';
import { DEFAULT_LIMITS } from '../protocol/limits.ts';
import type { AsrRecord, DiarizationRecord, LiveDiarizationSegment } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import type { TypedStream } from '../protocol/typed-stream.ts';
import { destroyOnAbort } from './abort.ts';
import {
  DEFAULT_REPLAY_LIMITS,
  type Replay,
  ReplayBuffer,
  type ReplayChunk,
  type ReplayLimits,
} from './replay-buffer.ts';

/** Options of {@link sttStream} and {@link diarizationStream}. */
export interface LiveStreamOptions {
  /** The client that opens the sessions. */
  client: SpeechClient;
  /** Default `http`. */
  transport?: LiveTransport;
  /** Language of the sessions (default: each frame's language byte). */
  language?: Language;
  /** Start a fresh session after 408, 409, a broken response or a lost connection. Default true. */
  restart?: boolean;
  /**
   * Restarts allowed with no progress in between (no record finalising audio, no new frame
   * accepted; audio heard again after a failure is not new), before the stream fails. Default
   * unbounded: `restartWithinMs` decides.
   */
  maxRestarts?: number;
  /**
   * The stream fails when sessions keep failing, with no progress (as for `maxRestarts`), for
   * longer than this since the first of those failures. Default 60 s (a relay meant to
   * ride out longer outages raises it).
   */
  restartWithinMs?: number;
  /**
   * Pause before each restart: exponential with full jitter from the first failure without a
   * record, or the service's `Retry-After`. Default 250 ms doubling to 10 s.
   */
  restartBackoff?: BackoffOptions;
  /**
   * Send keepalive audio (silence) when no frame arrived for this long, before the service's
   * 60 s expiry. Default 45 s; 0 disables.
   */
  keepaliveMs?: number;
  /**
   * Rotate to a new session at the first speech boundary heard after this much audio (ASR: an
   * `is_speech_final` record; diarization: a record with no active segment). Default 14,100 s.
   */
  rotateAfterSec?: number;
  /** Rotate regardless of speech after this much audio. Default 14,370 s (limit 14,400). */
  forceRotateAfterSec?: number;
  /**
   * Over HTTP every frame is a POST: frames shorter than this are joined (up to this much
   * audio, held no longer than this) before they are sent, whatever size `toFrames` made them,
   * so 100 ms frames meant for Socket.IO do not become ten POSTs a second. A frame with
   * is_final is never held. Default 1000 over HTTP, 0 (every frame as it comes) over Socket.IO.
   */
  coalesceMs?: number;
  /** Told to slow down when the service answers 429 SESSION_BYTE_RATE_EXCEEDED (see `pace`). */
  pacer?: {
    /** Send nothing for `retryAfterMs` milliseconds, then go on at the sustained rate. */
    penalize(retryAfterMs: number): void;
  };
  /** Passed to each session (acks, timeouts, validation). */
  session?: Omit<LiveSessionOptions, 'transport' | 'language' | 'streamId' | 'signal'>;
  /** Destroys the stream with the signal's reason. */
  signal?: AbortSignal;
  /** Records buffered on the readable side before writes wait. Default 64. */
  highWaterMark?: number;
  /**
   * Audio a session accepted and the service has not finalised (no speech-final words or
   * closed segments cover it yet) is kept, and sent again on the session that replaces a
   * failed one, so nothing the source said is lost at a failure; words already emitted are not
   * emitted again. Bounded: when the service stays down longer than it holds, the audio it
   * dropped is reported (`audio-lost` event, `lost_audio` on the final record). Default 120 s
   * and 3.75 MiB; `false` sends nothing again.
   */
  replayBuffer?: Partial<ReplayLimits> | false;
}

/** A stretch of the pipeline's audio that was accepted by a failed session and could not be heard again. */
export interface LostAudio {
  /** Seconds from the start of the pipeline. */
  start_time: number;
  end_time: number;
}

/** Why a session ended early and a new one started. */
export interface SessionChange {
  reason: 'restart' | 'rotate';
  previousId: string;
  id: string;
  /** Seconds of pipeline audio before the new session's first frame. */
  offsetSec: number;
  /** Seconds of audio the new session hears again (accepted by the failed one, not finalised). */
  replaySec?: number;
  error?: unknown;
}

/** The events of `sttStream()` and `diarizationStream()` besides Node's, with their arguments. */
export interface LiveStreamEvents {
  /** A new session replaced one (after a failure: `reason: 'restart'`; at the session limit: `'rotate'`). */
  session: [change: SessionChange];
  /** A session failed and a new one will start (after a backoff); the error is the failure. */
  'session-error': [err: unknown];
  /** Audio accepted by a failed session that could not be sent again (the replay buffer's bound). */
  'audio-lost': [lost: LostAudio & { error?: unknown }];
  /** The source stalled: 100 ms of silence were sent to keep the session open. */
  keepalive: [];
}

/**
 * What `sttStream()` and `diarizationStream()` return: a Duplex (frames in, records out) typed by
 * `LiveStreamEvents`, with the current session's id.
 */
export interface LiveTranscriptionStream extends TypedStream<Duplex, LiveStreamEvents> {
  /** The current service session's UUID (undefined before the first frame is sent). */
  readonly sessionId: string | undefined;
}

/** Session failures that a fresh session with a new UUID recovers from. */
function restartable(err: unknown): boolean {
  if (err instanceof IncompleteStreamError) return true;
  if (err instanceof TransportError) return err.code !== 'ERR_CLIENT_CLOSED';
  if (err instanceof SpeechServiceError) {
    return err.status === 408 || err.status === 409 || (err.status >= 500 && err.retryable);
  }
  return false;
}

function maxOf<T>(items: readonly T[], value: (item: T) => number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (const item of items) max = Math.max(max, value(item));
  return max;
}

const segmentEnd = (s: LiveDiarizationSegment): number =>
  typeof s.end_time === 'number' ? s.end_time : s.start_time;

/** Keepalive silence a session heard: `sec` seconds inserted at session time `at`. */
interface Filler {
  at: number;
  sec: number;
}

/**
 * Session time to pipeline time: `offset` plus the session time without the keepalive silence
 * inserted before it (a time inside a filler maps to where the filler began). Keepalive audio
 * is not the source's, so it must not delay the times of what the source said after a stall.
 */
function toPipelineTime(t: number, offset: number, fillers: readonly Filler[]): number {
  let inserted = 0;
  for (const f of fillers) {
    if (t >= f.at + f.sec) inserted += f.sec;
    else if (t > f.at) inserted += t - f.at;
    else break;
  }
  return offset + t - inserted;
}

function shiftAsr(record: AsrRecord, offset: number, fillers: readonly Filler[]): AsrRecord {
  if (offset === 0 && fillers.length === 0) return record;
  return {
    ...record,
    words: record.words.map((w) => ({
      ...w,
      start_time: toPipelineTime(w.start_time, offset, fillers),
      end_time: toPipelineTime(w.end_time, offset, fillers),
    })),
  };
}

/**
 * The final record of a session that ended before the stream did (rotation): not the stream's
 * end, but its words are committed. Diarization: the session can no longer change its active
 * segments, so they are closed, ending where the next one starts or with the session's audio.
 */
function continuedAsr(record: AsrRecord): AsrRecord {
  return { ...record, is_speech_final: true, is_final: false };
}

function continuedDiarization(record: DiarizationRecord, sessionEndSec: number): DiarizationRecord {
  const active = [...record.active_segments].sort((a, b) => a.start_time - b.start_time);
  const closed = active.map((s, i) => ({
    ...s,
    end_time: s.end_time ?? Math.max(s.start_time, active[i + 1]?.start_time ?? sessionEndSec),
  }));
  return {
    ...record,
    final_segments: [...record.final_segments, ...closed],
    active_segments: [],
    is_final: false,
  };
}

function shiftDiarization(
  record: DiarizationRecord,
  offset: number,
  fillers: readonly Filler[],
  session: number,
): DiarizationRecord {
  if (offset === 0 && fillers.length === 0 && session === 0) return record;
  // Speaker labels are relative to one stream; a later session's labels are other people.
  const shift = (s: LiveDiarizationSegment): LiveDiarizationSegment => ({
    ...s,
    start_time: toPipelineTime(s.start_time, offset, fillers),
    ...(typeof s.end_time === 'number' ? { end_time: toPipelineTime(s.end_time, offset, fillers) } : {}),
    speaker: session === 0 ? s.speaker : `${s.speaker}#${session}`,
  });
  return {
    ...record,
    final_segments: record.final_segments.map(shift),
    active_segments: record.active_segments.map(shift),
  };
}

class LiveStream<K extends LiveKind> extends Duplex {
  readonly kind: K;
  readonly #options: LiveStreamOptions;
  #session: LiveSession<K> | undefined;
  #sessionIndex = -1;
  /** Seconds of source audio accepted by earlier sessions (the current session's time origin). */
  #offsetSec = 0;
  /** Seconds of audio accepted by the current session, keepalive silence included (its limits count it). */
  #sessionSec = 0;
  /** Silence of our own the current session accepted, in session time order. */
  #fillers: Filler[] = [];
  /** What the current session accepted and the service has not finalised. */
  #replay: ReplayBuffer | undefined;
  /** Audio of a failed session to send on the next one before anything else. */
  #pendingReplay: ReplayChunk[] = [];
  /** Audio lost for good (the replay bound was exceeded), in pipeline time. */
  readonly #lost: LostAudio[] = [];
  /** Pipeline time up to which words (segments) were committed downstream: none is emitted twice. */
  #emittedUntil = Number.NEGATIVE_INFINITY;
  #restartsWithoutRecord = 0;
  /** When the first of the restarts without a record in between happened (performance.now()). */
  #failingSince = 0;
  /** Pause before the next session starts (set by a restart). */
  #restartDelayMs = 0;
  /** Aborted on destroy: ends a restart pause. */
  readonly #destroyed = new AbortController();
  #rotatePending = false;
  /** The latest record since rotation became due was a speech boundary. */
  #atBoundary = false;
  /** The session the pipeline's final frame went to: only its final record ends the stream. */
  #lastSession: LiveSession<K> | undefined;
  /** Seconds of audio of the session being closed for rotation, with its closing frame. */
  #closingSec = 0;
  #lastFinalSent = false;
  #keepalive: NodeJS.Timeout | undefined;
  #writing: Promise<void> = Promise.resolve();
  /** Frames written and not yet sent: a keepalive neither starts nor re-arms meanwhile. */
  #pendingWrites = 0;
  /** The writable side ended (`_final`): no keepalive from now on. */
  #finishing = false;
  #readWaiter: (() => void) | undefined;
  /**
   * Sessions this stream started that are not over at the service yet (a failed or aborted one
   * is ended there in the background): destroy waits for them, so that once the stream has
   * closed (and a pipeline settled) no slot is held and nothing is live at the service.
   */
  readonly #notEnded = new Set<LiveSession<K>>();
  /** Sessions told to stop reading records while the readable side is full (see _read). */
  readonly #pausedSessions = new Set<LiveSession<K>>();
  #ended = false;
  /** The language byte of the latest frame (a terminator after a rotation needs one). */
  #language: Language | undefined;
  /** Audio of short frames held to be sent as one (HTTP), and their language. */
  #held: Buffer[] = [];
  #heldBytes = 0;
  #heldLanguage: Language | undefined;
  #holdTimer: NodeJS.Timeout | undefined;
  readonly #coalesceBytes: number;

  constructor(kind: K, options: LiveStreamOptions) {
    super({ objectMode: true, readableHighWaterMark: options.highWaterMark ?? 64, writableHighWaterMark: 4 });
    if (!options?.client) throw new InvalidArgumentError(`${kind}Stream needs { client }`);
    this.kind = kind;
    this.#options = options;
    const coalesceMs = options.coalesceMs ?? ((options.transport ?? 'http') === 'http' ? 1000 : 0);
    if (!(coalesceMs >= 0) || !Number.isFinite(coalesceMs))
      throw new InvalidArgumentError(`${kind}Stream: coalesceMs must be a number >= 0, got ${coalesceMs}`);
    this.#coalesceBytes = Math.round((coalesceMs * 16_000) / 1000) * 2;
    // Its listener leaves the signal when the stream closes: a long-lived signal given to
    // stream after stream must not hold every one of them.
    destroyOnAbort(this, options.signal);
  }

  /** The current session's UUID. */
  get sessionId(): string | undefined {
    return this.#session?.id;
  }

  override _write(
    frame: Uint8Array,
    _encoding: BufferEncoding,
    callback: (error?: Error | null) => void,
  ): void {
    let decoded: ReturnType<typeof decodeFrame>;
    try {
      decoded = decodeFrame(frame);
    } catch (err) {
      callback(err as Error);
      return;
    }
    this.#clearKeepalive();
    this.#language = decoded.language;
    const sameLanguage = this.#heldBytes === 0 || this.#heldLanguage === decoded.language;
    if (!sameLanguage) this.#flushHeld();
    if (!decoded.isFinal && this.#heldBytes + decoded.pcm.length < this.#coalesceBytes) {
      // Short, and more may come: held (bounded by coalesceMs of audio and of time).
      this.#held.push(decoded.pcm);
      this.#heldBytes += decoded.pcm.length;
      this.#heldLanguage = decoded.language;
      this.#holdTimer ??= setTimeout(() => {
        this.#holdTimer = undefined;
        this.#flushHeld();
      }, this.#options.coalesceMs ?? 1000);
      callback();
      return;
    }
    const pcm = this.#takeHeld(decoded.pcm);
    this.#pendingWrites++;
    // Chained: a keepalive send may still be in flight.
    this.#writing = this.#writing
      .then(() => this.#waitForReader())
      .then(() => this.#send(pcm, decoded.isFinal, decoded.language, false));
    this.#writing.then(
      () => {
        this.#pendingWrites--;
        this.#armKeepalive(decoded.language);
        callback();
      },
      (err: Error) => {
        this.#pendingWrites--;
        callback(err);
      },
    );
  }

  /** The held audio and then `pcm`, as one buffer; nothing is held after. */
  #takeHeld(pcm: Buffer): Buffer {
    if (this.#holdTimer) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
    if (this.#heldBytes === 0) return pcm;
    const joined = Buffer.concat([...this.#held, pcm]);
    this.#held = [];
    this.#heldBytes = 0;
    return joined;
  }

  /** Send the held audio now (its time is up, the language changed, or the input ended). */
  #flushHeld(): void {
    if (this.#heldBytes === 0 || this.destroyed) return;
    const language = this.#heldLanguage!;
    const pcm = this.#takeHeld(Buffer.alloc(0));
    this.#clearKeepalive();
    this.#pendingWrites++;
    this.#writing = this.#writing
      .then(() => this.#waitForReader())
      .then(() => this.#send(pcm, false, language, false));
    this.#writing.then(
      () => {
        this.#pendingWrites--;
        if (!this.#finishing) this.#armKeepalive(language);
      },
      (err: Error) => {
        this.#pendingWrites--;
        this.destroy(err);
      },
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#finishing = true;
    this.#clearKeepalive();
    this.#flushHeld();
    if (this.#language === undefined) {
      // No frame at all: say so, rather than let downstream report a missing final record.
      callback(
        new MediaError(
          'ERR_MEDIA_FORMAT',
          `${this.kind}Stream: no audio, the input ended before its first frame`,
        ),
      );
      return;
    }
    this.#writing
      .then(async () => {
        // The last real frame must carry is_final; if the source ended without marking one,
        // close with 20 ms of silence (an empty terminator is invalid), on a fresh session if a
        // rotation just closed the last one: only a final record ends the stream downstream.
        if (this.#language !== undefined && !this.#lastFinalSent)
          await this.#send(Buffer.alloc(640), true, this.#language, true);
        this.#ended = true;
        this.push(null);
      })
      .then(
        () => callback(),
        (err: Error) => callback(err),
      );
  }

  override _read(): void {
    for (const session of this.#pausedSessions) session.resume();
    this.#pausedSessions.clear();
    const wake = this.#readWaiter;
    this.#readWaiter = undefined;
    wake?.();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.#clearKeepalive();
    if (this.#holdTimer) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
    this.#readWaiter?.();
    this.#destroyed.abort(err ?? new DOMException('stream destroyed', 'AbortError'));
    this.#session?.abort(err ?? new DOMException('stream destroyed', 'AbortError'));
    // Each ends within its endTimeoutMs (`ended` never rejects).
    if (this.#notEnded.size === 0) callback(err);
    else void Promise.all([...this.#notEnded].map((s) => s.ended)).then(() => callback(err));
  }

  /** Backpressure from the reader: do not send while unread records pile up. */
  async #waitForReader(): Promise<void> {
    while (this.readableLength >= this.readableHighWaterMark && !this.destroyed) {
      await new Promise<void>((resolve) => (this.#readWaiter = resolve));
    }
  }

  /** `filler`: silence of our own (keepalive, terminator), not the source's audio. */
  async #send(pcm: Buffer, final: boolean, language: Language, filler: boolean): Promise<void> {
    const rotating = this.#session;
    if (
      !final &&
      rotating &&
      this.#rotatePending &&
      (this.#atBoundary || this.#sessionSec >= this.#forceRotateSec) &&
      (await this.#closeForRotation(rotating, pcm, filler))
    ) {
      return;
    }
    // `accepted`: a session took this frame (it is then in that session's replay buffer).
    let accepted = false;
    for (;;) {
      // A frame that waited (for the reader, a restart) while the stream was destroyed opens
      // no session: nothing would end it, and it would hold its slot.
      if (this.destroyed) throw this.#destroyed.signal.reason;
      if (this.#session === undefined && this.#restartDelayMs > 0) {
        const pause = this.#restartDelayMs;
        this.#restartDelayMs = 0;
        // A pause that may be a long Retry-After ends when the stream is destroyed, and when
        // the client closes (the next session would fail with ERR_CLIENT_CLOSED anyway).
        await sleep(pause, anySignal(this.#destroyed.signal, closingSignalOf(this.#options.client)));
      }
      const session = this.#session ?? this.#startSession(language);
      try {
        // A failed session's unfinalised audio first; the last of it closes the stream when
        // the final frame was already accepted by the failed session.
        while (this.#pendingReplay.length > 0) {
          const chunk = this.#pendingReplay[0]!;
          const closing = final && accepted && this.#pendingReplay.length === 1;
          if (closing) this.#lastSession = session;
          await this.#sendOn(session, chunk.pcm, closing, false, true);
          this.#pendingReplay.shift();
        }
        if (!accepted) {
          if (final) this.#lastSession = session;
          await this.#sendOn(session, pcm, final, filler);
          accepted = true;
        } else if (final && this.#lastSession !== session) {
          // All the failed session heard was finalised: close this one with a short silence.
          this.#lastSession = session;
          await this.#sendOn(session, Buffer.alloc(640), true, true, true);
        }
      } catch (err) {
        // Not accepted by this session: send it on a fresh one, after what this one did not finalise.
        this.#recover(err);
        continue;
      }
      this.#lastFinalSent = final;
      if (final) {
        // Completion only on is_final. A session that fails before it is restarted like any
        // other: what it did not finalise, the final audio included, is heard again.
        try {
          await session.done;
        } catch (err) {
          this.#recover(err);
          continue;
        }
      }
      return;
    }
  }

  /**
   * This frame closes the session; the next one opens a new session. False when the frame was
   * not accepted: the session is gone and the frame goes to a fresh one. When it was accepted
   * but the session's last response broke, its audio is not sent again: only its last records
   * are lost (`session-error`), and the stream goes on.
   */
  async #closeForRotation(session: LiveSession<K>, pcm: Buffer, filler: boolean): Promise<boolean> {
    this.#closingSec = this.#sessionSec + pcm.length / LIVE_BYTES_PER_SECOND;
    try {
      await this.#sendOn(session, pcm, true, filler);
    } catch (err) {
      this.#recover(err);
      return false;
    }
    try {
      await session.done;
    } catch (err) {
      this.#recover(err, 'rotate');
      return true;
    }
    this.#endSession({ reason: 'rotate', previousId: session.id });
    return true;
  }

  /**
   * `again`: audio a failed session accepted (or the terminator standing for its final frame),
   * sent on its replacement.
   */
  async #sendOn(
    session: LiveSession<K>,
    pcm: Buffer,
    final: boolean,
    filler: boolean,
    again = false,
  ): Promise<void> {
    await session.send(pcm, { final });
    // Accepted: the service works again (silence yields no records, so those alone cannot say).
    // Not audio heard again: sessions that each accept the replay and fail before finalising
    // any of it (every answer cut, a final record never sent) make no progress, and restarting
    // them for ever would hang the stream.
    if (!again) this.#restartsWithoutRecord = 0;
    const sec = pcm.length / LIVE_BYTES_PER_SECOND;
    if (filler) this.#fillers.push({ at: this.#sessionSec, sec });
    this.#replay?.push(this.#sessionSec, pcm, filler);
    this.#sessionSec += sec;
    const rotateAfter = this.#options.rotateAfterSec ?? DEFAULT_LIMITS.sessionAudioDurationSec - 300;
    if (!final && !this.#rotatePending && this.#sessionSec >= rotateAfter) {
      // Only a boundary heard from now on counts: an earlier pause is no place to cut now.
      this.#rotatePending = true;
      this.#atBoundary = false;
    }
  }

  get #forceRotateSec(): number {
    return this.#options.forceRotateAfterSec ?? DEFAULT_LIMITS.sessionAudioDurationSec - 30;
  }

  /** A failed session: forget it (the next frame starts a new UUID), or fail the stream. */
  #recover(err: unknown, reason: SessionChange['reason'] = 'restart'): void {
    const failed = this.#session;
    if (this.destroyed || this.#options.restart === false || !restartable(err)) throw err;
    const now = performance.now();
    if (this.#restartsWithoutRecord === 0) this.#failingSince = now;
    if (++this.#restartsWithoutRecord > (this.#options.maxRestarts ?? Number.POSITIVE_INFINITY)) throw err;
    if (now - this.#failingSince > (this.#options.restartWithinMs ?? 60_000)) throw err;
    const retryAfterMs = err instanceof SpeechServiceError ? err.retryAfterMs : undefined;
    this.#restartDelayMs = backoffDelay(
      this.#restartsWithoutRecord - 1,
      { baseMs: 250, maxMs: 10_000, ...this.#options.restartBackoff },
      retryAfterMs,
    );
    this.emit('session-error', err);
    this.#endSession({ reason, previousId: failed?.id ?? '', error: err }, true);
  }

  /**
   * The current session is over. After a failure (`replay`), what it accepted and the service
   * did not finalise is sent again on the next session, whose time origin is where that starts;
   * otherwise all its audio moves into the time offset.
   */
  #endSession(change: Omit<SessionChange, 'id' | 'offsetSec'>, replay = false): void {
    this.#session = undefined;
    const r: Replay = replay && this.#replay ? this.#replay.replay() : { chunks: [], from: this.#sessionSec };
    const toPipeline = (t: number) => toPipelineTime(t, this.#offsetSec, this.#fillers);
    if (r.lost) {
      const lost: LostAudio = { start_time: toPipeline(r.lost.start), end_time: toPipeline(r.lost.end) };
      this.#lost.push(lost);
      this.emit('audio-lost', { ...lost, error: change.error });
    }
    // Audio of an earlier failure not yet heard again goes after what this session accepted.
    this.#pendingReplay = [...r.chunks, ...this.#pendingReplay];
    const replaySec = r.chunks.reduce((sum, c) => sum + c.pcm.length, 0) / LIVE_BYTES_PER_SECOND;
    this.#offsetSec = toPipeline(r.from);
    this.#sessionSec = 0;
    this.#fillers = [];
    this.#rotatePending = false;
    this.#atBoundary = false;
    this.#pendingChange = replaySec > 0 ? { ...change, replaySec } : change;
  }

  #pendingChange: Omit<SessionChange, 'id' | 'offsetSec'> | undefined;

  #startSession(language: Language): LiveSession<K> {
    this.#sessionIndex++;
    const session = this.#options.client.live.open(this.kind, {
      ...this.#options.session,
      transport: this.#options.transport ?? 'http',
      language: this.#options.language ?? language,
    }) as LiveSession<K>;
    const offset = this.#offsetSec;
    const index = this.#sessionIndex;
    // This session's own list: #endSession replaces the field, records may still arrive.
    const fillers: Filler[] = [];
    this.#fillers = fillers;
    const replay = this.#replayLimits ? new ReplayBuffer(this.#replayLimits) : undefined;
    this.#replay = replay;
    session.on('record', (record: AsrRecord | DiarizationRecord) => {
      // Progress: a record that finalises audio (with a replay buffer, audio it did not
      // finalise before). Provisional records of the replayed audio, heard by session after
      // session that fails before finalising it, are not.
      const committedBefore = replay?.committed;
      const continued = record.is_final && this.#lastSession !== session;
      const last = record.is_final && !continued;
      if (this.kind === 'stt') {
        let asr = record as AsrRecord;
        if (record.is_final) replay?.commitAll();
        else if (asr.is_speech_final && asr.words.length > 0)
          replay?.commit(maxOf(asr.words, (w) => w.end_time));
        if (continued) asr = continuedAsr(asr);
        this.#progressed(record, replay, committedBefore);
        this.#heard(session, asr.is_speech_final);
        this.#pushFrom(session, this.#withLost(this.#newWords(shiftAsr(asr, offset, fillers)), last));
      } else {
        let diarization = record as DiarizationRecord;
        if (record.is_final) replay?.commitAll();
        else {
          if (diarization.final_segments.length > 0)
            replay?.commit(maxOf(diarization.final_segments, segmentEnd));
        }
        if (continued) diarization = continuedDiarization(diarization, this.#closingSec);
        this.#progressed(record, replay, committedBefore);
        // Nobody speaking: a place to cut.
        this.#heard(session, diarization.active_segments.length === 0);
        this.#pushFrom(
          session,
          this.#withLost(this.#newSegments(shiftDiarization(diarization, offset, fillers, index)), last),
        );
      }
    });
    session.on('rate-limited', (err: SpeechServiceError) =>
      this.#options.pacer?.penalize(err.retryAfterMs ?? 1000),
    );
    this.#session = session;
    this.#notEnded.add(session);
    void session.ended.then(() => this.#notEnded.delete(session));
    if (this.#pendingChange) {
      const change: SessionChange = { ...this.#pendingChange, id: session.id, offsetSec: offset };
      this.#pendingChange = undefined;
      this.emit('session', change);
    }
    return session;
  }

  /** A record resets the restart bound when it finalised something (see the record handler). */
  #progressed(
    record: AsrRecord | DiarizationRecord,
    replay: ReplayBuffer | undefined,
    committedBefore: number | undefined,
  ): void {
    if (!replay || record.is_final || replay.committed > committedBefore!) this.#restartsWithoutRecord = 0;
  }

  get #replayLimits(): ReplayLimits | undefined {
    const option = this.#options.replayBuffer;
    if (option === false) return undefined;
    return { ...DEFAULT_REPLAY_LIMITS, ...option };
  }

  /**
   * Words a restarted session heard again are not emitted twice: a word whose midpoint is not
   * after the end of the last committed word is dropped (times are pipeline times).
   */
  #newWords(record: AsrRecord): AsrRecord {
    const until = this.#emittedUntil;
    const words = record.words.filter((w) => (w.start_time + w.end_time) / 2 > until);
    if ((record.is_speech_final || record.is_final) && words.length > 0)
      this.#emittedUntil = Math.max(
        until,
        maxOf(words, (w) => w.end_time),
      );
    if (words.length === record.words.length) return record;
    return { ...record, words, transcription: words.map((w) => w.word).join(' ') };
  }

  /** As #newWords, for closed diarization segments. */
  #newSegments(record: DiarizationRecord): DiarizationRecord {
    const until = this.#emittedUntil;
    const segments = record.final_segments.filter((s) => (s.start_time + segmentEnd(s)) / 2 > until);
    if (segments.length > 0) this.#emittedUntil = Math.max(until, maxOf(segments, segmentEnd));
    if (segments.length === record.final_segments.length) return record;
    return { ...record, final_segments: segments };
  }

  /** The stream's final record says what audio was lost for good, if any. */
  #withLost<R extends AsrRecord | DiarizationRecord>(record: R, last: boolean): R {
    if (!last || this.#lost.length === 0) return record;
    return { ...record, lost_audio: [...this.#lost] };
  }

  /** Push downstream; when the reader is full, the session reads no more records until _read. */
  #pushFrom(session: LiveSession<K>, record: AsrRecord | DiarizationRecord): void {
    if (!this.push(record) && !this.destroyed) {
      session.pause();
      this.#pausedSessions.add(session);
    }
  }

  /** A record of the current session: whether it is a speech boundary, once rotation is due. */
  #heard(session: LiveSession<K>, boundary: boolean): void {
    if (session === this.#session && this.#rotatePending) this.#atBoundary = boundary;
  }

  /**
   * Only while the source is idle: not with a frame waiting to be sent (its completion arms the
   * timer), nor once the final frame is due or sent (a keepalive would follow it).
   */
  get #keepaliveAllowed(): boolean {
    return (
      !this.destroyed &&
      !this.#ended &&
      !this.#finishing &&
      !this.#lastFinalSent &&
      this.#lastSession === undefined &&
      this.#pendingWrites === 0
    );
  }

  #armKeepalive(language: Language): void {
    this.#clearKeepalive();
    const ms = this.#options.keepaliveMs ?? 45_000;
    if (ms <= 0 || !this.#keepaliveAllowed) return;
    this.#keepalive = setTimeout(() => {
      this.#keepalive = undefined;
      if (!this.#session || !this.#keepaliveAllowed) return;
      // 100 ms of silence keeps the session from expiring while the source stalls.
      this.#writing = this.#writing
        .then(() => this.#send(Buffer.alloc(3200), false, language, true))
        .then(
          () => {
            this.emit('keepalive');
            this.#armKeepalive(language);
          },
          (err: Error) => {
            this.destroy(err);
          },
        );
    }, ms);
  }

  #clearKeepalive(): void {
    if (this.#keepalive) clearTimeout(this.#keepalive);
    this.#keepalive = undefined;
  }
}

/**
 * Realtime ASR as a Duplex: encoded live frames in (from `toFrames`), ASR records out, with
 * word times relative to the start of the pipeline. Events (`LiveStreamEvents`): `session` (a new
 * session replaced one: `SessionChange`), `session-error`, `audio-lost`, `keepalive`.
 */
export function sttStream(options: LiveStreamOptions): LiveTranscriptionStream {
  return new LiveStream('stt', options) as LiveTranscriptionStream;
}

/**
 * Realtime diarization as a Duplex: encoded live frames in, diarization records out, segment
 * times relative to the start of the pipeline. Speaker labels of a later session (after a
 * restart or rotation) get a `#n` suffix: labels are relative to one service session.
 */
export function diarizationStream(options: LiveStreamOptions): LiveTranscriptionStream {
  return new LiveStream('diarization', options) as LiveTranscriptionStream;
}
