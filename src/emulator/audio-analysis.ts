// Validation and analysis of an uploaded recording while it streams in: WAV is read natively
// (no copy kept), anything else goes to a temp file and is decoded by ffmpeg. What is kept is
// the duration, the speech regions and, when asked, the SHA-256 of the bytes, and the audio
// only when the recognizer is to decode it (as 16 kHz mono PCM in a temp file, not in memory).

import { createHash, type Hash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream, rmSync, type WriteStream } from 'node:fs';
import { pcm16OutputArgs, runFfmpeg } from '../audio/ffmpeg.ts';
import { bufferToInt16, downmixToMono, int16ToBuffer } from '../audio/pcm.ts';
import { Resampler } from '../audio/resampler.ts';
import { WavReader } from '../audio/wav.ts';
import { looksLikeWav, MAX_WAV_HEADER_BYTES, parseWavHeader, type WavInfo } from '../protocol/riff.ts';
import type { AnalyzedAudio, RecordingAudio } from './engine/recording.ts';
import { SpeechRegionDetector } from './engine/regions.ts';
import { roundToMs } from './engine/times.ts';
import type { Lifecycle } from './lifecycle.ts';
import { type Rejection, reject, tooLong } from './rejection.ts';

const DECODE_RATE = 16_000;

export interface AnalyzerOptions {
  lifecycle: Lifecycle;
  maxDurationSec: number;
  /** `audio_duration` (batch) or `fast_audio_duration`. */
  durationBound: string;
  signal: AbortSignal;
  /** Compute the SHA-256 of the bytes (the key of registered transcripts). */
  hash: boolean;
  /** Keep the audio as 16 kHz mono PCM in a temp file (`AnalyzedAudio.recording`), for the recognizer. */
  keepAudio?: boolean;
}

/** The highest sample rate audio is recorded at (768 kHz, twice DXD's); a WAV claiming more is not audio. */
const MAX_SAMPLE_RATE = 768_000;

const corrupt = (why: string): Rejection =>
  reject('VALIDATION_FILE_CORRUPT', `the audio is unsupported, corrupt, empty or of zero duration (${why})`, {
    status: 422,
  });

/**
 * Feed the file part's bytes with `write`, then `finish`. Both throw a `Rejection` (422) as soon
 * as the audio is known to be invalid or too long; `dispose` releases the temp file and ffmpeg.
 * `write` returns a promise only when it has to wait (writing a temp file); WAV is analysed
 * synchronously, so a caller can go on without a turn of the event loop per read.
 */
export class UploadAnalyzer {
  readonly #opts: AnalyzerOptions;
  readonly #hash: Hash | undefined;
  #bytes = 0;
  #mode: 'sniff' | 'wav' | 'file' = 'sniff';
  /** Bytes seen before the WAV header parsed (to fall back to ffmpeg if it does not). */
  #head: Buffer[] = [];
  #headBytes = 0;
  #info: WavInfo | undefined;
  /** Sample bytes the data chunk still holds (undefined: until the end). */
  #remaining: number | undefined;
  #wav: WavReader | undefined;
  #detector: SpeechRegionDetector | undefined;
  #samples = 0;
  #file: WriteStream | undefined;
  #path: string | undefined;
  #removeCleanup: (() => void) | undefined;
  /** The audio kept for the recognizer, until `finish` hands it over. */
  #recording: RecordingFile | undefined;

  constructor(options: AnalyzerOptions) {
    this.#opts = options;
    this.#hash = options.hash ? createHash('sha256') : undefined;
  }

  /**
   * Whether bytes already written may still be read later: while the format is sniffed or a
   * WAV header is incomplete (they are kept), and when they go to a temp file. Once a WAV's
   * samples are being read, every `write` is done with its bytes when it returns.
   */
  get holdsInput(): boolean {
    return this.#opts.keepAudio === true || !(this.#mode === 'wav' && this.#info !== undefined);
  }

