// The error of audio input that cannot be decoded as given: a corrupt or truncated container,
// or PCM that ends inside a sample.

import { SpeechpipeError } from '../protocol/errors.ts';

/** The code of a {@link MediaError}. */
export type MediaErrorCode =
  /** Bytes that break the container or codec (Ogg page, EBML element, Opus packet). */
  | 'ERR_MEDIA_FORMAT'
  /** The input ends inside a sample frame or a container element: it was cut. */
  | 'ERR_MEDIA_TRUNCATED';

export class MediaError extends SpeechpipeError {
  override name = 'MediaError';
  declare readonly code: MediaErrorCode;
  /** Byte offset in the input, where known. */
  readonly offset: number | undefined;

  constructor(code: MediaErrorCode, message: string, options: { offset?: number; cause?: unknown } = {}) {
    super(code, message, options);
    this.offset = options.offset;
  }
}
