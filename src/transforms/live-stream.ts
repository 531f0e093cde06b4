// sttStream() and diarizationStream(): Duplex streams, frames of live audio in (toFrames()),
// records out. A frame's write completes only when the service accepted it, so a slow service
// slows the source. A session that fails is replaced by a fresh one (new UUID) that hears again
// what the failed one had not finalised; record times keep increasing from the pipeline's start;
// a stalled source gets keepalive audio; a long session rotates at a speech boundary. Only the
// last session's final record is final downstream: the records read as one stream. What a
// pipeline gives up on is reported lost with its range, never dropped in silence.
//
// The stream keeps the session lifecycle; each policy stands alone: FrameJoiner (frame sizes
// for the transport), RestartBudget, Rotation, SessionClock and EmittedWatermark (time), and
// ReplayBuffer (what to hear again).

import { Duplex } from 'node:stream';
import { MediaError } from '../audio/media-error.ts';
import { isAdmissionRejection } from '../client/admission.ts';
import { closingSignalOf, type SpeechClient } from '../client/client.ts';
import type { LiveSession, LiveSessionOptions } from '../client/live.ts';
import { LIVE_TRANSPORTS, type LiveKind, type LiveTransport } from '../client/live-types.ts';
import { anySignal, type BackoffOptions, isRetryableFailure, sleep } from '../client/retry.ts';
import {
  IncompleteStreamError,
  InvalidArgumentError,
  SpeechServiceError,
  TransportError,
} from '../protocol/errors.ts';
import { CLOSING_PCM_BYTES, KEEPALIVE_PCM_BYTES } from '../protocol/frame.ts';
import type { Language } from '../protocol/languages.ts';
import { checkChoiceOption, checkNumberOption, MAX_TIMER_MS } from '../protocol/options.ts';
import type { AsrRecord, DiarizationRecord } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import type { TypedStream } from '../protocol/typed-stream.ts';
import { destroyOnAbort } from './abort.ts';
import { FrameJoiner } from './live-joiner.ts';
import { RestartBudget } from './live-restarts.ts';
import { Rotation } from './live-rotation.ts';
import {
  continuedAsr,
  continuedDiarization,
  EmittedWatermark,
  latestEnd,
  SessionClock,
  segmentEnd,
} from './live-timeline.ts';
import {
  DEFAULT_REPLAY_LIMITS,
  type Replay,
  ReplayBuffer,
  type ReplayChunk,
  type ReplayLimits,
} from './replay-buffer.ts';
import { type AudioFrame, isAudioFrame } from './to-frames.ts';

/** The options of a frame's send (the same for every frame). */
const FINAL = Object.freeze({ final: true });
const NOT_FINAL = Object.freeze({ final: false });

/** Opens the live sessions of a stream: `client.live.open`, or a test's sessions over a fake channel. */
export type LiveSessionFactory = <K extends LiveKind>(kind: K, options: LiveSessionOptions) => LiveSession<K>;

/** Options of {@link sttStream} and {@link diarizationStream}. */
export interface LiveStreamOptions {
  /** The client that opens the sessions (or give `sessions`). */
  client?: SpeechClient;
  /** Opens the sessions instead of `client` (a session factory of your own). */
  sessions?: LiveSessionFactory;
  /** Default `http`. */
  transport?: LiveTransport;
  /** Language of the sessions (default: each frame's language). */
  language?: Language;
  /**
   * Start a fresh session after a retryable failure (a 408, a 409, any refusal the service marks
   * retryable, a 5xx included unless it says otherwise; a broken answer, a lost connection, a
   * final record that never came). Default true.
   */
  restart?: boolean;
  /**
   * Restarts allowed with no progress in between (no record finalising audio, no new frame
   * accepted; audio heard again after a failure is not new), before the stream fails. Default
   * unbounded: `restartWithinMs` decides.
   */
  maxRestarts?: number;
  /**
   * The stream fails when, since its last progress, the service has been unreachable or
   * refusing sessions for longer than this in all: the time from each failure until a new
   * session takes audio again. Time a session was taking audio (waiting for its final record,
   * say) is not counted; a `Retry-After` that would take it past this fails the stream at once.
   * Default 60 s (a relay meant to ride out longer outages raises it).
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
   * The frame size on the wire. Over HTTP every frame is a POST: frames shorter than this are
   * joined (up to this much audio, held no longer than this) before they are sent, whatever
   * size `toFrames` made them. A final frame is never held. Default 1000 over HTTP, 0 (every
   * frame as it comes) over Socket.IO.
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
   * and 3.75 MiB; `false` sends nothing again, and what a failed session had not finalised is
   * reported lost.
   */
  replayBuffer?: Partial<ReplayLimits> | false;
}

