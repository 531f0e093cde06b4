// Speech for TTS: espeak-ng (English and Arabic voices) when it is on the PATH, otherwise a
// deterministic synthetic voice; either way PCM16LE mono at the rate asked for, streamed, and
// stopped (SIGTERM, then SIGKILL after a grace period) when the request goes away.

import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';
import { bufferToInt16, int16ToBuffer } from '../../audio/pcm.ts';
import { Resampler, type ResamplerDesign } from '../../audio/resampler.ts';
import { WavReader } from '../../audio/wav.ts';
import type { Lifecycle } from '../lifecycle.ts';
import type { VoiceProfile } from '../voices.ts';

export type TtsEngineChoice = 'auto' | 'espeak' | 'synthetic';

export interface SynthesisRequest {
  text: string;
  voice: VoiceProfile;
  sampleRate: number;
  engine: TtsEngineChoice;
  lifecycle: Lifecycle;
  signal: AbortSignal;
}

const KILL_GRACE_MS = 2000;
const ARABIC_SCRIPT = /[\u0600-\u06FF\u0750-\u077F\u08A0-\u08FF\uFB50-\uFDFF\uFE70-\uFEFF]/u;

let espeakPath: string | null | undefined;

/** espeak-ng on the PATH, or null. */
export function findEspeak(): string | null {
  if (espeakPath !== undefined) return espeakPath;
  espeakPath = null;
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, 'espeak-ng');
    try {
      accessSync(candidate, constants.X_OK);
      espeakPath = candidate;
      break;
    } catch {
      // not here
    }
  }
  return espeakPath;
}

export class SynthesisError extends Error {
  override name = 'SynthesisError';
}

/** PCM16LE mono chunks at `sampleRate`. */
export function synthesize(request: SynthesisRequest): AsyncGenerator<Buffer> {
  const espeak = request.engine === 'synthetic' ? null : findEspeak();
  if (request.engine === 'espeak' && espeak === null)
    throw new SynthesisError('espeak-ng is not on the PATH');
  return espeak ? espeakSpeech(espeak, request) : syntheticSpeech(request);
}

async function* espeakSpeech(path: string, request: SynthesisRequest): AsyncGenerator<Buffer> {
  const { voice, text } = request;
  const language = ARABIC_SCRIPT.test(text) ? 'ar' : 'en-us';
  const child = spawn(
    path,
    [
      '--stdin',
      '--stdout',
      '-v',
      `${language}+${voice.espeak.variant}`,
      '-p',
      String(voice.espeak.pitch),
      '-s',
      String(voice.espeak.speed),
    ],
    { stdio: ['pipe', 'pipe', 'ignore'], windowsHide: true },
  );
  let exited = false;
  let killTimer: NodeJS.Timeout | undefined;
  const exit = new Promise<number | null>((resolve) => {
    child.once('close', (code) => {
      exited = true;
      if (killTimer) clearTimeout(killTimer);
      resolve(code);
    });
    child.once('error', () => {
      exited = true;
      resolve(-1);
    });
  });
  const stop = () => {
    if (exited) return;
    child.stdin.destroy();
    child.kill('SIGTERM');
    killTimer ??= setTimeout(() => {
      if (!exited) child.kill('SIGKILL');
    }, KILL_GRACE_MS);
  };
  const removeCleanup = request.lifecycle.onClose(stop);
  request.signal.addEventListener('abort', stop, { once: true });
  child.stdin.on('error', () => {});
  child.stdin.end(text);
  const reader = new WavReader();
  let resampler: Resampler | undefined;
  try {
    for await (const chunk of child.stdout as AsyncIterable<Buffer>) {
      const pcm = reader.push(chunk);
      if (pcm.length === 0) continue;
      const info = reader.info!;
      // espeak-ng speaks at 22.05 kHz; the service answers at 16 kHz (HTTP) or 24 kHz (Socket.IO).
      // espeak-ng's formant speech has little above 5 kHz: a short filter (50 dB, passband to
      // 80 % of Nyquist) is transparent for it and costs a fraction of the 100 dB default.
      resampler ??= new Resampler(
        { sampleRate: info.sampleRate, channels: info.channels },
        { sampleRate: request.sampleRate, channels: 1 },
        SPEECH_RESAMPLER,
      );
      const out = resampler.push(bufferToInt16(pcm));
      if (out.length > 0) yield int16ToBuffer(out);
    }
    const tail = resampler?.end();
    if (tail && tail.length > 0) yield int16ToBuffer(tail);
    const code = await exit;
    if (request.signal.aborted) throw request.signal.reason;
    if (code !== 0) throw new SynthesisError(`espeak-ng exited with code ${code}`);
    if (!reader.info) throw new SynthesisError('espeak-ng produced no audio');
  } finally {
    stop();
    request.signal.removeEventListener('abort', stop);
    removeCleanup();
  }
}

/** The emulator's own resampling of espeak-ng's 22.05 kHz speech (see espeakSpeech). */
export const SPEECH_RESAMPLER: ResamplerDesign = { stopbandDb: 50, passband: 0.8 };

const SYLLABLE_SEC = 0.18;
const SYLLABLE_GAP_SEC = 0.05;
const WORD_GAP_SEC = 0.12;
const CLAUSE_GAP_SEC = 0.25;
const AMPLITUDE = 9000;

/**
 * A deterministic stand-in voice: a harmonic tone per syllable (letters / 3 per word) with a
 * smooth envelope and a falling pitch contour, pauses between words and after punctuation.
 */
async function* syntheticSpeech(request: SynthesisRequest): AsyncGenerator<Buffer> {
  const rate = request.sampleRate;
  const f0 = request.voice.synthHz;
  const words = request.text.split(/\s+/u).filter((w) => w !== '');
  for (const word of words) {
    if (request.signal.aborted) throw request.signal.reason;
    const letters = [...word].filter((c) => /[\p{L}\p{N}]/u.test(c)).length;
    const syllables = Math.max(letters > 0 ? 1 : 0, Math.round(letters / 3));
    const parts: Int16Array[] = [];
    for (let s = 0; s < syllables; s++) {
      parts.push(tone(rate, SYLLABLE_SEC, f0 * (1.08 - (0.12 * s) / syllables)));
      parts.push(new Int16Array(Math.round(rate * SYLLABLE_GAP_SEC)));
    }
    const pause = /[.,;:!?؟،]$/u.test(word) ? CLAUSE_GAP_SEC : WORD_GAP_SEC;
    parts.push(new Int16Array(Math.round(rate * pause)));
    const total = parts.reduce((n, p) => n + p.length, 0);
    const pcm = new Int16Array(total);
    let at = 0;
    for (const p of parts) {
      pcm.set(p, at);
      at += p.length;
    }
    yield int16ToBuffer(pcm);
  }
}

function tone(rate: number, seconds: number, hz: number): Int16Array {
  const n = Math.round(rate * seconds);
  const out = new Int16Array(n);
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    const envelope = Math.sin((Math.PI * i) / n);
    let v = 0;
    for (let k = 1; k <= 4; k++) v += Math.sin(2 * Math.PI * hz * k * t) / k;
    out[i] = Math.round(AMPLITUDE * envelope * v * 0.5);
  }
  return out;
}
