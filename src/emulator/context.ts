// The emulator's shared state: resolved options and limits, keys, admission, faults, stats,
// registered transcripts and the lifecycle every operation draws its resources from.

import { availableParallelism } from 'node:os';
import { ConfigError } from '../protocol/errors.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import { type Limits, resolveLimits } from '../protocol/limits.ts';
import type { OperationName } from '../protocol/operations.ts';
import type { WordSegment } from '../protocol/records.ts';
import { ConcurrencyGate, RateLimiter, RequestAdmission, SessionSlots } from './admission.ts';
import { KeyRegistry } from './auth.ts';
import { LiveAsrEngine } from './engine/live.ts';
import { chosenEngine, findPocketSphinx, RecognizerError } from './engine/pocketsphinx.ts';
import { RecognizedAsrEngine, recognizeRecording } from './engine/recognized.ts';
import { generatedRecognizerStats, RecognizerPool, type RecognizerStats } from './engine/recognizer.ts';
import type { AnalyzedAudio } from './engine/recording.ts';
import { FaultInjector } from './faults.ts';
import { Lifecycle } from './lifecycle.ts';
import { reject } from './rejection.ts';
import { StatsCollector } from './stats.ts';
import { ownerOf, type ThreadMember } from './threads.ts';
import type { EmulatorKey, EmulatorOptions } from './types.ts';

/** ASR model keys per language; the first is the default. `auto` accepts every key. */
export const DEFAULT_ASR_MODELS: Readonly<Record<Language, readonly string[]>> = Object.freeze({
  en: ['nova-en', 'nova-en-fast'],
  ar: ['nova-ar'],
  codeswitch: ['nova-codeswitch'],
  auto: ['nova-auto', 'nova-en', 'nova-en-fast', 'nova-ar', 'nova-codeswitch'],
});

/** The emulator's TTS model keys where `EmulatorOptions.ttsModels` gives none: `nebula` alone. */
export const DEFAULT_TTS_MODELS: readonly string[] = ['nebula'];

/**
 * Phrases the default content policy refuses (case-insensitive substrings). `emulator-blocked`
 * is a marker tests can use without writing anything unpleasant.
 */
export const DEFAULT_BLOCKLIST: readonly string[] = [
  'emulator-blocked',
  'build a bomb',
  'make a bomb',
  'kill yourself',
  'how to make meth',
];

/**
 * The emulator's default content policy: `false` (refused with 400 `TTS_INPUT_NOT_ALLOWED`) when
 * the text contains a phrase of {@link DEFAULT_BLOCKLIST}, case-insensitively.
 */
export const defaultContentPolicy = (text: string): boolean => {
  const lower = text.toLowerCase();
  return !DEFAULT_BLOCKLIST.some((phrase) => lower.includes(phrase));
};

const SHA256_HEX = /^[0-9a-f]{64}$/i;

/** Default HTTP pseudo-sessions per account: room for the default realtime ASR and diarization limits. */
export const DEFAULT_SESSION_SLOTS = 16;
export const DEFAULT_JOB_TIMING = Object.freeze({ queuedMs: 20, processingMs: 50 });

export class EmulatorContext {
  readonly lifecycle = new Lifecycle();
  readonly stats = new StatsCollector();
  readonly limits: Limits;
  readonly keys: KeyRegistry;
  readonly faults: FaultInjector;
  readonly concurrency: ConcurrencyGate;
  readonly slots: SessionSlots;
  readonly rate: RateLimiter | undefined;
  readonly transcripts = new Map<string, string>();
  /** Whether a transcript is registered under a key shaped like a SHA-256 hex (a file's). */
  #fileTranscripts = false;
  readonly perRequestMs: number;
  readonly perAudioSecondMs: number;
  readonly jobTiming: { queuedMs: number; processingMs: number };
  readonly contentPolicy: (text: string) => boolean;
  readonly asrModels: Record<Language, readonly string[]>;
  readonly ttsModels: readonly string[];
  readonly ttsEngine: 'auto' | 'espeak' | 'synthetic';
  /** This thread's place among the threads of one emulator, when there are several. */
  readonly member: ThreadMember | undefined;
  /** PocketSphinx, when it gives the words (`engine: 'pocketsphinx'`); else words are generated. */
  readonly recognizer: RecognizerPool | undefined;
  #toldNoModel = false;

