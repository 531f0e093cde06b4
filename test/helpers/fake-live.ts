// A live service in the test's own process, behind fake channels: real LiveSessions (and so the
// real retry policy) talk to it through the LiveChannel interface, with no socket, no HTTP and no
// emulator process. Its records come from the emulator's own engines, so the words are the ones
// the emulator would give for the same audio; faults are scripted per frame. The sessions take
// their slots from a real Admission, so a test sees the slots they hold.

import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Admission } from '../../src/client/admission.ts';
import { RetryPolicy } from '../../src/client/attempts.ts';
import { LiveSession, type LiveSessionOptions } from '../../src/client/live.ts';
import type { ChannelFactory, ChannelListener, LiveChannel } from '../../src/client/live-channel.ts';
import type { LiveKind } from '../../src/client/live-types.ts';
import { LiveAsrEngine, LiveDiarizationEngine } from '../../src/emulator/engine/live.ts';
import {
  IncompleteStreamError,
  localServiceError,
  type SpeechServiceError,
  TransportError,
} from '../../src/protocol/errors.ts';
import { decodeFrame, type LiveFrame } from '../../src/protocol/frame.ts';
import { DEFAULT_LIMITS } from '../../src/protocol/limits.ts';
import type { AsrRecord, DiarizationRecord, WordSegment } from '../../src/protocol/records.ts';
import {
  diarizationStream,
  type LiveSessionFactory,
  type LiveStreamOptions,
  type LiveTranscriptionStream,
  type LostAudio,
  type SessionChange,
  sttStream,
} from '../../src/transforms/live-stream.ts';
import { toFrames } from '../../src/transforms/to-frames.ts';

/** What a fault does to the frame it matches. */
export type FakeFaultAction =
  /** The frame is refused: not accepted, the stream stays as it was (a 429, a 5xx before effect). */
  | { type: 'refuse'; error: SpeechServiceError }
  /** The frame is accepted, then its answer breaks off before any record. */
  | { type: 'cut' }
  /** The service takes the frame, but the client hears a lost connection (a reset after effect). */
  | { type: 'lost' }
  /** The final frame is accepted and its records come, but the final record never does. */
  | { type: 'dropFinal' }
  /**
   * A frame that is not final is accepted, and the service ends the stream there: its answer
   * holds the stream's last records, the final record included (a service that retired it).
   */
  | { type: 'finalEarly' }
  /** The frame is accepted; its records come, followed by each of these (as the service sent them). */
  | { type: 'extra'; records: (stream: string) => unknown[] }
  /** The frame is never answered: the send waits until it is aborted or the channel cancelled. */
  | { type: 'stall' };

/** A scripted fault: frames are counted from 1 over the whole service, as they arrive. */
export interface FakeFault {
  /** Acts from the n-th matching frame on. Default 1. */
  nth?: number;
  /** Times it acts. Default 1. */
  times?: number;
  /** Which frames it matches. Default every frame. */
  match?: (frame: LiveFrame) => boolean;
  action: FakeFaultAction;
}

interface ActiveFault extends FakeFault {
  seen: number;
  applied: number;
}

/** What the fake service counted. */
export interface FakeStats {
  /** Frames that reached it (refused ones too). */
  frames: number;
  /** Frames it accepted. */
  accepted: number;
  /** Streams started, ended by their final record, cancelled by their client. */
  started: number;
  finished: number;
  cancelled: number;
  /** Streams that expired: a frame came after `expiryMs` without one. */
  expired: number;
  /** Streams live now (started, not finished, cancelled, cut or expired). */
  live: number;
  /** Channels opened and not closed. */
  channelsOpen: number;
}

interface Stream {
  engine: LiveAsrEngine | LiveDiarizationEngine;
  over: boolean;
  /** When it last accepted a frame (performance.now()). */
  lastFrameAt: number;
}

/** How the fake service behaves besides its scripted faults. */
export interface FakeLiveOptions {
  /**
   * A stream that gets no frame for this long expires: its next frame is refused with
   * SESSION_EXPIRED (409), as the service's session expiry does. The service's expiry is a
   * timer; this one is seen when the next frame comes, which is all a client can tell apart.
   * Default none.
   */
  expiryMs?: number;
  /** Each frame is answered this long after it came (a slow service). Default the next turn. */
  delayMs?: number;
}