/** A stretch of the pipeline's audio that was never transcribed, and why it was given up. */
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
  /**
   * Audio that will never be transcribed: accepted by a failed session and past the replay
   * buffer's bound, or, when the stream gives up, everything it took in and had not had
   * finalised. The error is why.
   */
  'audio-lost': [lost: LostAudio & { error?: unknown }];
  /** The source stalled: 100 ms of silence were sent to keep the session open. */
  keepalive: [];
}

/**
 * What `sttStream()` and `diarizationStream()` return: a Duplex (frames in, records out) typed by
 * `LiveStreamEvents`, with the current session's id and what was lost.
 */
export interface LiveTranscriptionStream extends TypedStream<Duplex, LiveStreamEvents> {
  /** The current service session's UUID (undefined before the first frame is sent). */
  readonly sessionId: string | undefined;
  /** Every range reported by `audio-lost` so far, in pipeline time. */
  readonly lostAudio: readonly LostAudio[];
}

/**
 * Session failures that a fresh session with a new UUID recovers from: the stream's end without
 * its final record, a lost connection, a session the service no longer holds (408, 409), and any
 * refusal the service marks retryable that is not about admission. A session's own 429
 * (`SESSION_BYTE_RATE_EXCEEDED`) is waited out by the session where it can; one that reaches the
 * stream (no acknowledgements to wait on, `socketAcks: false`, or its retries spent) restarts
 * after its Retry-After like any other. The service's `retryable` flag decides, whatever its code.
 */
function restartable(err: unknown): boolean {
  if (err instanceof IncompleteStreamError) return true;
  // A session's opening past its deadline (the account's slots held elsewhere) is an outage
  // like any other: the restart budget bounds it.
  if (err instanceof TransportError) return err.code !== 'ERR_CLIENT_CLOSED';
  if (err instanceof SpeechServiceError)
    return (
      err.status === 408 ||
      err.status === 409 ||
      isRetryableFailure(err, { include429: !isAdmissionRejection(err) })
    );
  return false;
}

class LiveStream<K extends LiveKind> extends Duplex {
  readonly kind: K;
  readonly #options: LiveStreamOptions;
  readonly #open: LiveSessionFactory;
  readonly #closing: AbortSignal | undefined;
  readonly #joiner: FrameJoiner;
  readonly #budget: RestartBudget;
  readonly #rotation: Rotation;
  readonly #emitted = new EmittedWatermark();
  #session: LiveSession<K> | undefined;
  #sessionIndex = -1;
  /** The current session's clock (its time origin in the pipeline, its keepalive silence). */
  #clock = new SessionClock(0);
  /** What the current session accepted and the service has not finalised. */
  #replay: ReplayBuffer | undefined;
  /** Audio of a failed session to send on the next one before anything else. */
  #pendingReplay: ReplayChunk[] = [];
  /** Audio lost for good, in pipeline time. */
  readonly #lost: LostAudio[] = [];
  /** Seconds of source audio the stream took in (its frames written). */
  #takenSec = 0;
  /** Pause before the next session starts (set by a restart). */
  #restartDelayMs = 0;
  /** Aborted on destroy: ends a restart pause. */
  readonly #destroyed = new AbortController();
  /** The session the pipeline's final frame went to: only its final record ends the stream. */
  #lastSession: LiveSession<K> | undefined;
  /** Seconds of audio of the session being closed for rotation, with its closing frame. */
  #closingSec = 0;
  #lastFinalSent = false;
  /**
   * The keepalive timer. A frame moves the keepalive on by setting `#keepaliveDue` only, and a
   * timer that fires early arms itself again for what is left: a clearTimeout and setTimeout
   * per frame cost more than the frame's own work here.
   */
  #keepalive: NodeJS.Timeout | undefined;
  /** When the keepalive is due (`performance.now()`); undefined while none is. */
  #keepaliveDue: number | undefined;
  #keepaliveLanguage: Language | undefined;
  #writing: Promise<void> = Promise.resolve();
  /** Sends queued or in flight (frames written, a keepalive): a keepalive neither starts nor re-arms meanwhile. */
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
  /** The language of the latest frame (a terminator after a rotation needs one). */
  #language: Language | undefined;
  #holdTimer: NodeJS.Timeout | undefined;
  #pendingChange: Omit<SessionChange, 'id' | 'offsetSec'> | undefined;