  constructor(options: EmulatorOptions, member?: ThreadMember) {
    this.member = member;
    const shared = member?.shared;
    this.limits = resolveLimits(options.limits ?? {}, options.env ?? {});
    this.keys = new KeyRegistry(options.keys);
    this.faults = new FaultInjector(this.stats, options.faults);
    this.concurrency = new ConcurrencyGate(this.limits, this.stats, shared);
    this.slots = new SessionSlots(options.sessionSlots ?? DEFAULT_SESSION_SLOTS, shared);
    this.rate = options.rateLimit ? new RateLimiter(options.rateLimit, shared) : undefined;
    for (const [key, text] of Object.entries(options.transcripts ?? {})) this.registerTranscript(key, text);
    const latency = options.latency ?? 'instant';
    this.perRequestMs = latency === 'instant' ? 0 : nonNegative(latency.perRequestMs ?? 0, 'perRequestMs');
    this.perAudioSecondMs =
      latency === 'instant' ? 0 : nonNegative(latency.perAudioSecondMs ?? 0, 'perAudioSecondMs');
    this.jobTiming = {
      queuedMs: nonNegative(options.jobTiming?.queuedMs ?? DEFAULT_JOB_TIMING.queuedMs, 'queuedMs'),
      processingMs: nonNegative(
        options.jobTiming?.processingMs ?? DEFAULT_JOB_TIMING.processingMs,
        'processingMs',
      ),
    };
    this.contentPolicy = options.contentPolicy ?? defaultContentPolicy;
    const models = { ...DEFAULT_ASR_MODELS } as Record<Language, readonly string[]>;
    for (const [lang, keys] of Object.entries(options.asrModels ?? {})) {
      if (!isLanguage(lang)) throw new RangeError(`asrModels: unknown language ${JSON.stringify(lang)}`);
      models[lang] = [...(keys ?? [])];
    }
    this.asrModels = models;
    this.ttsModels =
      options.ttsModels && options.ttsModels.length > 0 ? [...options.ttsModels] : DEFAULT_TTS_MODELS;
    this.ttsEngine = options.tts?.engine ?? 'auto';
    this.recognizer = startRecognizer(options);
    this.stats.recognizer = () => this.recognizerStats();
  }

  /** The engine that gives the words of English (and `auto`) audio. */
  get engine(): RecognizerStats['engine'] {
    return this.recognizer ? 'pocketsphinx' : 'generated';
  }

  recognizerStats(): RecognizerStats {
    return this.recognizer?.stats() ?? generatedRecognizerStats();
  }

  /**
   * Whether the recognizer gives the words of `language` (English, and `auto`, as PocketSphinx
   * has an English model only). A language it has no model for keeps generated words, and the
   * emulator says so once, on stderr.
   */
  recognizes(language: Language): boolean {
    if (!this.recognizer) return false;
    if (language === 'en' || language === 'auto') return true;
    if (!this.#toldNoModel) {
      this.#toldNoModel = true;
      process.emitWarning(
        `PocketSphinx has an English model only: ${language} (and any language but en and auto) gets generated words, not recognized ones`,
        { type: 'SpeechpipeWarning', code: 'SPEECHPIPE_NO_RECOGNIZER_MODEL' },
      );
    }
    return false;
  }

  /** The realtime ASR engine of a stream: its registered transcript, recognized or generated words. */
  liveAsrEngine(id: string, language: Language): LiveAsrEngine | RecognizedAsrEngine {
    const transcript = this.transcript(id);
    if (transcript === undefined && this.recognizer && this.recognizes(language))
      return new RecognizedAsrEngine(id, this.recognizer);
    return new LiveAsrEngine(id, language, transcript);
  }