export class FakeLiveService {
  readonly stats: FakeStats = {
    frames: 0,
    accepted: 0,
    started: 0,
    finished: 0,
    cancelled: 0,
    expired: 0,
    live: 0,
    channelsOpen: 0,
  };
  readonly options: FakeLiveOptions;
  /** The sessions' admission slots (the client's own Admission, default plan limits). */
  readonly admission = new Admission();
  readonly #faults: ActiveFault[] = [];
  /** PCM accepted per stream id, in order (what each session heard). */
  readonly heard = new Map<string, Buffer[]>();

  constructor(options: FakeLiveOptions = {}) {
    this.options = options;
  }

  /** Admission slots the sessions hold now (of `realtime_asr` or `diarization`). */
  running(workload: 'realtime_asr' | 'diarization' = 'realtime_asr'): number {
    return this.admission.stats().find((s) => s.workload === workload)!.running;
  }

  /** Add a fault; returns its removal. */
  fault(fault: FakeFault): () => void {
    const active: ActiveFault = { ...fault, seen: 0, applied: 0 };
    this.#faults.push(active);
    return () => this.#faults.splice(this.#faults.indexOf(active), 1);
  }

  /** The channel factory of a LiveSession's deps. */
  readonly channel: ChannelFactory = (kind, _transport, listener) => new FakeChannel(this, kind, listener);

  /**
   * A session factory for sttStream({ sessions }): real LiveSessions over this service's
   * channels, with the client's retry policy (quick backoff) and this service's admission.
   */
  sessions(defaults: LiveSessionOptions = {}): LiveSessionFactory {
    const { admission } = this;
    const policy = new RetryPolicy({ admission, retry: { baseMs: 1, maxMs: 5 } });
    return (<K extends LiveKind>(kind: K, options: LiveSessionOptions) =>
      new LiveSession(
        kind,
        { channel: this.channel, policy, admission, limits: DEFAULT_LIMITS },
        { ...defaults, ...options },
      )) as LiveSessionFactory;
  }

  /** The fault acting on `frame`, if any (counts it as applied). */
  faultFor(frame: LiveFrame): FakeFaultAction | undefined {
    for (const f of this.#faults) {
      if (f.match && !f.match(frame)) continue;
      f.seen++;
      if (f.seen < (f.nth ?? 1) || f.applied >= (f.times ?? 1)) continue;
      f.applied++;
      return f.action;
    }
    return undefined;
  }

  /** The stream a frame belongs to, started by its start frame. */
  stream(frame: LiveFrame, kind: LiveKind, streams: Map<string, Stream>): Stream | SpeechServiceError {
    const known = streams.get(frame.streamId);
    if (frame.isStart) {
      if (known && !known.over) return localServiceError('SESSION_EXPIRED', 'is_start for a live stream');
      const engine =
        kind === 'stt'
          ? new LiveAsrEngine(frame.streamId, frame.language)
          : new LiveDiarizationEngine(frame.streamId);
      const stream = { engine, over: false, lastFrameAt: performance.now() };
      streams.set(frame.streamId, stream);
      this.stats.started++;
      this.stats.live++;
      return stream;
    }
    if (!known || known.over) return localServiceError('SESSION_EXPIRED', 'no live stream with that id');
    const { expiryMs } = this.options;
    if (expiryMs !== undefined && performance.now() - known.lastFrameAt > expiryMs) {
      this.end(known, 'expired');
      return localServiceError('SESSION_EXPIRED', 'the live stream expired');
    }
    return known;
  }

  end(stream: Stream, how: 'finished' | 'cancelled' | 'cut' | 'expired'): void {
    if (stream.over) return;
    stream.over = true;
    this.stats.live--;
    if (how !== 'cut') this.stats[how]++;
  }
}

/** One stream's link to the fake service (a channel per session, as the real ones). */
class FakeChannel implements LiveChannel {
  readonly #service: FakeLiveService;
  readonly #kind: LiveKind;
  readonly #listener: ChannelListener;
  readonly #streams = new Map<string, Stream>();
  #current: Stream | undefined;
  #paused = false;
  #queue: unknown[] = [];
  #closed = false;
  /** Ends a stalled send when the channel is cancelled or closed. */
  #stalls = new Set<(err: Error) => void>();

  constructor(service: FakeLiveService, kind: LiveKind, listener: ChannelListener) {
    this.#service = service;
    this.#kind = kind;
    this.#listener = listener;
    service.stats.channelsOpen++;
  }

