// demuxTts(): a TTS 200 body (undelimited service frames) in, `{ final, pcm }` chunks out.

import type { Transform } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';
import { type TtsChunk, TtsDemuxer, type TtsDemuxerOptions } from '../protocol/tts-frames.ts';
import { coreTransform } from './core-transform.ts';

/** Options of {@link demuxTts}. */
export interface DemuxTtsOptions extends TtsDemuxerOptions {
  /** The UUID sent as `id` in the TTS request. */
  requestId: string | Uint8Array;
}

/**
 * A Transform from TTS body bytes to `TtsChunk`s: PCM16LE 16 kHz mono in whole samples; the
 * last chunk has `final: true`. Ending without the final frame fails with
 * `IncompleteStreamError`; malformed bodies fail with `ProtocolError` (`ERR_TTS_FRAME`). The
 * whole samples before the failure are passed on first, however the body was split into reads.
 */
export function demuxTts(options: DemuxTtsOptions): Transform {
  if (options?.requestId === undefined)
    throw new InvalidArgumentError('demuxTts: options.requestId (the request UUID) is required');
  const demuxer = new TtsDemuxer(options.requestId, options);
  return coreTransform(
    { push: (chunk: Buffer, out: TtsChunk[]) => demuxer.push(chunk, out), end: (out) => demuxer.end(out) },
    { readableObjectMode: true },
  );
}
