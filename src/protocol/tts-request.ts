// The TTS request body and every validation rule of the interface, each mapped to the status
// and code the service gives. Shared by client pre-flight and the emulator, so both agree.

import type { LimitData } from './errors.ts';
import { DEFAULT_LIMITS, type Limits, ttsInputLimit } from './limits.ts';
import { parseWavHeader } from './riff.ts';
import { isUuid } from './uuid.ts';
import { isObject } from './validate.ts';

/** A reference recording for voice cloning (`voice_references[0]`). */
export interface TtsVoiceReference {
  /** Standard base64 of a RIFF/WAVE file holding nonempty mono PCM16. */
  audio: string;
  /** Transcript of the reference audio. */
  text: string;
}

/** The TTS request body (interface, TTS request body); JSON over HTTP, the payload of `tts_request` over Socket.IO. */
export interface TtsRequestBody {
  /** Fresh UUID per request. */
  id: string;
  /**
   * Text to speak: at least one Unicode letter or number after trimming; whitespace around it is
   * kept and counted; length in code points (limit `Limits.ttsInputCharacters` of the tier).
   */
  text: string;
  /** Clients should send `nebula` explicitly. */
  model?: string;
  /** UUID of a listed voice; exclusive with `voice_references`. */
  voice_id?: string;
  /** Exactly one reference when present (an empty array is invalid); exclusive with `voice_id`. */
  voice_references?: TtsVoiceReference[];
}

/** Model the client sends when none is given: `nebula`, the interface's fallback, which it tells clients to send explicitly. */
export const DEFAULT_TTS_MODEL = 'nebula';

/** Why the service would reject a TTS request: status, code and detail as it would answer. */
export interface TtsRejection {
  /** HTTP status the service would answer (400, 413 or 422). */
  status: number;
  /** Error code the service would answer (see `ERROR_CODES`). */
  code: string;
  /** Human-readable reason. */
  detail: string;
  /** Present on limit rejections that carry `data`. */
  data?: LimitData;
}

/** The limits TTS validation reads. */
export type TtsLimits = Pick<
  Limits,
  | 'ttsRequestBytes'
  | 'ttsInputCharacters'
  | 'ttsVoiceReferenceTextCharacters'
  | 'ttsVoiceReferenceCount'
  | 'ttsVoiceReferenceBytes'
  | 'ttsVoiceReferenceDurationSec'
>;

/** Options of `checkTtsRequest`. */
export interface CheckTtsOptions {
  /** Account tier; missing or unknown uses the free limit. */
  tier?: string | undefined;
  /** Limits to apply; default `DEFAULT_LIMITS`. */
  limits?: TtsLimits;
  /** Size of the serialized body, when known (413 above `ttsRequestBytes`). */
  bodyBytes?: number;
}

/** Result of `checkTtsRequest`: the typed body, or the service's rejection. */
export type TtsCheck = { ok: true; body: TtsRequestBody } | { ok: false; rejection: TtsRejection };