  write(chunk: Buffer): Promise<void> | undefined {
    if (chunk.length === 0) return;
    this.#bytes += chunk.length;
    this.#hash?.update(chunk);
    if (this.#mode === 'sniff') {
      this.#head.push(chunk);
      this.#headBytes += chunk.length;
      if (this.#headBytes < 12) return;
      const head = Buffer.concat(this.#head);
      this.#head = [head];
      if (looksLikeWav(head)) {
        this.#mode = 'wav';
        this.#head = [];
        this.#headBytes = 0;
        return this.#writeWav(head);
      }
      return this.#toFile();
    }
    return this.#mode === 'wav' ? this.#writeWav(chunk) : this.#writeFile(chunk);
  }

  async finish(): Promise<AnalyzedAudio> {
    if (this.#bytes === 0) throw corrupt('no bytes');
    if (this.#mode === 'sniff') await this.#toFile();
    if (this.#mode === 'wav') {
      if (!this.#info) throw corrupt('the WAV file ends before its data chunk');
      return this.#keptWith(this.#result(this.#info.sampleRate));
    }
    const file = this.#file!;
    file.end();
    await once(file, 'close');
    return this.#keptWith(await this.#decodeFile());
  }

  dispose(): void {
    this.#file?.destroy();
    this.#removeTemp();
    this.#recording?.release();
    this.#recording = undefined;
  }

  /** The result with the kept audio, complete on disk, handed over to it. */
  async #keptWith(audio: AnalyzedAudio): Promise<AnalyzedAudio> {
    const recording = this.#recording;
    if (!recording) return audio;
    await recording.finish();
    this.#recording = undefined;
    audio.recording = recording;
    return audio;
  }

  #writeWav(chunk: Buffer): Promise<void> | undefined {
    let data = chunk;
    if (this.#info === undefined) {
      this.#head.push(chunk);
      this.#headBytes += chunk.length;
      const head = this.#head.length === 1 ? chunk : Buffer.concat(this.#head, this.#headBytes);
      let info: WavInfo | null;
      try {
        info = parseWavHeader(head);
      } catch {
        // Not a WAV we read natively (RF64, an unusual codec...): let ffmpeg decide.
        return this.#toFile();
      }
      if (info === null) {
        if (this.#headBytes > MAX_WAV_HEADER_BYTES) throw corrupt('no WAV data chunk');
        this.#head = [head];
        return;
      }
      if (info.sampleRate > MAX_SAMPLE_RATE)
        throw corrupt(`a sample rate of ${info.sampleRate} Hz (at most ${MAX_SAMPLE_RATE} is audio)`);
      this.#info = info;
      this.#remaining = info.dataBytes;
      this.#head = [];
      this.#headBytes = 0;
      this.#detector = new SpeechRegionDetector(info.sampleRate);
      if (this.#opts.keepAudio) this.#recording = new RecordingFile(this.#opts, info.sampleRate);
      // Mono PCM16 goes straight to the detector; other layouts through the WAV reader.
      if (!(info.format === 'pcm' && info.bitsPerSample === 16 && info.channels === 1)) {
        this.#wav = new WavReader();
        data = head;
      } else data = head.subarray(info.dataOffset);
    }
    const info = this.#info;
    let kept: Promise<void> | undefined;
    if (this.#wav) {
      let pcm: Buffer;
      try {
        pcm = this.#wav.push(data);
      } catch {
        throw corrupt('malformed WAV data');
      }
      if (pcm.length === 0) return;
      const mono =
        info.channels === 1 ? bufferToInt16(pcm) : downmixToMono(bufferToInt16(pcm), info.channels);
      this.#samples += mono.length;
      this.#detector!.pushSamples(mono);
      kept = this.#recording?.write(mono);
    } else {
      // Bytes after the data chunk (LIST, id3 ...) are not samples.
      if (this.#remaining !== undefined) {
        if (data.length > this.#remaining) data = data.subarray(0, this.#remaining);
        this.#remaining -= data.length;
      }
      this.#detector!.push(data);
      this.#samples = this.#detector!.samples;
      kept = this.#recording?.writeBytes(data);
    }
    const seconds = this.#samples / info.sampleRate;
    if (seconds > this.#opts.maxDurationSec) {
      const declared = info.dataBytes === undefined ? 0 : info.dataBytes / info.blockAlign / info.sampleRate;
      throw tooLong(
        this.#opts.durationBound,
        this.#opts.maxDurationSec,
        Math.max(seconds, declared),
        'the audio',
      );
    }
    return kept;
  }

  async #toFile(): Promise<void> {
    this.#mode = 'file';
    this.#wav = undefined;
    // A WAV ffmpeg decodes after all: its audio is kept from ffmpeg's output.
    this.#recording?.release();
    this.#recording = undefined;
    this.#path = this.#opts.lifecycle.tempPath();
    const path = this.#path;
    this.#removeCleanup = this.#opts.lifecycle.onClose(() => rmSync(path, { force: true }));
    this.#file = createWriteStream(path);
    this.#file.on('error', () => {}); // surfaced by finish() as a corrupt upload
    const head = this.#head;
    this.#head = [];
    this.#headBytes = 0;
    for (const chunk of head) await this.#writeFile(chunk);
  }

  async #writeFile(chunk: Buffer): Promise<void> {
    const file = this.#file!;
    if (!file.write(chunk)) await once(file, 'drain', { signal: this.#opts.signal });
  }

  async #decodeFile(): Promise<AnalyzedAudio> {
    const detector = new SpeechRegionDetector(DECODE_RATE);
    this.#detector = detector;
    if (this.#opts.keepAudio) this.#recording = new RecordingFile(this.#opts, DECODE_RATE);
    const ceiling = Math.floor(this.#opts.maxDurationSec * DECODE_RATE);
    let run: ReturnType<typeof runFfmpeg>;
    try {
      run = runFfmpeg(['-i', this.#path!, ...pcm16OutputArgs(DECODE_RATE, 1)], { signal: this.#opts.signal });
    } catch (err) {
      if (this.#opts.signal.aborted) throw err;
      throw corrupt('not WAV, and ffmpeg is not available to decode it');
    }
    const removeKill = this.#opts.lifecycle.onClose(() => run.stop());
    let over = false;
    try {
      for await (const chunk of run.stdout as AsyncIterable<Buffer>) {
        // The detector carries an odd byte to the next read and aligns the samples itself.
        detector.push(chunk);
        this.#samples = detector.samples;
        if (this.#samples > ceiling) {
          over = true;
          run.stop();
          break;
        }
        await this.#recording?.writeBytes(chunk);
      }
      await run.done;
    } catch (err) {
      if (this.#opts.signal.aborted) throw err;
      if (!over) throw corrupt('ffmpeg could not decode it');
    } finally {
      removeKill();
      run.stop();
      this.#removeTemp();
    }
    if (over) {
      // Decoding stopped at the ceiling: the duration is a minimum.
      throw tooLong(
        this.#opts.durationBound,
        this.#opts.maxDurationSec,
        this.#samples / DECODE_RATE,
        'the audio',
      );
    }
    return this.#result(DECODE_RATE);
  }

  #result(sampleRate: number): AnalyzedAudio {
    const durationSec = this.#samples / sampleRate;
    // Durations are told to the millisecond: less than half of one is zero duration.
    if (roundToMs(durationSec) === 0 || !this.#detector) throw corrupt('zero duration');
    const detector = this.#detector;
    const regions = [...detector.takeClosed(), ...detector.end()];
    const audio: AnalyzedAudio = { durationSec, regions };
    if (this.#hash) audio.sha256 = this.#hash.digest('hex');
    return audio;
  }

  #removeTemp(): void {
    if (this.#path) rmSync(this.#path, { force: true });
    this.#removeCleanup?.();
    this.#removeCleanup = undefined;
    this.#path = undefined;
  }
}

/**
 * An upload's audio as raw PCM16LE 16 kHz mono in a temp file (the recognizer reads it): written
 * as it is analysed, resampled natively from another rate. Removed by `release()`, or when the
 * emulator closes.
 */
class RecordingFile implements RecordingAudio {
  readonly path: string;
  readonly #file: WriteStream;
  readonly #resampler: Resampler | undefined;
  /** An odd byte of a sample split between writes (resampled audio only). */
  #carry: number | undefined;
  readonly #signal: AbortSignal;
  #removeCleanup: () => void;
  #released = false;

  constructor({ lifecycle, signal }: AnalyzerOptions, sampleRate: number) {
    this.#signal = signal;
    this.path = lifecycle.tempPath('.raw');
    const path = this.path;
    this.#removeCleanup = lifecycle.onClose(() => rmSync(path, { force: true }));
    this.#file = createWriteStream(path);
    this.#file.on('error', () => {}); // surfaced by finish()
    this.#resampler =
      sampleRate === DECODE_RATE
        ? undefined
        : new Resampler({ sampleRate, channels: 1 }, { sampleRate: DECODE_RATE, channels: 1 });
  }

  /** Mono samples at the source rate. */
  write(samples: Int16Array): Promise<void> | undefined {
    const out = this.#resampler ? this.#resampler.push(samples) : samples;
    return out.length > 0 ? this.#put(int16ToBuffer(out)) : undefined;
  }

  /** Mono PCM16LE bytes at the source rate, in any chunking. */
  writeBytes(bytes: Uint8Array): Promise<void> | undefined {
    if (!this.#resampler) return this.#put(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    let data = bytes;
    if (this.#carry !== undefined && data.length > 0) {
      data = Buffer.concat([Uint8Array.of(this.#carry), data]);
      this.#carry = undefined;
    }
    const whole = data.length & ~1;
    if (whole < data.length) this.#carry = data[whole];
    return whole > 0 ? this.write(bufferToInt16(data.subarray(0, whole))) : undefined;
  }

  #put(buffer: Buffer): Promise<void> | undefined {
    if (this.#file.write(buffer)) return undefined;
    return once(this.#file, 'drain', { signal: this.#signal }).then(() => {});
  }

  async finish(): Promise<void> {
    const tail = this.#resampler?.end();
    if (tail && tail.length > 0) this.#file.write(int16ToBuffer(tail));
    this.#file.end();
    await once(this.#file, 'close');
    if (this.#file.errored) throw corrupt('the audio could not be kept for the recognizer');
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#file.destroy();
    rmSync(this.path, { force: true });
    this.#removeCleanup();
  }
}
