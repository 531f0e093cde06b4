// demuxTts(): a TTS 200 body (undelimited service frames) in, `{ final, pcm }` chunks out.

import { Transform, type TransformCallback } from 'node:stream';
import { type TtsChunk, TtsDemuxer, type TtsDemuxerOptions } from '../protocol/tts-frames.ts';

export interface DemuxTtsOptions extends TtsDemuxerOptions {
  /** The UUID sent as `id` in the TTS request. */
  requestId: string | Uint8Array;
}

/**
 * A Transform from TTS body bytes to `TtsChunk`s: PCM16LE 16 kHz mono in whole samples; the
 * last chunk has `final: true`. Ending without the final frame fails with
 * `IncompleteStreamError`; malformed bodies fail with `ProtocolError` (`ERR_TTS_FRAME`).
 */
export function demuxTts(options: DemuxTtsOptions): Transform {
  const demuxer = new TtsDemuxer(options.requestId, options);
  // A fresh array per call: truncating a reused one costs more than allocating.
  const pushAll = (stream: Transform, chunks: TtsChunk[]) => {
    for (let i = 0; i < chunks.length; i++) stream.push(chunks[i]);
  };
  return new Transform({
    readableObjectMode: true,
    transform(this: Transform, chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      try {
        pushAll(this, demuxer.push(chunk));
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
    flush(this: Transform, callback: TransformCallback) {
      try {
        pushAll(this, demuxer.end());
        callback();
      } catch (err) {
        callback(err as Error);
      }
    },
  });
}
