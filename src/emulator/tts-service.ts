// TTS shared by HTTP and Socket.IO: after the body rules of `checkTtsRequest`, the voice lookup,
// content policy, model and admission; then timed synthesis with the non-resetting deadline
// before output, and the cutting of PCM into pieces of varying size.

import type { OperationName } from '../protocol/operations.ts';
import { countCodePoints, type TtsCheck, type TtsRequestBody } from '../protocol/tts-request.ts';
import type { Admit, Release } from './admission.ts';
import type { EmulatorContext } from './context.ts';
import { synthesize } from './engine/tts.ts';
import { type FaultPlan, failureRejection, type PlannedFault } from './faults.ts';
import { Rejection, reject } from './rejection.ts';
import type { EmulatorKey } from './types.ts';
import { DEFAULT_VOICE, type VoiceProfile, voiceById } from './voices.ts';

export interface AdmittedTts {
  body: TtsRequestBody;
  voice: VoiceProfile;
  release: Release;
}

/** Everything after the body rules, in order, then admission; a rejection here takes nothing. */
export function admitTts(ctx: EmulatorContext, check: TtsCheck, key: EmulatorKey, admit: Admit): AdmittedTts {
  if (!check.ok) {
    const r = check.rejection;
    throw new Rejection(
      r.code,
      r.data ? { status: r.status, detail: r.detail, data: r.data } : { status: r.status, detail: r.detail },
    );
  }
  const body = check.body;
  let voice = DEFAULT_VOICE;
  if (body.voice_id !== undefined) {
    const found = voiceById(body.voice_id);
    if (!found) throw reject('TTS_VOICE_NOT_FOUND', 'voice_id names no available voice');
    voice = found;
  }
  if (!ctx.contentPolicy(body.text))
    throw reject('TTS_INPUT_NOT_ALLOWED', 'the text was rejected by the content policy');
  const model = body.model ?? ctx.ttsModels[0]!;
  if (!ctx.ttsModels.includes(model))
    throw reject('VALIDATION_INVALID_PARAM', `unknown TTS model ${JSON.stringify(model)}`);
  const release = admit(() => ctx.concurrency.acquire(key.account, 'tts'));
  return { body, voice, release };
}

/**
 * Start the synthesis of an admitted request (both transports): the `fail` fault, then the
 * synthesis up to its first audio. A failure before output is 500 `TTS_SYNTHESIS_FAILED` unless
 * it is a rejection already (the deadline) or the client is gone.
 */
export async function beginSpeech(
  ctx: EmulatorContext,
  admitted: AdmittedTts,
  how: { op: OperationName; plan: FaultPlan; sampleRate: number; signal: AbortSignal; gone: () => boolean },
): Promise<AsyncGenerator<Buffer>> {
  if (how.plan.fail) throw failureRejection(how.op);
  ctx.stats.ttsSyntheses++;
  try {
    return await startSynthesis(ctx, admitted.body.text, admitted.voice, how.sampleRate, how.signal);
  } catch (err) {
    if (err instanceof Rejection || how.gone()) throw err;
    throw new Rejection('TTS_SYNTHESIS_FAILED', { detail: `synthesis failed: ${(err as Error).message}` });
  }
}

/**
 * Send synthesized speech (both transports): pieces of varying size, then the final piece. The
 * final piece carries the leftover PCM when the text has an even number of code points; else
 * the leftover goes in a normal piece and the final piece is empty. `truncate` (the truncateTts
 * fault) withholds the final piece; a synthesis failure after output began ends the output
 * without it. `send` returns false once the answer is over.
 */
export async function sendSpeech(
  chunks: AsyncIterable<Buffer>,
  text: string,
  sampleRate: number,
  truncate: PlannedFault | undefined,
  send: (pcm: Buffer, final: boolean) => Promise<boolean>,
): Promise<void> {
  const cutter = new PieceCutter(sampleRate);
  try {
    for await (const pcm of chunks) {
      for (const piece of cutter.push(pcm)) if (!(await send(piece, false))) return;
    }
  } catch {
    return; // a failure after output began: no final piece (and no error appended)
  }
  const rest = cutter.flush();
  const finalCarriesPcm = countCodePoints(text) % 2 === 0;
  if (rest.length > 0 && !finalCarriesPcm && !(await send(rest, false))) return;
  if (truncate?.claim()) return;
  await send(finalCarriesPcm ? rest : Buffer.alloc(0), true);
}