  constructor(kind: K, options: LiveStreamOptions) {
    super({ objectMode: true, readableHighWaterMark: options.highWaterMark ?? 64, writableHighWaterMark: 4 });
    const { client } = options ?? {};
    if (!client && !options?.sessions) throw new InvalidArgumentError(`${kind}Stream needs { client }`);
    this.kind = kind;
    this.#options = options;
    this.#open = options.sessions ?? ((k, o) => client!.live.open(k, o));
    this.#closing = client ? closingSignalOf(client) : undefined;
    checkLiveStreamOptions(`${kind}Stream`, options);
    const coalesceMs = options.coalesceMs ?? ((options.transport ?? 'http') === 'http' ? 1000 : 0);
    this.#joiner = new FrameJoiner(Math.round((coalesceMs * LIVE_BYTES_PER_SECOND) / 2000) * 2);
    this.#budget = new RestartBudget({
      maxRestarts: options.maxRestarts,
      withinMs: options.restartWithinMs,
      backoff: options.restartBackoff,
    });
    this.#rotation = new Rotation({
      afterSec: options.rotateAfterSec,
      forceAfterSec: options.forceRotateAfterSec,
    });
    // Its listener leaves the signal when the stream closes: a long-lived signal given to
    // stream after stream must not hold every one of them.
    destroyOnAbort(this, options.signal);
  }

  /** The current session's UUID. */
  get sessionId(): string | undefined {
    return this.#session?.id;
  }

  get lostAudio(): readonly LostAudio[] {
    return this.#lost;
  }

  get #coalesceMs(): number {
    return this.#options.coalesceMs ?? ((this.#options.transport ?? 'http') === 'http' ? 1000 : 0);
  }

  override _write(
    frame: AudioFrame,
    _encoding: BufferEncoding,
    callback: (error?: Error | null) => void,
  ): void {
    if (!isAudioFrame(frame)) {
      callback(
        new InvalidArgumentError(
          `${this.kind}Stream takes the frames toFrames() makes ({ pcm, language, isFinal }): pipe PCM through toFrames() first`,
        ),
      );
      return;
    }
    this.#clearKeepalive();
    this.#language = frame.language;
    this.#takenSec += frame.pcm.length / LIVE_BYTES_PER_SECOND;
    const ready = this.#joiner.push(frame);
    if (this.#joiner.holding) {
      // Held (bounded by coalesceMs of audio and of time).
      this.#holdTimer ??= setTimeout(() => {
        this.#holdTimer = undefined;
        this.#flushHeld();
      }, this.#coalesceMs);
    } else if (this.#holdTimer) {
      clearTimeout(this.#holdTimer);
      this.#holdTimer = undefined;
    }
    if (ready.length === 0) {
      callback();
      return;
    }
    for (const out of ready) this.#enqueue(out);
    // One write at a time (a Writable's contract): its callback waits here.
    this.#writeCallback = callback;
    this.#writing.then(this.#written, this.#writeFailed);
  }

  #writeCallback: ((error?: Error | null) => void) | undefined;

  readonly #written = (): void => {
    const callback = this.#writeCallback!;
    this.#writeCallback = undefined;
    // The language of the frame written (set by _write, which is not called again before this).
    this.#armKeepalive(this.#language!);
    callback();
  };

  readonly #writeFailed = (err: Error): void => {
    const callback = this.#writeCallback!;
    this.#writeCallback = undefined;
    callback(err);
  };

  /** Chained: a keepalive or a held frame may still be in flight. */
  #enqueue(frame: AudioFrame): void {
    const send = () => this.#send(frame.pcm, frame.isFinal, frame.language, false);
    // Nothing in flight and the reader keeping up (a live source's every frame): sent at once.
    const now = this.#pendingWrites === 0 && !this.#readerFull;
    this.#pendingWrites++;
    this.#writing = (now ? send() : this.#writing.then(() => this.#waitForReader()).then(send)).finally(
      this.#wrote,
    );
  }

  readonly #wrote = (): void => {
    this.#pendingWrites--;
  };

  /** Send the held audio now (its time is up, or the input ended). */
  #flushHeld(): void {
    const held = this.#joiner.flush();
    if (!held || this.destroyed) return;
    this.#clearKeepalive();
    this.#enqueue(held);
    this.#writing.then(
      () => {
        if (!this.#finishing) this.#armKeepalive(held.language);
      },
      (err: Error) => this.destroy(err),
    );
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#finishing = true;
    this.#stopKeepalive();
    if (this.#holdTimer) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
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
          await this.#send(Buffer.alloc(CLOSING_PCM_BYTES), true, this.#language, true);
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
    this.#stopKeepalive();
    if (this.#holdTimer) clearTimeout(this.#holdTimer);
    this.#holdTimer = undefined;
    this.#readWaiter?.();
    // A stream that ended (its last session finished) has nothing left to stop: no reason is
    // made then (a DOMException, with its stack, cost as much as many frames).
    if (err || !this.#ended) {
      const reason = err ?? new DOMException('stream destroyed', 'AbortError');
      this.#destroyed.abort(reason);
      this.#session?.abort(reason);
    }
    // Each ends within its endTimeoutMs (`ended` never rejects).
    if (this.#notEnded.size === 0) callback(err);
    else void Promise.all([...this.#notEnded].map((s) => s.ended)).then(() => callback(err));
  }

  /** Unread records pile up: no sending until the reader takes some. */
  get #readerFull(): boolean {
    return this.readableLength >= this.readableHighWaterMark && !this.destroyed;
  }

  /** Backpressure from the reader: do not send while unread records pile up. */
  async #waitForReader(): Promise<void> {
    while (this.#readerFull) {
      await new Promise<void>((resolve) => (this.#readWaiter = resolve));
    }
  }

  /** `filler`: silence of our own (keepalive, terminator), not the source's audio. */
  async #send(pcm: Buffer, final: boolean, language: Language, filler: boolean): Promise<void> {
    const rotating = this.#session;
    if (
      !final &&
      rotating &&
      this.#rotation.due(this.#clock.sec) &&
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
        await sleep(pause, anySignal(this.#destroyed.signal, this.#closing));
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
          await this.#sendOn(session, Buffer.alloc(CLOSING_PCM_BYTES), true, true, true);
        }
      } catch (err) {
        // Not accepted by this session: send it on a fresh one, after what this one did not finalise.
        this.#recover(err, 'restart', accepted ? undefined : pcm);
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
   * but the session then failed, what it had not finalised is heard again on the next one.
   */
  async #closeForRotation(session: LiveSession<K>, pcm: Buffer, filler: boolean): Promise<boolean> {
    this.#closingSec = this.#clock.sec + pcm.length / LIVE_BYTES_PER_SECOND;
    try {
      await this.#sendOn(session, pcm, true, filler);
    } catch (err) {
      this.#recover(err, 'restart', pcm);
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
  #sendOn(
    session: LiveSession<K>,
    pcm: Buffer,
    final: boolean,
    filler: boolean,
    again = false,
  ): Promise<void> {
    const clock = this.#clock;
    clock.sending = pcm.length / LIVE_BYTES_PER_SECOND;
    return session.send(pcm, final ? FINAL : NOT_FINAL).then(
      () => {
        clock.sending = 0;
        this.#acceptedBy(pcm, final, filler, again);
      },
      (err: unknown) => {
        clock.sending = 0;
        throw err;
      },
    );
  }

  #acceptedBy(pcm: Buffer, final: boolean, filler: boolean, again: boolean): void {
    // Accepted: the service takes audio again. New source audio is progress (silence yields
    // no records, so those alone cannot say); audio heard again is not: sessions that each
    // accept the replay and fail before finalising any of it (every answer cut, a final record
    // never sent) make no progress, and restarting them for ever would hang the stream.
    this.#budget.accepted();
    if (!again) this.#budget.progress();
    const sec = pcm.length / LIVE_BYTES_PER_SECOND;
    this.#replay?.push(this.#clock.sec, pcm, filler);
    this.#clock.accepted(sec, filler);
    this.#rotation.accepted(this.#clock.sec, final);
  }

  /**
   * A failed session: forget it (the next frame starts a new UUID), or fail the stream. `unsent`:
   * the frame the session did not accept, lost too if the stream gives up.
   */
  #recover(err: unknown, reason: SessionChange['reason'] = 'restart', unsent?: Buffer): void {
    const failed = this.#session;
    // A session that refused a frame without failing (a frame over its size limit) is still
    // live at the service: end it there, or it would hold its slot and the stream's close.
    failed?.abort(err);
    const delay =
      this.destroyed || this.#options.restart === false || !restartable(err)
        ? undefined
        : this.#budget.failed(err);
    this.#endSession({ reason, previousId: failed?.id ?? '', error: err }, true);
    if (delay === undefined) {
      this.#giveUp(err, unsent);
      throw err;
    }
    this.#restartDelayMs = delay;
    this.emit('session-error', err);
  }

  /**
   * Without a replay buffer, where the audio of the current session that nothing finalised
   * begins (pipeline seconds): the session's start, or the end of the words emitted after it.
   */
  get #unfinalisedFrom(): number {
    return Math.max(0, this.#clock.offsetSec, this.#emitted.until);
  }

  /**
   * The stream fails: everything it took in from the source and had not had finalised (what the
   * failed session had not finalised, the frames not accepted, what the source wrote since) is
   * reported lost, from where it begins to the end of what was taken in.
   */
  #giveUp(err: unknown, unsent: Buffer | undefined): void {
    // Destroyed by its user: nothing is given up that the user did not stop.
    if (this.destroyed) return;
    const start = !this.#replay
      ? // What was finalised is all that is known; a failed session's audio was reported (#endSession).
        this.#unfinalisedFrom
      : this.#pendingReplay.length > 0 || unsent
        ? this.#clock.offsetSec
        : this.#takenSec;
    const end = this.#takenSec;
    if (end > start) this.#reportLost({ start_time: start, end_time: end }, err);
  }

  #reportLost(lost: LostAudio, error: unknown): void {
    this.#lost.push(lost);
    this.emit('audio-lost', { ...lost, error });
  }

  /**
   * The current session is over. After a failure (`replay`), what it accepted and the service
   * did not finalise is sent again on the next session, whose time origin is where that starts;
   * otherwise all its audio moves into the time offset.
   */
  #endSession(change: Omit<SessionChange, 'id' | 'offsetSec'>, replay = false): void {
    this.#session = undefined;
    const clock = this.#clock;
    const r: Replay = replay && this.#replay ? this.#replay.replay() : { chunks: [], from: clock.sec };
    if (r.lost) {
      this.#reportLost(
        { start_time: clock.toPipeline(r.lost.start), end_time: clock.toPipeline(r.lost.end) },
        change.error,
      );
    } else if (replay && !this.#replay && !this.destroyed) {
      // No replay buffer: what the failed session took and the service had not finalised is
      // heard by no other session.
      const start = this.#unfinalisedFrom;
      const end = clock.toPipeline(clock.sec);
      if (end > start) this.#reportLost({ start_time: start, end_time: end }, change.error);
    }
    // Audio of an earlier failure not yet heard again goes after what this session accepted.
    this.#pendingReplay = [...r.chunks, ...this.#pendingReplay];
    const replaySec = r.chunks.reduce((sum, c) => sum + c.pcm.length, 0) / LIVE_BYTES_PER_SECOND;
    this.#clock = new SessionClock(clock.toPipeline(r.from));
    this.#rotation.reset();
    this.#pendingChange = replaySec > 0 ? { ...change, replaySec } : change;
  }

  #startSession(language: Language): LiveSession<K> {
    this.#sessionIndex++;
    const session = this.#open(this.kind, {
      ...this.#options.session,
      transport: this.#options.transport ?? 'http',
      language: this.#options.language ?? language,
    }) as LiveSession<K>;
    // This session's own clock and replay buffer: records may still arrive after it ended.
    const clock = this.#clock;
    const index = this.#sessionIndex;
    const replay = this.#replayLimits ? new ReplayBuffer(this.#replayLimits) : undefined;
    this.#replay = replay;
    session.on('record', (record: AsrRecord | DiarizationRecord) =>
      this.#onRecord(session, clock, index, replay, record),
    );
    session.on('rate-limited', (err: SpeechServiceError) =>
      this.#options.pacer?.penalize(err.retryAfterMs ?? 1000),
    );
    this.#session = session;
    this.#notEnded.add(session);
    void session.ended.then(() => this.#notEnded.delete(session));
    if (this.#pendingChange) {
      const change: SessionChange = { ...this.#pendingChange, id: session.id, offsetSec: clock.offsetSec };
      this.#pendingChange = undefined;
      this.emit('session', change);
    }
    return session;
  }

  #onRecord(
    session: LiveSession<K>,
    clock: SessionClock,
    index: number,
    replay: ReplayBuffer | undefined,
    record: AsrRecord | DiarizationRecord,
  ): void {
    // Progress: a record that finalises audio (with a replay buffer, audio it did not finalise
    // before). Provisional records of the replayed audio, heard by session after session that
    // fails before finalising it, are not.
    const committedBefore = replay?.committed;
    const continued = record.is_final && this.#lastSession !== session;
    const last = record.is_final && !continued;
    // A record finalises no audio past what its session was sent, whatever times it gives.
    const sent = clock.sentSec;
    const limit = clock.toPipeline(sent);
    let out: AsrRecord | DiarizationRecord;
    if (this.kind === 'stt') {
      let asr = record as AsrRecord;
      if (record.is_final) replay?.commitAll();
      else if (asr.is_speech_final && asr.words.length > 0)
        replay?.commit(
          Math.min(
            sent,
            latestEnd(asr.words, (w) => w.end_time),
          ),
        );
      if (continued) asr = continuedAsr(asr);
      this.#heard(session, asr.is_speech_final);
      out = this.#emitted.newWords(clock.shiftAsr(asr), limit);
    } else {
      let diarization = record as DiarizationRecord;
      if (record.is_final) replay?.commitAll();
      else if (diarization.final_segments.length > 0)
        replay?.commit(Math.min(sent, latestEnd(diarization.final_segments, segmentEnd)));
      if (continued) diarization = continuedDiarization(diarization, this.#closingSec);
      // Nobody speaking: a place to cut.
      this.#heard(session, diarization.active_segments.length === 0);
      out = this.#emitted.newSegments(clock.shiftDiarization(diarization, index), limit);
    }
    if (!replay || record.is_final || replay.committed > committedBefore!) this.#budget.progress();
    // The stream's final record says what audio was lost for good, if any.
    if (last && this.#lost.length > 0) out = Object.assign({ ...out }, { lost_audio: [...this.#lost] });
    this.#pushFrom(session, out);
  }

  get #replayLimits(): ReplayLimits | undefined {
    const option = this.#options.replayBuffer;
    if (option === false) return undefined;
    return { ...DEFAULT_REPLAY_LIMITS, ...option };
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
    if (session === this.#session) this.#rotation.heard(boundary);
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
    const ms = this.#options.keepaliveMs ?? 45_000;
    if (ms <= 0 || !this.#keepaliveAllowed) {
      this.#clearKeepalive();
      return;
    }
    this.#keepaliveDue = performance.now() + ms;
    this.#keepaliveLanguage = language;
    this.#keepalive ??= setTimeout(() => this.#keepaliveTimer(), ms);
  }

  #keepaliveTimer(): void {
    this.#keepalive = undefined;
    const due = this.#keepaliveDue;
    if (due === undefined) return;
    const left = due - performance.now();
    if (left > 0) {
      this.#keepalive = setTimeout(() => this.#keepaliveTimer(), left);
      return;
    }
    this.#keepaliveDue = undefined;
    const language = this.#keepaliveLanguage!;
    if (!this.#session || !this.#keepaliveAllowed) return;
    // 100 ms of silence keeps the session from expiring while the source stalls. It is a send
    // in flight like a frame's: a frame written meanwhile goes after it, never beside it (two
    // sends at once would both restart a failed session, one without its pause, and share
    // its replay).
    this.#pendingWrites++;
    this.#writing = this.#writing
      .then(() => this.#send(Buffer.alloc(KEEPALIVE_PCM_BYTES), false, language, true))
      .finally(this.#wrote)
      .then(
        () => {
          this.emit('keepalive');
          this.#armKeepalive(language);
        },
        (err: Error) => {
          this.destroy(err);
        },
      );
  }

  /** No keepalive is due (a frame is on its way); an armed timer lapses when it fires. */
  #clearKeepalive(): void {
    this.#keepaliveDue = undefined;
  }

  /** No keepalive, and no timer left (the stream is ending). */
  #stopKeepalive(): void {
    this.#keepaliveDue = undefined;
    if (this.#keepalive) clearTimeout(this.#keepalive);
    this.#keepalive = undefined;
  }
}

/** Bad options fail at once, typed (see `checkNumberOption`), not as another behaviour later. */
function checkLiveStreamOptions(caller: string, options: LiveStreamOptions): void {
  checkChoiceOption(caller, 'transport', options.transport, LIVE_TRANSPORTS);
  const timer = { max: MAX_TIMER_MS };
  checkNumberOption(caller, 'coalesceMs', options.coalesceMs, timer);
  checkNumberOption(caller, 'keepaliveMs', options.keepaliveMs, timer);
  checkNumberOption(caller, 'maxRestarts', options.maxRestarts, { integer: true, infinite: true });
  checkNumberOption(caller, 'restartWithinMs', options.restartWithinMs, { infinite: true });
  checkNumberOption(caller, 'rotateAfterSec', options.rotateAfterSec, { above: true });
  checkNumberOption(caller, 'forceRotateAfterSec', options.forceRotateAfterSec, { above: true });
  checkNumberOption(caller, 'restartBackoff.baseMs', options.restartBackoff?.baseMs);
  checkNumberOption(caller, 'restartBackoff.maxMs', options.restartBackoff?.maxMs, timer);
  checkNumberOption(caller, 'restartBackoff.factor', options.restartBackoff?.factor);
  if (options.replayBuffer) {
    checkNumberOption(caller, 'replayBuffer.maxSec', options.replayBuffer.maxSec);
    checkNumberOption(caller, 'replayBuffer.maxBytes', options.replayBuffer.maxBytes, { integer: true });
  }
}

/**
 * Realtime ASR as a Duplex: frames of live audio in (from `toFrames`), ASR records out, with
 * word times relative to the start of the pipeline. Events (`LiveStreamEvents`): `session` (a new
 * session replaced one: `SessionChange`), `session-error`, `audio-lost`, `keepalive`.
 */
export function sttStream(options: LiveStreamOptions): LiveTranscriptionStream {
  return new LiveStream('stt', options) as LiveTranscriptionStream;
}

/**
 * Realtime diarization as a Duplex: frames of live audio in, diarization records out, segment
 * times relative to the start of the pipeline. Speaker labels of a later session (after a
 * restart or rotation) get a `#n` suffix: labels are relative to one service session.
 */
export function diarizationStream(options: LiveStreamOptions): LiveTranscriptionStream {
  return new LiveStream('diarization', options) as LiveTranscriptionStream;
}
