// toWav(): PCM16LE in, a WAV file's bytes out, with a streaming header (sizes 0xFFFFFFFF) since
// the length is not known up front. For a seekable file, `wavFile()` patches the real sizes.

import { Transform, type TransformCallback } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { MediaError } from '../audio/media-error.ts';
import { checkPcmFormat, type PcmFormat } from '../audio/resampler.ts';
import { writeWavHeader } from '../protocol/riff.ts';
import { LIVE_SAMPLE_RATE } from '../protocol/socket-events.ts';

export interface WavFormatOptions {
  /** Default 16000. */
  sampleRate?: number;
  /** Default 1. */
  channels?: number;
}

export function checkWavFormat(name: string, options: WavFormatOptions): PcmFormat {
  return checkPcmFormat(name, {
    sampleRate: options.sampleRate ?? LIVE_SAMPLE_RATE,
    channels: options.channels ?? 1,
  });
}

/** The error for PCM that ends inside a sample frame. */
export function partialFrameError(pending: number, frameBytes: number): MediaError {
  return new MediaError(
    'ERR_MEDIA_TRUNCATED',
    `PCM16 input ends inside a sample frame (${pending} of ${frameBytes} bytes)`,
  );
}

/**
 * A Transform from PCM16LE to a WAV byte stream: a 44-byte header with sizes 0xFFFFFFFF (read
 * as "to the end of the file" by ffmpeg, sox and `parseWavHeader`), then the samples. PCM that
 * ends inside a sample frame fails with `MediaError` (`ERR_MEDIA_TRUNCATED`).
 */
export function toWav(options: WavFormatOptions = {}): Transform {
  const format = checkWavFormat('toWav', options);
  const aligner = new ByteAligner(2 * format.channels);
  let headerSent = false;
  const header = (stream: Transform) => {
    if (headerSent) return;
    headerSent = true;
    stream.push(writeWavHeader(format));
  };
  return new Transform({
    transform(this: Transform, chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      header(this);
      const whole = aligner.push(chunk);
      callback(null, whole.length > 0 ? whole : undefined);
    },
    flush(this: Transform, callback: TransformCallback) {
      header(this);
      if (aligner.pending > 0) callback(partialFrameError(aligner.pending, aligner.blockBytes));
      else callback();
    },
  });
}