/** The synthesis deadline passed before any audio was ready. */
export const deadlineRejection = (ms: number): Rejection =>
  reject('TTS_DEADLINE_EXCEEDED', `no audio within the ${ms / 1000} s synthesis deadline`, { status: 504 });

/**
 * Synthesis paced by the latency model. The first chunk must come within the deadline (which
 * does not reset); the returned iterator then yields the first chunk and the rest.
 */
export async function startSynthesis(
  ctx: EmulatorContext,
  text: string,
  voice: VoiceProfile,
  sampleRate: number,
  signal: AbortSignal,
): Promise<AsyncGenerator<Buffer>> {
  const stop = new AbortController();
  const both = AbortSignal.any([signal, stop.signal]);
  const gen = timed(ctx, text, voice, sampleRate, both);
  const deadlineMs = ctx.limits.ttsSynthesisDeadlineMs;
  const firstNext = gen.next();
  firstNext.catch(() => {});
  const first = await ctx.lifecycle.within(firstNext, deadlineMs, both);
  if (typeof first !== 'object') {
    stop.abort(new Error('synthesis stopped'));
    if (first === 'timeout') throw deadlineRejection(deadlineMs);
    throw signal.reason ?? new Error('synthesis stopped');
  }
  return (async function* () {
    try {
      if (!first.value.done) yield first.value.value;
      yield* gen;
    } finally {
      stop.abort(new Error('synthesis ended'));
    }
  })();
}

async function* timed(
  ctx: EmulatorContext,
  text: string,
  voice: VoiceProfile,
  sampleRate: number,
  signal: AbortSignal,
): AsyncGenerator<Buffer> {
  await ctx.lifecycle.sleep(ctx.perRequestMs, signal);
  const source = synthesize({
    text,
    voice,
    sampleRate,
    engine: ctx.ttsEngine,
    lifecycle: ctx.lifecycle,
    signal,
  });
  for await (const pcm of source) {
    await ctx.lifecycle.sleep(ctx.audioDelayMs(pcm.length / 2 / sampleRate), signal);
    yield pcm;
  }
}

/** Piece lengths in milliseconds, cycled: frames and events of varying size. */
const PIECE_MS = [100, 150, 50, 200, 75, 125];

/** Cuts PCM into pieces of varying (deterministic) size. */
export class PieceCutter {
  readonly #sizes: number[];
  #next = 0;
  #buffered: Buffer[] = [];
  #bufferedBytes = 0;

  constructor(sampleRate: number) {
    this.#sizes = PIECE_MS.map((ms) => Math.round((ms * sampleRate) / 1000) * 2);
  }

  /**
   * The whole pieces `pcm` completes. What is buffered is joined once per push and the pieces
   * are views into it: joining it again for every piece copied a large chunk once per piece
   * (the synthetic voice gives a word without spaces as one chunk: 1000 code points of Japanese
   * held the event loop, every account's requests, 0.4 s, and 2000 of them 3.5 s).
   */
  push(pcm: Buffer): Buffer[] {
    this.#buffered.push(pcm);
    this.#bufferedBytes += pcm.length;
    const out: Buffer[] = [];
    if (this.#bufferedBytes < this.#sizes[this.#next]!) return out;
    const all =
      this.#buffered.length === 1 ? this.#buffered[0]! : Buffer.concat(this.#buffered, this.#bufferedBytes);
    let at = 0;
    for (let size = this.#sizes[this.#next]!; all.length - at >= size; size = this.#sizes[this.#next]!) {
      out.push(all.subarray(at, at + size));
      at += size;
      this.#next = (this.#next + 1) % this.#sizes.length;
    }
    this.#buffered = at < all.length ? [all.subarray(at)] : [];
    this.#bufferedBytes = all.length - at;
    return out;
  }

  /** What is left (possibly empty). */
  flush(): Buffer {
    const rest = Buffer.concat(this.#buffered, this.#bufferedBytes);
    this.#buffered = [];
    this.#bufferedBytes = 0;
    return rest;
  }
}
