// The live input frame: the body of a framed HTTP POST and the payload of a Socket.IO audio
// frame. 16 bytes stream UUID, 1 flag byte, 1 language byte, then raw PCM16LE 16 kHz mono.

import { localServiceError } from './errors.ts';
import { isLanguage, LANGUAGES, type Language, languageFromByte } from './languages.ts';
import { bytesToUuid, idToBytes, isZeroUuid } from './uuid.ts';

/** Bytes before the PCM of a live input frame: 16 stream UUID, 1 flags, 1 language (interface, Live input frame). */
export const FRAME_HEADER_BYTES = 18;
/** Flag bit 0: the first frame of a stream. */
export const FRAME_FLAG_IS_START = 0b01;
/** Flag bit 1: the last frame of a stream carrying audio. */
export const FRAME_FLAG_IS_FINAL = 0b10;
/**
 * PCM of the frame that ends a stream nobody will finish (after a failure or an abort), or that
 * closes one whose source ended without marking its last frame: 20 ms of silence, since the
 * final frame must carry audio (an empty terminator is invalid).
 */
export const CLOSING_PCM_BYTES = 640;
/** PCM of a keepalive frame: 100 ms of silence, sent while a source stalls so the session does not expire. */
export const KEEPALIVE_PCM_BYTES = 3200;

const FRAME_RESERVED_FLAGS = 0xff & ~(FRAME_FLAG_IS_START | FRAME_FLAG_IS_FINAL);

/** One live input frame to encode with `encodeFrame`. */
export interface EncodeFrameInput {
  /** UUID string or 16 raw bytes; nonzero and the same for every frame of a stream. */
  streamId: string | Uint8Array;
  /** Set only on the first frame of a stream (also on a one-frame stream); default false. */
  isStart?: boolean;
  /** Set only on the last frame carrying audio (also on a one-frame stream); default false. */
  isFinal?: boolean;
  /** Language of the stream; its byte is written to byte 17. */
  language: Language;
  /** Nonempty PCM16LE, 16 kHz mono, even byte count. */
  pcm: Uint8Array;
}

/** A decoded, validated live input frame, as `decodeFrame` returns it. */
export interface LiveFrame {
  /** The stream UUID as a lower-case string. */
  streamId: string;
  /** The 16 UUID bytes (a view into the decoded buffer). */
  streamIdBytes: Buffer;
  /** Flag bit 0: the first frame of the stream. */
  isStart: boolean;
  /** Flag bit 1: the last frame carrying audio. */
  isFinal: boolean;
  /** The language the frame's language byte names. */
  language: Language;
  /** The PCM16LE payload (a view into the decoded buffer). */
  pcm: Buffer;
}

/**
 * Encode one live input frame. Refuses, with the code the service would answer, anything the
 * service would reject: a zero UUID, an unknown language, empty or odd-length PCM.
 */
export function encodeFrame(input: EncodeFrameInput): Buffer {
  const id =
    typeof input.streamId === 'string' || input.streamId.length !== 16
      ? idToBytes(input.streamId)
      : input.streamId;
  if (isZeroUuid(id)) throw localServiceError('VALIDATION_FILE_CORRUPT', 'stream UUID must be nonzero');
  // isLanguage, not a plain lookup: `toString` and other prototype keys are not languages.
  if (!isLanguage(input.language)) {
    throw localServiceError(
      'VALIDATION_INVALID_LANGUAGE',
      `unknown language ${JSON.stringify(input.language)}`,
    );
  }
  const { pcm } = input;
  if (pcm.length === 0) throw localServiceError('VALIDATION_FILE_CORRUPT', 'a frame must carry PCM');
  if (pcm.length % 2 !== 0) {
    throw localServiceError('VALIDATION_INVALID_FORMAT', `PCM16 byte count must be even, got ${pcm.length}`);
  }
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + pcm.length);
  out.set(id, 0);
  out[16] = (input.isStart ? FRAME_FLAG_IS_START : 0) | (input.isFinal ? FRAME_FLAG_IS_FINAL : 0);
  out[17] = LANGUAGES[input.language];
  out.set(pcm, FRAME_HEADER_BYTES);
  return out;
}

/**
 * Decode and validate one live input frame, rejecting exactly what the service rejects:
 * short header, zero UUID or empty PCM (`VALIDATION_FILE_CORRUPT`), reserved flag bits or odd
 * PCM byte count (`VALIDATION_INVALID_FORMAT`), unknown language byte
 * (`VALIDATION_INVALID_LANGUAGE`). The thrown error is a `SpeechServiceError` with status 400.
 */
export function decodeFrame(bytes: Uint8Array): LiveFrame {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (buf.length < FRAME_HEADER_BYTES) {
    throw localServiceError(
      'VALIDATION_FILE_CORRUPT',
      `frame shorter than its ${FRAME_HEADER_BYTES}-byte header (${buf.length} bytes)`,
    );
  }
  if (isZeroUuid(buf, 0)) throw localServiceError('VALIDATION_FILE_CORRUPT', 'stream UUID is all zero');
  const flags = buf[16]!;
  if ((flags & FRAME_RESERVED_FLAGS) !== 0) {
    throw localServiceError(
      'VALIDATION_INVALID_FORMAT',
      `reserved flag bits set (flags 0x${flags.toString(16)})`,
    );
  }
  const language = languageFromByte(buf[17]!);
  if (language === undefined) {
    throw localServiceError('VALIDATION_INVALID_LANGUAGE', `unknown language byte ${buf[17]}`);
  }
  const pcmBytes = buf.length - FRAME_HEADER_BYTES;
  if (pcmBytes === 0) throw localServiceError('VALIDATION_FILE_CORRUPT', 'frame carries no PCM');
  if (pcmBytes % 2 !== 0) {
    throw localServiceError('VALIDATION_INVALID_FORMAT', `PCM16 byte count must be even, got ${pcmBytes}`);
  }
  return {
    streamId: bytesToUuid(buf, 0),
    streamIdBytes: buf.subarray(0, 16),
    isStart: (flags & FRAME_FLAG_IS_START) !== 0,
    isFinal: (flags & FRAME_FLAG_IS_FINAL) !== 0,
    language,
    pcm: buf.subarray(FRAME_HEADER_BYTES),
  };
}
