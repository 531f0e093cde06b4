// Live streams (pseudo-sessions) keyed by stream UUID: the interface's state machine (start,
// 409 for an id never started, retired or already live, expiry, idle retirement, session audio
// limit, sustained byte rate) plus admission, and the engine that turns frames into records.

import { STREAM_REQUESTS_IN_FLIGHT_BOUND } from '../protocol/error-codes.ts';
import type { LiveFrame } from '../protocol/frame.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { AsrRecord, DiarizationRecord } from '../protocol/records.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import { bytesToUuid, isZeroUuid } from '../protocol/uuid.ts';
import { type Admit, CONCURRENCY_RETRY_AFTER_SEC, NOTHING, type Release } from './admission.ts';
import type { EmulatorContext } from './context.ts';
import { type LiveAsrEngine, LiveDiarizationEngine } from './engine/live.ts';
import type { RecognizedAsrEngine } from './engine/recognized.ts';
import { type FaultAnswer, type FaultPlan, failureRejection, faultAfterEffect } from './faults.ts';
import { limitData, reject } from './rejection.ts';
import type { SessionEnd } from './stats.ts';
import type { EmulatorKey } from './types.ts';

export type SessionKind = 'stt' | 'diarization';
export type SessionRecord = AsrRecord | DiarizationRecord;

/**
 * Ended (not retired) stream ids remembered per scope, for the detail of a 409 and the
 * diarization never-started rule. Retired ids are never forgotten.
 */
const MAX_REMEMBERED = 100_000;

export interface SessionScope {
  /**
   * `http` pseudo-sessions take a slot, expire and retire when idle; Socket.IO streams end with
   * their socket, and expire too (a stream a client abandoned on an open connection must not
   * hold its account's concurrency for good).
   */
  transport: 'http' | 'socket';
  /** The socket id for Socket.IO streams; one namespace for HTTP. */
  scope: string;
  /** `transport:scope`, what the scope's streams and memory are kept under. */
  key: string;
}

/** A scope, its key made once (maps are looked up by it for every live frame). */
export function sessionScope(transport: SessionScope['transport'], scope: string): SessionScope {
  return Object.freeze({ transport, scope, key: `${transport}:${scope}` });
}

export class ServerSession {
  readonly id: string;
  readonly kind: SessionKind;
  readonly transport: 'http' | 'socket';
  readonly where: SessionScope;
  state: 'live' | SessionEnd = 'live';
  /** The final frame was accepted: the stream is finishing and takes no more frames. */
  finalAccepted = false;
  /** PCM bytes accepted: whole bytes, so a stream exactly at the audio limit is accepted. */
  audioBytes = 0;
  tokens: number;
  tokensAt = performance.now();
  lastAudioAt = performance.now();
  lastActivityAt = performance.now();
  /** POSTs of this stream being handled now (see `ServerSessions.beginPost`). */
  inFlight = 0;
  /** Records released after their response window closed, sent with the next response. */
  readonly pending: SessionRecord[] = [];
  readonly engine: LiveAsrEngine | RecognizedAsrEngine | LiveDiarizationEngine;
  /** Gives back the stream's concurrency (and slot); idempotent. */
  readonly release: Release;
  /** A POST of this stream is being answered; the ones waiting for their turn, in order. */
  #turnBusy = false;
  readonly #turnWaiting: (() => void)[] = [];
  #inference: Promise<void> = Promise.resolve();
  /** Frames whose records are held back by the latency model, not yet released. */
  #held = 0;
  /** HTTP streams: the one timer for expiry and idle retirement, while the stream is quiet. */
  timer: NodeJS.Timeout | undefined;

  constructor(
    frame: LiveFrame,
    kind: SessionKind,
    where: SessionScope,
    burst: number,
    release: Release,
    engine: LiveAsrEngine | RecognizedAsrEngine | undefined,
  ) {
    this.id = frame.streamId;
    this.kind = kind;
    this.transport = where.transport;
    this.where = where;
    this.tokens = burst;
    this.release = release;
    this.engine = engine ?? new LiveDiarizationEngine(frame.streamId);
  }

  get live(): boolean {
    return this.state === 'live';
  }

  /**
   * While the recognizer is behind on this stream's audio, when its next frame may be taken:
   * a stream sent faster than it is recognized is answered late, and queues a bounded amount.
   */
  backlogWait(): Promise<void> | undefined {
    return 'backlogWait' in this.engine ? this.engine.backlogWait() : undefined;
  }