  async send(bytes: Buffer, signal: AbortSignal): Promise<void> {
    // A turn of the event loop (or the service's delay), as a network answer takes: the records
    // of earlier frames (delivered on a later turn) reach the session before this frame is accepted.
    const { delayMs } = this.#service.options;
    if (delayMs) await sleep(delayMs, undefined, { signal });
    else await new Promise((resolve) => setImmediate(resolve));
    signal.throwIfAborted();
    if (this.#closed) throw new Error('fake channel closed');
    const frame = decodeFrame(bytes); // refuses what the service would
    const service = this.#service;
    service.stats.frames++;
    const fault = service.faultFor(frame);
    if (fault?.type === 'refuse') throw fault.error;
    if (fault?.type === 'stall') {
      await new Promise<never>((_, reject) => {
        const stop = (err: Error) => {
          this.#stalls.delete(stop);
          signal.removeEventListener('abort', onAbort);
          reject(err);
        };
        const onAbort = () => stop(signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
        this.#stalls.add(stop);
      });
    }
    const stream = service.stream(frame, this.#kind, this.#streams);
    if (!('engine' in stream)) throw stream;
    this.#current = stream;
    stream.lastFrameAt = performance.now();
    service.stats.accepted++;
    const heard = service.heard.get(frame.streamId) ?? [];
    heard.push(Buffer.from(frame.pcm));
    service.heard.set(frame.streamId, heard);
    if (fault?.type === 'cut' || fault?.type === 'lost') {
      service.end(stream, 'cut');
      if (fault.type === 'lost')
        throw new TransportError('ERR_CONNECTION_RESET', 'fake: connection lost', { ambiguous: true });
      setImmediate(() =>
        this.#listener.failed(new IncompleteStreamError('fake: the answer broke off', { received: 0 })),
      );
      return;
    }
    const records: unknown[] = stream.engine.push(frame.pcm);
    if (fault?.type === 'extra') records.push(...fault.records(frame.streamId));
    if (frame.isFinal || fault?.type === 'finalEarly') {
      const last = stream.engine.finish();
      if (fault?.type === 'dropFinal') records.push(...last.filter((r) => !r.is_final));
      else {
        records.push(...last);
        service.end(stream, 'finished');
      }
    }
    // Records come after the frame was accepted, as an answer's body after its headers.
    setImmediate(() => {
      this.#queue.push(...records);
      this.#flush();
    });
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#flush();
  }

  async cancel(): Promise<void> {
    // A turn of the event loop, as ending a stream at the service takes (a closing frame
    // answered, a connection closed).
    await new Promise((resolve) => setImmediate(resolve));
    if (this.#current) this.#service.end(this.#current, 'cancelled');
    this.close();
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#service.stats.channelsOpen--;
    for (const stop of [...this.#stalls]) stop(new Error('fake channel closed'));
  }

  #flush(): void {
    while (!this.#paused && !this.#closed && this.#queue.length > 0)
      this.#listener.record(this.#queue.shift());
  }
}

/** What a stream run through the fake service gave: its records, words, session changes, losses. */
export interface FakeRun {
  records: (AsrRecord | DiarizationRecord)[];
  words: WordSegment[];
  changes: SessionChange[];
  lost: LostAudio[];
  error: unknown;
  stream: LiveTranscriptionStream;
}

/**
 * `pcm` through toFrames (`frameMs`, default 250) and sttStream or diarizationStream on
 * `service`'s sessions, into a sink that keeps everything: the pipeline's error, not a throw.
 */
export async function runThroughFake(
  pcm: Buffer,
  service: FakeLiveService,
  options: Partial<LiveStreamOptions> & {
    kind?: 'stt' | 'diarization';
    frameMs?: number;
    finalTimeoutMs?: number;
  } = {},
): Promise<FakeRun> {
  const { kind = 'stt', frameMs = 250, finalTimeoutMs = 100, ...rest } = options;
  const make = kind === 'stt' ? sttStream : diarizationStream;
  const stream = make({
    sessions: service.sessions({ finalTimeoutMs, endTimeoutMs: 100 }),
    coalesceMs: 0,
    restartBackoff: { baseMs: 1, maxMs: 5 },
    ...rest,
  });
  const out: FakeRun = { records: [], words: [], changes: [], lost: [], error: undefined, stream };
  stream.on('session', (c: SessionChange) => out.changes.push(c));
  stream.on('audio-lost', ({ start_time, end_time }: LostAudio) => out.lost.push({ start_time, end_time }));
  out.error = await pipeline(
    Readable.from([pcm]),
    toFrames({ language: 'en', frameMs }),
    stream,
    new Writable({
      objectMode: true,
      write(record: AsrRecord | DiarizationRecord, _e, cb) {
        out.records.push(record);
        if ('words' in record && (record.is_speech_final || record.is_final)) out.words.push(...record.words);
        cb();
      },
    }),
  ).then(
    () => undefined,
    (err: unknown) => err,
  );
  return out;
}