  /**
   * The recognizer's words per speech region of an upload whose audio was kept for it; undefined
   * when generated words answer (no recognizer, another language, a registered transcript).
   * `signal` drops the work when the request goes away. Releases the kept audio either way.
   */
  async recordingWords(
    audio: AnalyzedAudio,
    workClass: 'fast' | 'batch',
    signal?: AbortSignal,
  ): Promise<WordSegment[][] | undefined> {
    const recording = audio.recording;
    if (!recording) return undefined;
    const recognizer = this.recognizer;
    const owner = {};
    const cancel = () => recognizer?.cancel(owner);
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      if (!recognizer || this.fileTranscript(audio) !== undefined) return undefined;
      return await recognizeRecording(recognizer, recording.path, audio.regions, workClass, owner);
    } catch (err) {
      // The recognizer's own failure (a process that died twice): the operation's failure.
      if (err instanceof RecognizerError)
        throw reject(
          'ASR_TRANSCRIPTION_FAILED',
          `transcription failed before a final record (${err.message})`,
        );
      throw err;
    } finally {
      signal?.removeEventListener('abort', cancel);
      recording.release();
      delete audio.recording;
    }
  }

  /** A fresh batch job id; with several threads, one this thread owns (`ownerOf`). */
  newJobId(): string {
    for (;;) {
      const id = crypto.randomUUID();
      if (!this.member || ownerOf(id, this.member.workers) === this.member.index) return id;
    }
  }

  /** Transcripts are keyed by SHA-256 hex (case-insensitive) or stream UUID (case-insensitive). */
  registerTranscript(key: string, text: string): void {
    if (typeof key !== 'string' || key === '')
      throw new TypeError('a transcript key must be a nonempty string');
    if (typeof text !== 'string') throw new TypeError('a transcript must be a string');
    this.transcripts.set(key.toLowerCase(), text);
    if (SHA256_HEX.test(key)) this.#fileTranscripts = true;
  }

  /**
   * Whether an upload beginning now must be hashed: only a transcript registered under a
   * SHA-256 could be its, and hashing costs as much as the rest of the analysis.
   */
  get hashUploads(): boolean {
    return this.#fileTranscripts;
  }

  /** The transcript registered for an uploaded file, by its SHA-256 (absent when not hashed). */
  fileTranscript(audio: AnalyzedAudio): string | undefined {
    return audio.sha256 === undefined ? undefined : this.transcript(audio.sha256);
  }

  transcript(key: string): string | undefined {
    return this.transcripts.get(key.toLowerCase());
  }

  /** The ASR model for `language`: the requested key if known, else the default; else 400. */
  asrModel(language: Language, requested: string | undefined): string {
    const keys = this.asrModels[language];
    if (requested === undefined || requested === '') {
      const fallback = keys[0];
      if (fallback === undefined)
        throw reject('ASR_MODEL_NOT_FOUND', `no default ASR model is configured for ${language}`);
      return fallback;
    }
    if (!keys.includes(requested))
      throw reject('ASR_MODEL_NOT_FOUND', `unknown ASR model ${JSON.stringify(requested)} for ${language}`);
    return requested;
  }

  /** Processing time the latency model gives `seconds` of audio. */
  audioDelayMs(seconds: number): number {
    return this.perAudioSecondMs * seconds;
  }

  /** The admission of one request of `op` made with `key` (after authentication). */
  admission(key: EmulatorKey, op: OperationName): RequestAdmission {
    return new RequestAdmission(this.rate, key.key, op.startsWith('batch.'));
  }
}

/** The recognizer `options.engine` asks for (`auto`: PocketSphinx when it is installed). */
function startRecognizer(options: EmulatorOptions): RecognizerPool | undefined {
  const asked = options.engine ?? 'generated';
  if (asked !== 'generated' && asked !== 'pocketsphinx' && asked !== 'auto')
    throw new RangeError(`engine must be generated, pocketsphinx or auto, got ${JSON.stringify(asked)}`);
  if (chosenEngine(asked) === 'generated') return undefined;
  const install = findPocketSphinx();
  if (!install) {
    throw new ConfigError(
      'engine pocketsphinx: PocketSphinx is not installed (pocketsphinx_batch, pocketsphinx_continuous and the en-us model; on Debian: apt-get install pocketsphinx pocketsphinx-en-us)',
    );
  }
  const processes = options.recognizerProcesses ?? availableParallelism();
  if (!(Number.isInteger(processes) && processes >= 1))
    throw new RangeError('recognizerProcesses must be an integer >= 1');
  return new RecognizerPool(install, processes);
}

function nonNegative(n: number, name: string): number {
  if (!(typeof n === 'number' && Number.isFinite(n) && n >= 0)) throw new RangeError(`${name} must be >= 0`);
  return n;
}