  /**
   * Run `fn` after every earlier POST of this stream has been answered (arrival order). When
   * none is being answered (the usual case) it runs at once, and an `fn` that answers at once
   * (returns no promise) takes its turn and gives it back with no promise made.
   */
  inTurn(fn: () => Promise<void> | undefined): Promise<void> | undefined {
    if (this.#turnBusy) return this.#afterTurns(fn);
    this.#turnBusy = true;
    let out: Promise<void> | undefined;
    try {
      out = fn();
    } catch (err) {
      this.#nextTurn();
      throw err;
    }
    if (out === undefined) this.#nextTurn();
    else out = out.finally(() => this.#nextTurn());
    return out;
  }

  async #afterTurns(fn: () => Promise<void> | undefined): Promise<void> {
    await new Promise<void>((resolve) => this.#turnWaiting.push(resolve));
    try {
      await fn();
    } finally {
      this.#nextTurn();
    }
  }

  /** The turn passes to the next POST waiting, if any. */
  #nextTurn(): void {
    const next = this.#turnWaiting.shift();
    if (next) next();
    else this.#turnBusy = false;
  }

  /**
   * Run the engine on accepted PCM now (so results do not depend on timing) and release the
   * records after the latency model's delay (`delayMs`), in order behind earlier frames.
   * The records themselves when they are released at once (no delay, and no earlier frame's
   * records still held back: every live frame without a latency model), else their promise.
   */
  infer(pcm: Buffer, final: boolean, delayMs: number, sleep: (ms: number) => Promise<void>): Released {
    // A recognizer's records come once it has decoded (later frames' wait behind them).
    const pushed: Released = this.engine.push(pcm);
    const records = final ? joinReleased(pushed, this.engine.finish()) : pushed;
    if (Array.isArray(records) && delayMs <= 0 && this.#held === 0) {
      this.lastActivityAt = performance.now();
      return records;
    }
    this.#held++;
    const ready = this.#inference
      .then(() => sleep(delayMs))
      .then(() => records)
      .then((out) => {
        this.lastActivityAt = performance.now();
        return out;
      })
      .finally(() => {
        this.#held--;
      });
    this.#inference = ready.then(
      () => {},
      () => {},
    );
    return ready;
  }
}

/** A frame's records: at once, or once the latency model releases them. */
export type Released = SessionRecord[] | Promise<SessionRecord[]>;

const joinReleased = (a: Released, b: Released): Released =>
  Array.isArray(a) && Array.isArray(b) ? [...a, ...b] : Promise.all([a, b]).then(([x, y]) => [...x, ...y]);

/** A scope's live streams, per kind, by id. */
interface LiveScope {
  stt: Map<string, ServerSession>;
  diarization: Map<string, ServerSession>;
}

/** What a scope (HTTP, or one socket) remembers of its ended streams, keyed `kind:id`. */
interface ScopeMemory {
  /** Tombstones: retired ids, kept for the emulator's life (or the socket's). */
  retired: Set<string>;
  /** How other ids ended, the oldest forgotten past `MAX_REMEMBERED`. */
  ended: Map<string, SessionEnd>;
  /**
   * Ids retired for idleness whose next frame gets 408 (then 409): when their last audio was
   * accepted. The oldest forgotten past `MAX_REMEMBERED` (its next frame gets 409).
   */
  idle: Map<string, number>;
}

export class ServerSessions {
  readonly #ctx: EmulatorContext;
  /** Live streams per scope (`transport:scope`), then per kind, by id. */
  readonly #live = new Map<string, LiveScope>();
  /** Ended ids per scope (`transport:scope`). */
  readonly #memory = new Map<string, ScopeMemory>();
  /** Diarization streams (`scope id`) with a POST in flight. */
  readonly #posting = new Set<string>();

  constructor(ctx: EmulatorContext) {
    this.#ctx = ctx;
    this.#sleep = (ms) => ctx.lifecycle.sleep(ms);
  }

  /** The latency model's wait, made once (not a closure per frame). */
  readonly #sleep: (ms: number) => Promise<void>;

  find(kind: SessionKind, id: string, where: SessionScope): ServerSession | undefined {
    return this.#live.get(where.key)?.[kind].get(id);
  }