/** Length in Unicode code points (what the text limits count). */
export function countCodePoints(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

const LETTER_OR_NUMBER = /[\p{L}\p{N}]/u;

/** Whether `text` holds something to speak: a letter or a number (the service refuses text without). */
export function hasSpeakableText(text: string): boolean {
  return LETTER_OR_NUMBER.test(text);
}
/**
 * Standard base64 with its padding: a length divisible by 4, the alphabet, at most two `=` at the
 * end. Not one regular expression with a repeated group of four: its backtracking overflowed on
 * a string of some 4.5 million characters (a reference of 3.2 MiB) and threw a RangeError.
 */
const BASE64_ALPHABET = /^[A-Za-z0-9+/]*={0,2}$/;
const isStandardBase64 = (text: string): boolean => text.length % 4 === 0 && BASE64_ALPHABET.test(text);

/** Decoded size of standard base64 text, from its length alone. */
export function base64DecodedBytes(b64: string): number {
  const padding = b64.endsWith('==') ? 2 : b64.endsWith('=') ? 1 : 0;
  return Math.floor((b64.length * 3) / 4) - padding;
}

const reject = (status: number, code: string, detail: string, data?: LimitData): TtsCheck => ({
  ok: false,
  rejection: data ? { status, code, detail, data } : { status, code, detail },
});

function limitData(bound: string, unit: string, limit: number, observed: number): LimitData {
  return { limit, observed, unit, bound };
}

/**
 * Check a TTS request body as the service does, in this order: body size (413), shape and
 * `id` (400 `VALIDATION_INVALID_FORMAT`), text (400 `VALIDATION_REQUIRED_FIELD`), voice
 * selectors (400 `VALIDATION_INVALID_PARAM`), reference count (422), reference size from its
 * base64 length (413), reference audio and transcript (400), `voice_id` (400
 * `VALIDATION_INVALID_UUID`), then text and reference limits (422). Voice lookup and content
 * policy need the service's data and are not checked here.
 */
export function checkTtsRequest(body: unknown, options: CheckTtsOptions = {}): TtsCheck {
  const limits = options.limits ?? DEFAULT_LIMITS;
  if (options.bodyBytes !== undefined && options.bodyBytes > limits.ttsRequestBytes) {
    return reject(
      413,
      'PAYLOAD_TOO_LARGE',
      `request body of ${options.bodyBytes} bytes exceeds ${limits.ttsRequestBytes}`,
    );
  }
  if (!isObject(body)) return reject(400, 'VALIDATION_INVALID_FORMAT', 'request body must be a JSON object');
  if (!isUuid(body.id)) return reject(400, 'VALIDATION_INVALID_FORMAT', '`id` must be a UUID string');

  if (!Object.hasOwn(body, 'text') || body.text === null) {
    return reject(400, 'VALIDATION_REQUIRED_FIELD', '`text` is required');
  }
  if (typeof body.text !== 'string')
    return reject(400, 'VALIDATION_INVALID_FORMAT', '`text` must be a string');
  const text = body.text;
  if (text.trim() === '')
    return reject(400, 'VALIDATION_REQUIRED_FIELD', '`text` is empty or whitespace-only');
  if (!LETTER_OR_NUMBER.test(text)) {
    return reject(400, 'VALIDATION_REQUIRED_FIELD', '`text` must contain at least one letter or number');
  }
  if (Object.hasOwn(body, 'model') && (typeof body.model !== 'string' || body.model === '')) {
    return reject(400, 'VALIDATION_INVALID_FORMAT', '`model` must be a nonempty string');
  }

  const hasVoiceId = Object.hasOwn(body, 'voice_id') && body.voice_id !== undefined;
  const hasRefs = Object.hasOwn(body, 'voice_references') && body.voice_references !== undefined;
  if (hasVoiceId && hasRefs) {
    return reject(400, 'VALIDATION_INVALID_PARAM', '`voice_id` and `voice_references` are exclusive');
  }
  let reference: TtsVoiceReference | undefined;
  let referenceSeconds = 0;
  if (hasRefs) {
    const refs = body.voice_references;
    if (!Array.isArray(refs))
      return reject(400, 'VALIDATION_INVALID_FORMAT', '`voice_references` must be an array');
    if (refs.length === 0) {
      return reject(400, 'VALIDATION_INVALID_PARAM', '`voice_references` is empty; omit the field instead');
    }
    if (refs.length > limits.ttsVoiceReferenceCount) {
      return reject(
        422,
        'VOICE_REFERENCE_COUNT_EXCEEDED',
        `${refs.length} voice references; at most ${limits.ttsVoiceReferenceCount}`,
        limitData('tts_voice_reference_count', 'references', limits.ttsVoiceReferenceCount, refs.length),
      );
    }
    const ref: unknown = refs[0];
    if (!isObject(ref))
      return reject(400, 'VALIDATION_INVALID_FORMAT', '`voice_references[0]` must be an object');
    if (typeof ref.audio !== 'string' || ref.audio === '') {
      return reject(400, 'VALIDATION_REQUIRED_FIELD', '`voice_references[0].audio` is required');
    }
    const decodedBytes = base64DecodedBytes(ref.audio);
    if (decodedBytes > limits.ttsVoiceReferenceBytes) {
      return reject(
        413,
        'PAYLOAD_TOO_LARGE',
        `reference audio of ${decodedBytes} bytes exceeds ${limits.ttsVoiceReferenceBytes}`,
        limitData('tts_voice_reference_bytes', 'bytes', limits.ttsVoiceReferenceBytes, decodedBytes),
      );
    }
    const audio = checkReferenceAudio(ref.audio);
    if (typeof audio === 'string') return reject(400, 'VALIDATION_INVALID_FORMAT', audio);
    if (typeof ref.text !== 'string' || ref.text.trim() === '') {
      return reject(
        400,
        'VALIDATION_REQUIRED_FIELD',
        '`voice_references[0].text` (the transcript) is required',
      );
    }
    reference = { audio: ref.audio, text: ref.text };
    referenceSeconds = audio.seconds;
  }
  if (hasVoiceId && !isUuid(body.voice_id)) {
    return reject(400, 'VALIDATION_INVALID_UUID', '`voice_id` must be a UUID');
  }

  const textLimit = ttsInputLimit(limits, options.tier);
  const textLength = countCodePoints(text);
  if (textLength > textLimit) {
    return reject(
      422,
      'CHARACTER_COUNT_EXCEEDED',
      `text of ${textLength} characters exceeds ${textLimit}`,
      limitData('tts_input_characters', 'characters', textLimit, textLength),
    );
  }
  if (reference) {
    const refLength = countCodePoints(reference.text);
    if (refLength > limits.ttsVoiceReferenceTextCharacters) {
      return reject(
        422,
        'CHARACTER_COUNT_EXCEEDED',
        `reference transcript of ${refLength} characters exceeds ${limits.ttsVoiceReferenceTextCharacters}`,
        limitData(
          'tts_voice_reference_text_characters',
          'characters',
          limits.ttsVoiceReferenceTextCharacters,
          refLength,
        ),
      );
    }
    if (referenceSeconds > limits.ttsVoiceReferenceDurationSec) {
      return reject(
        422,
        'AUDIO_DURATION_EXCEEDED',
        `reference audio of ${referenceSeconds.toFixed(3)} s exceeds ${limits.ttsVoiceReferenceDurationSec} s`,
        limitData(
          'tts_voice_reference_duration',
          'seconds',
          limits.ttsVoiceReferenceDurationSec,
          Math.ceil(referenceSeconds),
        ),
      );
    }
  }

  const out: TtsRequestBody = { id: body.id, text };
  if (typeof body.model === 'string') out.model = body.model;
  if (hasVoiceId) out.voice_id = body.voice_id as string;
  if (reference) out.voice_references = [reference];
  return { ok: true, body: out };
}

/** Parse and check a raw request body (the emulator's entry point). */
export function checkTtsRequestBytes(
  raw: Uint8Array,
  options: Omit<CheckTtsOptions, 'bodyBytes'> = {},
): TtsCheck {
  const limits = options.limits ?? DEFAULT_LIMITS;
  if (raw.length > limits.ttsRequestBytes)
    return checkTtsRequest(undefined, { ...options, bodyBytes: raw.length });
  let body: unknown;
  try {
    body = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'));
  } catch {
    return reject(400, 'VALIDATION_INVALID_FORMAT', 'request body is not valid JSON');
  }
  return checkTtsRequest(body, options);
}

/** Validate reference audio: returns its duration, or the reason it is not mono PCM16 WAV. */
function checkReferenceAudio(b64: string): { seconds: number } | string {
  if (!isStandardBase64(b64)) return '`voice_references[0].audio` is not standard base64';
  const wav = Buffer.from(b64, 'base64');
  let info: ReturnType<typeof parseWavHeader>;
  try {
    info = parseWavHeader(wav);
  } catch (err) {
    return `reference audio is not a readable RIFF/WAVE file (${(err as Error).message})`;
  }
  if (info === null) return 'reference audio is a truncated RIFF/WAVE file';
  if (info.format !== 'pcm' || info.bitsPerSample !== 16) return 'reference audio must be PCM16';
  if (info.channels !== 1) return `reference audio must be mono, got ${info.channels} channels`;
  // parseWavHeader reads a data size of 0 as a streaming header (size unknown). A reference is
  // a whole file, so a declared 0 is an empty data chunk, whatever chunks follow it.
  if (wav.readUInt32LE(info.dataOffset - 4) === 0) return 'reference audio holds no samples';
  const available = wav.length - info.dataOffset;
  const dataBytes = Math.min(info.dataBytes ?? available, available);
  if (dataBytes < 2) return 'reference audio holds no samples';
  return { seconds: Math.floor(dataBytes / 2) / info.sampleRate };
}
