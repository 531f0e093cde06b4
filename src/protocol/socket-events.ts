// Socket.IO events and payloads. The interface names the ASR and diarization events but not
// every payload or the TTS and voice events; these are speechpipe's choices (ARCHITECTURE.md,
// "Where the interface is silent"), shared by the client and the emulator, overridable.

import type { ErrorBody } from './errors.ts';
import type { Language } from './languages.ts';
import type { TtsRequestBody } from './tts-request.ts';

/** Socket.IO paths of the service; `ConfigOptions.apiPath` and `legacySocketPath` choose one. */
export const SOCKET_PATHS = {
  /** Consolidated endpoint, the default. */
  default: '/socket.io',
  /** Legacy endpoint, not yet consolidated. */
  legacy: '/realtime/socket.io',
} as const;

/**
 * Audio frames (`audio_stream`, `diarization_stream`) and `audio_file` may be emitted with a
 * Socket.IO acknowledgement callback. The service (our emulator) then acknowledges once the
 * frame is accepted, with `FrameAck`; a rejected frame is acknowledged with the error body
 * instead (and no `error` event). This is how a Socket.IO sender learns that a frame was
 * accepted, so that backpressure reaches the source; without a callback, rejections arrive as
 * `error` events.
 */
export type FrameAck = { ok: true } | { ok: false; error: SocketErrorPayload };

/** Default Socket.IO event names, by role; replace any with `resolveSocketEvents`. */
export const SOCKET_EVENTS = {
  /** client → service: one binary live input frame (optionally acknowledged, see `FrameAck`) */
  audioStream: 'audio_stream',
  /** client → service: one binary live input frame (optionally acknowledged, see `FrameAck`) */
  diarizationStream: 'diarization_stream',
  /** client → service: `AudioFilePayload` (optionally acknowledged, see `FrameAck`) */
  audioFile: 'audio_file',
  /** service → client: ASR or fast record */
  transcriptionResult: 'transcription_result',
  /** service → client: diarization record */
  diarizationResult: 'diarization_result',
  /** service → client: `SocketErrorPayload` */
  error: 'error',
  /** client → service: the TTS request body (optionally acknowledged on acceptance, see `FrameAck`) */
  ttsRequest: 'tts_request',
  /** service → client: `TtsAudioPayload` */
  ttsAudio: 'tts_audio',
  /** client → service, with an acknowledgement: `ListVoicesAck` */
  listVoices: 'list_voices',
} as const;

/** Socket.IO event names by role (the keys of `SOCKET_EVENTS`). */
export type SocketEventNames = { [K in keyof typeof SOCKET_EVENTS]: string };

/** Default event names with some replaced. */
export function resolveSocketEvents(overrides: Partial<SocketEventNames> = {}): SocketEventNames {
  return { ...SOCKET_EVENTS, ...overrides };
}

/** Sample rate of Socket.IO TTS output (playable PCM16LE mono). */
export const SOCKET_TTS_SAMPLE_RATE = 24_000;
/** Sample rate of the direct HTTP TTS frame stream and of all live input. */
export const HTTP_TTS_SAMPLE_RATE = 16_000;
/** Sample rate of all live input, Hz: PCM16LE mono at 16 kHz (interface, rule 3). */
export const LIVE_SAMPLE_RATE = 16_000;
/** Bytes per second of real-time live audio (PCM16 mono at `LIVE_SAMPLE_RATE`). */
export const LIVE_BYTES_PER_SECOND = LIVE_SAMPLE_RATE * 2;

/** Payload of `audio_file`: one complete file for fast transcription over Socket.IO. */
export interface AudioFilePayload {
  /** Request UUID, echoed in the records. */
  id: string;
  /** Language of the audio; `auto` lets the service choose. */
  language: Language;
  /** ASR model; omitted or empty uses the deployment's default. */
  model?: string;
  /** One complete unit (any supported container). */
  audio: Uint8Array;
}

/** Payload of `tts_request`: the TTS request body, as over HTTP. */
export type TtsRequestPayload = TtsRequestBody;

/** Payload of `tts_audio`: one chunk of synthesized audio. */
export interface TtsAudioPayload {
  /** The request's `id`. */
  id: string;
  /** PCM16LE 24 kHz mono. */
  audio: Uint8Array;
  /** The last chunk of the request; the only completion signal. */
  is_final: boolean;
}

/** One voice of the voice listing (our shape; the interface does not show its fields). */
export interface VoiceProfile {
  /** Voice UUID, for `voice_id` of a TTS request. */
  id: string;
  /** Display name. */
  name: string;
  /** Language names the voice speaks. */
  languages: string[];
}

/** Acknowledgement of `list_voices`: the voices available to the account. */
export interface ListVoicesAck {
  /** Every voice, possibly none. */
  voices: VoiceProfile[];
}

/**
 * The error body, plus the stream or request id it concerns when known, and `retry_after`: the
 * seconds HTTP gives in `Retry-After` (Socket.IO has no header for it).
 */
export type SocketErrorPayload = ErrorBody & { id?: string; retry_after?: number };