  /**
   * Apply the state machine to one frame and, if every check passes, admit it (`admit`: the
   * request rate; for a start frame also concurrency and, over HTTP, a slot) and accept it (its
   * audio counts from now on). Throws the `Rejection` to answer otherwise.
   */
  accept(
    frame: LiveFrame,
    kind: SessionKind,
    where: SessionScope,
    key: EmulatorKey,
    admit: Admit,
  ): ServerSession {
    const now = performance.now();
    let session = this.find(kind, frame.streamId, where);
    const quiet = session && this.#quietDue(session);
    if (session && quiet?.idle && now >= quiet.due) {
      // Idle too long: retired now, if its timer has not done it yet.
      this.#retireIdle(session);
      session = undefined;
    }
    // A live stream's id is in no idle memory (it was retired to get there, and is retired still).
    if (!session) this.#answerIdle(kind, frame.streamId, where, now);
    if (frame.isStart) {
      if (session) throw reject('SESSION_EXPIRED', 'is_start for a stream that is already live');
      if (this.#ended(kind, frame.streamId, where) === 'retired')
        throw reject('SESSION_EXPIRED', 'the stream was retired; start a new stream with a fresh UUID');
      this.#checkAudio(frame, undefined);
      session = this.#open(frame, kind, where, key, admit);
    } else {
      if (!session) {
        const ended = this.#ended(kind, frame.streamId, where);
        if (ended === 'retired')
          throw reject('SESSION_EXPIRED', 'the stream was retired; start a new stream with a fresh UUID');
        if (ended === undefined && kind === 'diarization')
          throw reject('VALIDATION_REQUIRED_FIELD', 'the stream never received a start frame (is_start)');
        throw reject(
          'SESSION_EXPIRED',
          ended === undefined ? 'the stream was never started' : `the stream is no longer live (${ended})`,
        );
      }
      if (session.finalAccepted)
        throw reject('SESSION_EXPIRED', "the stream's final frame was already accepted");
      this.#checkAudio(frame, session);
      admit();
    }
    session.tokens -= frame.pcm.length;
    session.audioBytes += frame.pcm.length;
    if (frame.isFinal) session.finalAccepted = true;
    session.lastAudioAt = now;
    session.lastActivityAt = now;
    this.#arm(session);
    this.#ctx.stats.framesAccepted++;
    return session;
  }

  /**
   * A live frame over either transport: `accept` it, start its inference, and apply the faults
   * that act on an accepted frame. `fail` ends the stream and throws the operation's failure; a
   * fault at stage `afterEffect` is returned for the transport to answer with (the frame stays
   * accepted, and a final frame finishes the stream once its records, never sent, are ready).
   */
  acceptFrame(
    frame: LiveFrame,
    kind: SessionKind,
    where: SessionScope,
    key: EmulatorKey,
    admit: Admit,
    op: OperationName,
    plan: FaultPlan,
  ): {
    session: ServerSession;
    /** The frame's records, at once or later (see `ServerSession.infer`). */
    records: Released;
    after: FaultAnswer | undefined;
  } {
    const session = this.accept(frame, kind, where, key, admit);
    // The recognizer failed on this stream's audio: it fails as the `fail` fault fails it.
    if (plan.fail || ('failed' in session.engine && session.engine.failed)) {
      this.end(session, 'failed');
      throw failureRejection(op);
    }
    const records = this.infer(session, frame);
    const after = faultAfterEffect(plan);
    if (after && frame.isFinal)
      void Promise.resolve(records).then(
        () => this.end(session, 'finished'),
        () => {},
      );
    return { session, records, after };
  }

  /** Session audio limit (retires the stream) and sustained byte rate (the stream stays live). */
  #checkAudio(frame: LiveFrame, session: ServerSession | undefined): void {
    const { limits } = this.#ctx;
    const bytes = frame.pcm.length;
    const total = (session?.audioBytes ?? 0) + bytes;
    if (total > limits.sessionAudioDurationSec * LIVE_BYTES_PER_SECOND) {
      // A live stream is retired; a start frame alone over the limit never made one live, so
      // it is refused and its id is left as it was (nothing to retire or tombstone).
      if (session) this.end(session, 'retired');
      throw reject(
        'AUDIO_DURATION_EXCEEDED',
        `the stream's audio exceeds ${limits.sessionAudioDurationSec} s`,
        {
          data: limitData(
            'session_audio_duration',
            limits.sessionAudioDurationSec,
            total / LIVE_BYTES_PER_SECOND,
          ),
        },
      );
    }
    const burst = limits.sessionAudioRateBurstBytes;
    const rate = limits.sessionAudioRateRealtime * LIVE_BYTES_PER_SECOND;
    let tokens = burst;
    if (session) {
      const now = performance.now();
      tokens = Math.min(burst, session.tokens + ((now - session.tokensAt) / 1000) * rate);
      session.tokens = tokens;
      session.tokensAt = now;
    }
    if (bytes > tokens) {
      const waitSec = Math.max(1, Math.ceil((bytes - tokens) / rate));
      throw reject(
        'SESSION_BYTE_RATE_EXCEEDED',
        'audio is arriving faster than the sustained rate; the stream stays live',
        {
          retryAfterSec: waitSec,
          data: limitData('session_audio_rate_burst', burst, burst - tokens + bytes),
        },
      );
    }
  }

  #open(
    frame: LiveFrame,
    kind: SessionKind,
    where: SessionScope,
    key: EmulatorKey,
    admit: Admit,
  ): ServerSession {
    const workload = kind === 'stt' ? 'realtime_asr' : 'diarization';
    const release = admit(() => {
      const concurrency = this.#ctx.concurrency.acquire(key.account, workload);
      if (where.transport !== 'http') return concurrency;
      let slot: Release;
      try {
        slot = this.#ctx.slots.acquire(key.account);
      } catch (err) {
        concurrency();
        throw err;
      }
      return () => {
        slot();
        concurrency();
      };
    });
    const session = new ServerSession(
      frame,
      kind,
      where,
      this.#ctx.limits.sessionAudioRateBurstBytes,
      release,
      kind === 'stt' ? this.#ctx.liveAsrEngine(frame.streamId, frame.language) : undefined,
    );
    this.#memoryOf(where, false)?.ended.delete(`${kind}:${frame.streamId}`);
    const scopeKey = where.key;
    let live = this.#live.get(scopeKey);
    if (!live) {
      live = { stt: new Map(), diarization: new Map() };
      this.#live.set(scopeKey, live);
    }
    live[kind].set(frame.streamId, session);
    this.#ctx.stats.sessionOpened();
    return session;
  }

  /** Records of an accepted frame, released after the latency model's processing time. */
  infer(session: ServerSession, frame: LiveFrame): Released {
    const ctx = this.#ctx;
    const delayMs = ctx.perRequestMs + ctx.audioDelayMs(frame.pcm.length / LIVE_BYTES_PER_SECOND);
    const out = session.infer(frame.pcm, frame.isFinal, delayMs, this.#sleep);
    if (!Array.isArray(out)) out.catch(() => {}); // rejected only when the emulator closes
    return out;
  }

  /** End a live session: release what it holds and remember how it ended. */
  end(session: ServerSession, how: SessionEnd): void {
    if (!session.live) return;
    session.state = how;
    this.#ctx.lifecycle.clear(session.timer);
    session.timer = undefined;
    session.release();
    if ('close' in session.engine) session.engine.close();
    const scopeKey = session.where.key;
    const live = this.#live.get(scopeKey);
    if (live?.[session.kind].get(session.id) === session) {
      live[session.kind].delete(session.id);
      if (live.stt.size === 0 && live.diarization.size === 0) this.#live.delete(scopeKey);
    }
    this.#remember(session.kind, session.id, session.where, how);
    this.#ctx.stats.sessionEnded(how);
  }

  /** Cancel every live stream of a scope (a Socket.IO connection that closed) and forget its ids. */
  cancelScope(where: SessionScope): void {
    const scopeKey = where.key;
    const live = this.#live.get(scopeKey);
    if (live)
      for (const session of [...live.stt.values(), ...live.diarization.values()])
        this.end(session, 'cancelled');
    this.#memory.delete(scopeKey);
  }

  closeAll(): void {
    for (const live of [...this.#live.values()])
      for (const session of [...live.stt.values(), ...live.diarization.values()])
        this.end(session, 'cancelled');
  }

  /**
   * Diarization over HTTP allows one POST in flight per stream UUID: claim the stream for a POST
   * as soon as its frame header (`head`, the 16 UUID bytes) names it, whether or not the stream
   * exists yet. Another POST of it in flight is 429 `CONCURRENCY_LIMIT_EXCEEDED` with
   * `Retry-After` (the stream is unchanged). Its `data` bound, `stream_requests_in_flight`, tells
   * it apart from the account's plan concurrency (`account_concurrency_<workload>`): waiting for
   * the stream's own POST is the remedy, not running fewer operations. Returns the release.
   */
  claimDiarizationPost(head: Buffer, where: SessionScope): Release {
    if (isZeroUuid(head)) return NOTHING; // the frame is refused when it is decoded
    const name = `${where.key} ${bytesToUuid(head)}`;
    if (this.#posting.has(name)) {
      throw reject(
        'CONCURRENCY_LIMIT_EXCEEDED',
        'another POST of this stream is in flight; send one at a time',
        {
          retryAfterSec: CONCURRENCY_RETRY_AFTER_SEC,
          data: { limit: 1, observed: 2, unit: 'requests', bound: STREAM_REQUESTS_IN_FLIGHT_BOUND },
        },
      );
    }
    this.#posting.add(name);
    let held = true;
    return () => {
      if (held) this.#posting.delete(name);
      held = false;
    };
  }

  /** A POST of this stream is being answered: the stream neither expires nor idles meanwhile. */
  beginPost(session: ServerSession): void {
    session.inFlight++;
  }

  /** That POST was answered: the quiet time is watched again. */
  endPost(session: ServerSession): void {
    session.inFlight--;
    this.#arm(session);
  }

  /**
   * Every stream: expiry `sessionExpirySec` after the last accepted audio or released record;
   * HTTP streams also idle retirement `sessionIdleSec` after the last accepted audio (not once the final frame
   * was accepted: no more audio is due), whichever comes first. One timer, armed only while no
   * POST of the stream is being answered (`endPost` arms it again); when it fires early (newer
   * activity) it re-arms.
   */
  #arm(session: ServerSession): void {
    if (!session.live) return;
    if (session.inFlight > 0 || session.timer !== undefined) return;
    const { due } = this.#quietDue(session);
    session.timer = this.#ctx.lifecycle.timeout(Math.max(1, due - performance.now()), () => {
      session.timer = undefined;
      if (!session.live || session.inFlight > 0) return;
      const next = this.#quietDue(session);
      if (performance.now() < next.due) this.#arm(session);
      else if (next.idle) this.#retireIdle(session);
      else this.end(session, 'expired');
    });
  }

  /** When a quiet HTTP stream ends, and whether by idle retirement (else by expiry). */
  #quietDue(session: ServerSession): { due: number; idle: boolean } {
    const { limits } = this.#ctx;
    const expiry = session.lastActivityAt + limits.sessionExpirySec * 1000;
    if (session.transport !== 'http' || session.finalAccepted) return { due: expiry, idle: false };
    const idle = session.lastAudioAt + limits.sessionIdleSec * 1000;
    return idle <= expiry ? { due: idle, idle: true } : { due: expiry, idle: false };
  }

  /** Retire an idle stream: its id is tombstoned and its next frame gets 408 once. */
  #retireIdle(session: ServerSession): void {
    const lastAudioAt = session.lastAudioAt;
    this.end(session, 'retired');
    const { idle } = this.#memoryOf(session.where, true);
    idle.set(`${session.kind}:${session.id}`, lastAudioAt);
    if (idle.size > MAX_REMEMBERED) {
      const oldest = idle.keys().next().value;
      if (oldest !== undefined) idle.delete(oldest);
    }
  }

  /** The first frame for a stream retired for idleness: 408 `SESSION_IDLE_TIMEOUT` (once). */
  #answerIdle(kind: SessionKind, id: string, where: SessionScope, now: number): void {
    const idle = this.#memoryOf(where, false)?.idle;
    const name = `${kind}:${id}`;
    const lastAudioAt = idle?.get(name);
    if (lastAudioAt === undefined) return;
    idle!.delete(name);
    const { sessionIdleSec } = this.#ctx.limits;
    throw reject('SESSION_IDLE_TIMEOUT', 'the stream was idle too long; start a new stream', {
      data: limitData('session_idle', sessionIdleSec, (now - lastAudioAt) / 1000),
    });
  }

  #memoryOf(where: SessionScope, create: true): ScopeMemory;
  #memoryOf(where: SessionScope, create: false): ScopeMemory | undefined;
  #memoryOf(where: SessionScope, create: boolean): ScopeMemory | undefined {
    const scope = where.key;
    let memory = this.#memory.get(scope);
    if (!memory && create) {
      memory = { retired: new Set(), ended: new Map(), idle: new Map() };
      this.#memory.set(scope, memory);
    }
    return memory;
  }

  /** How the stream with this id ended, if it did and is remembered. */
  #ended(kind: SessionKind, id: string, where: SessionScope): SessionEnd | undefined {
    const memory = this.#memoryOf(where, false);
    const name = `${kind}:${id}`;
    if (memory?.retired.has(name)) return 'retired';
    return memory?.ended.get(name);
  }

  #remember(kind: SessionKind, id: string, where: SessionScope, how: SessionEnd): void {
    const { retired, ended } = this.#memoryOf(where, true);
    const name = `${kind}:${id}`;
    ended.delete(name);
    if (how === 'retired') {
      retired.add(name);
      return;
    }
    ended.set(name, how);
    if (ended.size > MAX_REMEMBERED) {
      const oldest = ended.keys().next().value;
      if (oldest !== undefined) ended.delete(oldest);
    }
  }
}
