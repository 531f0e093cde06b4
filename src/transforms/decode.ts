// decode(): any audio bytes in, PCM16LE out (16 kHz mono by default). WAV, declared raw PCM and
// Ogg/WebM Opus are decoded in-process; everything else by an ffmpeg child process.

import * as streams from 'node:stream';
import { Duplex, type Transform } from 'node:stream';
import { ByteAligner } from '../audio/byte-aligner.ts';
import { MediaError } from '../audio/media-error.ts';
import { OggOpusDemuxer, OggPageWalker } from '../audio/ogg-opus.ts';
import { OPUS_SAMPLE_RATE, OpusPacketDecoder } from '../audio/opus-decoder.ts';
import { int16ToBuffer, toPcm16 } from '../audio/pcm.ts';
import {
  checkDesign,
  checkPcmFormat,
  type PcmFormat,
  type ResamplerDesign,
  resamplerChain,
} from '../audio/resampler.ts';
import { HeadSniffer, Mp4BoxWalker, type SniffResult } from '../audio/sniff.ts';
import type { UnitWalker } from '../audio/unit-walker.ts';
import { WavReader } from '../audio/wav.ts';
import { WebmOpusDemuxer } from '../audio/webm-opus.ts';
import { InvalidArgumentError, ProtocolError } from '../protocol/errors.ts';
import { checkChoiceOption } from '../protocol/options.ts';
import { LIVE_SAMPLE_RATE } from '../protocol/socket-events.ts';
import type { TypedStream } from '../protocol/typed-stream.ts';
import type { ResamplePool } from '../workers/resample-pool.ts';
import { destroyOnAbort } from './abort.ts';
import { coreTransform } from './core-transform.ts';
import { ffmpegPcm } from './ffmpeg-pcm.ts';
import { resample } from './resample.ts';

// `stream.compose` (Node 16.9+, stable use here) is missing from @types/node.
const compose = (streams as unknown as { compose(...parts: Duplex[]): Duplex }).compose;

/**
 * A headerless input's sample encoding: signed 16-bit or 32-bit float little-endian PCM, or
 * 8-bit G.711 A-law or μ-law.
 */
export type RawEncoding = 's16le' | 'f32le' | 'alaw' | 'mulaw';

/** A headerless PCM input's format, declared by the caller. */
export interface RawInputFormat {
  /** The sample encoding. */
  encoding: RawEncoding;
  /** Hz. */
  sampleRate: number;
  /** Interleaved channels. */
  channels: number;
}

/** Options of {@link decode}. */
export interface DecodeOptions {
  /** Output rate. Default 16000 (live input). */
  sampleRate?: number;
  /** Output channels. Default 1. */
  channels?: number;
  /** The input is headerless PCM of this format (no sniffing). */
  input?: RawInputFormat;
  /**
   * `'fallback'` (default): ffmpeg only for what is not decoded in-process; `'always'`: ffmpeg
   * for everything; `'never'`: fail with `MediaError` instead of starting ffmpeg.
   */
  ffmpeg?: 'fallback' | 'always' | 'never';
  /** An ffmpeg binary; otherwise `FFMPEG_PATH`, ffmpeg-static, then the PATH. */
  ffmpegPath?: string;
  /**
   * ffmpeg path: pass each decoded packet on at once (for live input) rather than in 32 KiB
   * blocks (about 1 s of 16 kHz mono), which is faster for files. Default false.
   */
  lowLatency?: boolean;
  /** Milliseconds between SIGTERM and SIGKILL when ffmpeg is stopped. Default 2000. */
  killGraceMs?: number;
  /**
   * ffmpeg path: what to do when ffmpeg exits 0 but reported decoding errors (it skipped a cut
   * or damaged packet). `'warn'` (default): the output stands and the stream emits `'warning'`
   * with a `MediaError` `ERR_MEDIA_FORMAT` carrying ffmpeg's words (concatenated MP3s and stray
   * tags make ffmpeg complain about files it decodes whole); `'fail'`: the stream fails with it.
   * The same for a file that looks cut where ffmpeg says nothing (`ERR_MEDIA_TRUNCATED`: a WAV
   * ending before its data chunk's end, an MP3 short of its LAME tag's length, a FLAC short of
   * its STREAMINFO's, an Ogg stream ending inside a page, an MP4 ending inside a box).
   */
  decodeErrors?: 'fail' | 'warn';
  /** Worker pool for the in-process paths' resampling (see `resample()`); default inline. */
  pool?: ResamplePool | 'shared' | false;
  /** The resampling filter of the in-process paths. */
  design?: ResamplerDesign;
  /** Destroys the stream (and stops ffmpeg). */
  signal?: AbortSignal;
}

/** The events of a `decode()` stream besides Node's, with their arguments. */
export interface DecodeEvents {
  /** Once, when it knows how it decodes the input. */
  format: [format: DecodeFormatEvent];
  /** When it has started ffmpeg, with its pid. */
  spawn: [pid: number];
  /**
   * ffmpeg skipped input it could not decode, or the input looks cut (with `decodeErrors:
   * 'warn'`, the default).
   */
  warning: [err: MediaError];
}

/** What `decode()` returns: a Duplex (bytes in, PCM16LE out) typed by `DecodeEvents`. */
export type DecodeStream = TypedStream<Duplex, DecodeEvents>;

/** How an input is being decoded: the `'format'` event of `decode()`. */
export interface DecodeFormatEvent {
  /**
   * Which decoder reads the input: in-process (`wav`, `raw`, `ogg-opus`, `webm-opus`) or ffmpeg.
   */
  decoder: 'wav' | 'raw' | 'ogg-opus' | 'webm-opus' | 'ffmpeg';
  /** The source rate and channels, when known (not for ffmpeg). */
  source?: PcmFormat;
}

const RAW_SAMPLE: Record<
  RawEncoding,
  { format: 'pcm' | 'float' | 'alaw' | 'mulaw'; bits: number; bytes: number }
> = {
  s16le: { format: 'pcm', bits: 16, bytes: 2 },
  f32le: { format: 'float', bits: 32, bytes: 4 },
  alaw: { format: 'alaw', bits: 8, bytes: 1 },
  mulaw: { format: 'mulaw', bits: 8, bytes: 1 },
};

/** Most channels a WAV header may declare (ffmpeg's limit too: it refuses more). */
const MAX_WAV_CHANNELS = 512;
/** Most output samples per input sample from a WAV header's rate (16 kHz out: 250 Hz in at least). */
const MAX_WAV_UPSAMPLING = 64;

/** A stateful decoder: bytes in, PCM16 interleaved out; `end` fails on a cut input. */
interface PcmCore {
  push(chunk: Buffer): Int16Array[];
  end(): Int16Array[];
}

function rawCore(input: RawInputFormat): PcmCore {
  const sample = RAW_SAMPLE[input.encoding];
  const aligner = new ByteAligner(sample.bytes * input.channels);
  return {
    push(chunk) {
      const whole = aligner.push(chunk);
      return whole.length === 0 ? [] : [toPcm16(whole, sample.format, sample.bits)];
    },
    end() {
      aligner.end(`${input.encoding} input`);
      return [];
    },
  };
}

/** The WAV reader's errors as decode()'s: a bad header or layout, or a cut file. */
function wavError(err: unknown, code: 'ERR_MEDIA_FORMAT' | 'ERR_MEDIA_TRUNCATED'): unknown {
  return err instanceof ProtocolError ? new MediaError(code, err.message, { cause: err }) : err;
}

function wavCore(): PcmCore {
  const reader = new WavReader();
  return {
    push(chunk) {
      let pcm: Buffer;
      try {
        pcm = reader.push(chunk);
      } catch (err) {
        throw wavError(err, 'ERR_MEDIA_FORMAT');
      }
      return pcm.length === 0 ? [] : [new Int16Array(pcm.buffer, pcm.byteOffset, pcm.length / 2)];
    },
    end() {
      try {
        reader.end();
      } catch (err) {
        throw wavError(err, 'ERR_MEDIA_TRUNCATED');
      }
      return [];
    },
  };
}

function opusCore(demuxer: OggOpusDemuxer | WebmOpusDemuxer): PcmCore {
  const decoder = new OpusPacketDecoder();
  return {
    push: (chunk) => decoder.push(demuxer.push(chunk)),
    end() {
      const tail = demuxer.end();
      return [...decoder.push(tail ?? []), ...decoder.end()];
    },
  };
}

/** A Transform around a `PcmCore`: PCM16 out as Buffers. */
function pcmTransform(core: PcmCore): Transform {
  const bytes = (parts: Int16Array[]) => parts.filter((p) => p.length > 0).map(int16ToBuffer);
  return coreTransform<Buffer, Buffer>({
    push: (chunk) => bytes(core.push(chunk)),
    end: () => bytes(core.end()),
  });
}

/**
 * A Duplex from audio bytes (any container ffmpeg reads) to PCM16LE at `sampleRate` with
 * `channels`. Emits `'format'` (`DecodeFormatEvent`) once it knows how it decodes, `'spawn'`
 * with the pid when it starts ffmpeg, and `'warning'` when ffmpeg skipped data (see
 * `decodeErrors`). Fails with `MediaError` for a cut or corrupt native input,
 * `FfmpegError` (exit code, stderr tail) or `FfmpegNotFoundError` for the ffmpeg path. Destroy
 * or abort stops ffmpeg (SIGTERM, SIGKILL after `killGraceMs`); the stream closes after the
 * child has exited.
 */
export function decode(options: DecodeOptions = {}): DecodeStream {
  const target = checkPcmFormat('decode: the output', {
    sampleRate: options.sampleRate ?? LIVE_SAMPLE_RATE,
    channels: options.channels ?? 1,
  });
  checkChoiceOption('decode', 'ffmpeg', options.ffmpeg, ['fallback', 'always', 'never']);
  const mode = options.ffmpeg ?? 'fallback';
  if (options.input) {
    if (!Object.hasOwn(RAW_SAMPLE, options.input.encoding)) {
      throw new InvalidArgumentError(
        `decode: unknown raw encoding ${JSON.stringify(options.input.encoding)}`,
      );
    }
    checkPcmFormat('decode: input', options.input);
    // A conversion the resampler refuses fails here, not at the first write.
    if (mode !== 'always') resamplerChain(options.input.sampleRate, target.sampleRate, options.design);
  }
  // Checked now, not when the first bytes pick a decoder that resamples.
  checkDesign(options.design);
  const graceMs = options.killGraceMs;
  if (graceMs !== undefined && !(graceMs >= 0 && Number.isFinite(graceMs))) {
    throw new InvalidArgumentError(`decode: killGraceMs must be a finite number of ms >= 0, got ${graceMs}`);
  }

  let inner: Duplex | undefined;
  /**
   * ffmpeg path: the input length a WAV header declares, and the output length an MP3's LAME
   * tag (with a frame of slack) or a FLAC's STREAMINFO gives. ffmpeg decodes a cut file without a word; falling short
   * of these is a warning, or the error with `decodeErrors: 'fail'`.
   */
  let declaredInput: number | undefined;
  let declaredOutput: { bytes: number; slack: number; what: string; format: string } | undefined;
  let inputBytes = 0;
  /** ffmpeg path, Ogg or MP4 input: whether it ends inside a page or a top-level box (cut). */
  let units: { walker: UnitWalker; what: string } | undefined;
  let outputBytes = 0;
  let rawToFfmpeg: ByteAligner | undefined;
  const sniffer = new HeadSniffer();

  const nativeChain = (core: PcmCore, source: PcmFormat): Duplex => {
    const first = pcmTransform(core);
    if (source.sampleRate === target.sampleRate && source.channels === target.channels) return first;
    return compose(first, resample({ from: source, to: target, pool: options.pool, design: options.design }));
  };

  const ffmpegChain = (sniffed: SniffResult | undefined): Duplex => {
    if (mode === 'never') {
      throw new MediaError(
        'ERR_MEDIA_FORMAT',
        'this input needs ffmpeg, and decode() was given ffmpeg: "never"',
      );
    }
    const raw = options.input;
    const mp3 = sniffed?.kind === 'ffmpeg' ? sniffed.mp3 : undefined;
    if (sniffed?.kind === 'ffmpeg') declaredInput = sniffed.wavEnd;
    else if (sniffed?.kind === 'wav' && sniffed.info.dataBytes !== undefined) {
      declaredInput = sniffed.info.dataOffset + sniffed.info.dataBytes;
    }
    const flac = sniffed?.kind === 'ffmpeg' ? sniffed.flac : undefined;
    const declared = (format: string, length: { sampleRate: number; samples: number }, by: string) => {
      const frameBytes = (n: number) =>
        Math.round((n * target.sampleRate) / length.sampleRate) * target.channels * 2;
      declaredOutput = {
        bytes: frameBytes(length.samples),
        // MP3: a frame, as ffmpeg may drop a last partial one; FLAC: 10 ms of resampler rounding.
        slack: frameBytes(format === 'MP3' ? 1152 : Math.ceil(length.sampleRate / 100)),
        what: `${((length.samples / length.sampleRate) * 1000).toFixed(0)} ms by its ${by}`,
        format,
      };
    };
    if (mp3) declared('MP3', mp3, 'LAME tag');
    else if (flac) declared('FLAC', flac, 'STREAMINFO');
    return ffmpegPcm({
      ...target,
      inputArgs: raw ? ['-f', raw.encoding, '-ar', String(raw.sampleRate), '-ac', String(raw.channels)] : [],
      spoolToFile: sniffed?.kind === 'ffmpeg' && sniffed.needsFile === true,
      gaplessEnd: mp3
        ? {
            bytes: Math.round((mp3.samples * target.sampleRate) / mp3.sampleRate) * target.channels * 2,
            paddingBytes:
              (Math.ceil((mp3.endPadding * target.sampleRate) / mp3.sampleRate) + 1) * target.channels * 2,
          }
        : undefined,
      ffmpegPath: options.ffmpegPath,
      killGraceMs: options.killGraceMs,
      lowLatency: options.lowLatency,
      onSpawn: (pid) => outer.emit('spawn', pid),
      onDecodeErrors: options.decodeErrors === 'fail' ? undefined : (err) => outer.emit('warning', err),
    });
  };

  /**
   * Attach the decoder once the head says which (`chunk` undefined: the input has ended).
   * Returns the bytes held until then, for the decoder; undefined while more are needed.
   */
  const start = (chunk: Buffer | undefined): Buffer | undefined => {
    const raw = options.input;
    if (raw) {
      const source = { sampleRate: raw.sampleRate, channels: raw.channels };
      if (mode === 'always') {
        // ffmpeg drops a cut sample frame at the end without a word: count frames here.
        rawToFfmpeg = new ByteAligner(RAW_SAMPLE[raw.encoding].bytes * raw.channels);
        attach(ffmpegChain(undefined), { decoder: 'ffmpeg' });
      } else attach(nativeChain(rawCore(raw), source), { decoder: 'raw', source });
      return chunk ?? Buffer.alloc(0);
    }
    if (!chunk && sniffer.bytes === 0) {
      throw new MediaError('ERR_MEDIA_FORMAT', 'empty input: no audio to decode');
    }
    const sniffed = chunk ? sniffer.push(chunk) : sniffer.end();
    if (sniffed.kind === 'more') return undefined;
    if (mode === 'always' || sniffed.kind === 'ffmpeg') {
      const head = sniffer.take();
      if (head.toString('latin1', 0, 4) === 'OggS')
        units = { walker: new OggPageWalker(), what: 'Ogg input ends inside a page (a cut file)' };
      else if (head.toString('latin1', 4, 8) === 'ftyp')
        units = { walker: new Mp4BoxWalker(), what: 'MP4 input ends inside a box (a cut file)' };
      attach(ffmpegChain(sniffed), { decoder: 'ffmpeg' });
      return head;
    } else if (sniffed.kind === 'wav') {
      const source = { sampleRate: sniffed.info.sampleRate, channels: sniffed.info.channels };
      if (source.channels > MAX_WAV_CHANNELS) {
        // The resampler's history holds thousands of frames of every channel: a header saying
        // 65535 channels made a 44-byte file take half a GiB.
        throw new MediaError(
          'ERR_MEDIA_FORMAT',
          `WAV with ${source.channels} channels (at most ${MAX_WAV_CHANNELS}, as ffmpeg)`,
        );
      }
      if (target.sampleRate > MAX_WAV_UPSAMPLING * source.sampleRate) {
        // Each input chunk's output is made at once: a header saying 1 Hz turned a 64 KiB read
        // into one 1 GiB chunk (16000 samples out for each sample in).
        throw new MediaError(
          'ERR_MEDIA_FORMAT',
          `WAV at ${source.sampleRate} Hz: more than ${MAX_WAV_UPSAMPLING} times below the output's ${target.sampleRate} Hz`,
        );
      }
      let chain: Duplex;
      try {
        chain = nativeChain(wavCore(), source);
      } catch (err) {
        // A rate the resampler refuses is the file's fault here, not the caller's.
        if (!(err instanceof InvalidArgumentError)) throw err;
        throw new MediaError('ERR_MEDIA_FORMAT', `WAV at ${source.sampleRate} Hz: ${err.message}`, {
          cause: err,
        });
      }
      attach(chain, { decoder: 'wav', source });
    } else {
      const source = { sampleRate: OPUS_SAMPLE_RATE, channels: sniffed.head.channels };
      const demuxer = sniffed.kind === 'ogg-opus' ? new OggOpusDemuxer() : new WebmOpusDemuxer();
      attach(nativeChain(opusCore(demuxer), source), { decoder: sniffed.kind, source });
    }
    return sniffer.take();
  };

  const attach = (chain: Duplex, format: DecodeFormatEvent) => {
    inner = chain;
    chain.on('data', (data: Buffer) => {
      outputBytes += data.length;
      if (!outer.push(data)) chain.pause();
    });
    chain.once('end', () => {
      const want = declaredOutput;
      if (want && outputBytes + want.slack < want.bytes) {
        const got = (outputBytes / (target.sampleRate * target.channels * 2)) * 1000;
        const err = suspectCut(
          `the ${want.format} decoded to ${got.toFixed(0)} ms, ${want.what} (a cut file)`,
        );
        if (err) return outer.destroy(err);
      }
      outer.push(null);
    });
    chain.once('error', (err) => outer.destroy(err));
    outer.emit('format', format);
  };

  const forward = (data: Buffer, callback: (err?: Error | null) => void) => {
    units?.walker.push(data);
    const whole = rawToFfmpeg ? rawToFfmpeg.push(data) : data;
    if (whole.length === 0 || inner!.write(whole)) callback();
    else inner!.once('drain', () => callback());
  };

  /** A cut input ffmpeg decoded without a word: the error to fail with, or undefined once warned. */
  const suspectCut = (message: string): MediaError | undefined => {
    const err = new MediaError('ERR_MEDIA_TRUNCATED', message);
    if (options.decodeErrors === 'fail') return err;
    outer.emit('warning', err);
    return undefined;
  };

  const outer: Duplex = new Duplex({
    write(chunk: Buffer, _encoding, callback) {
      inputBytes += chunk.length;
      if (inner) {
        forward(chunk, callback);
        return;
      }
      let head: Buffer | undefined;
      try {
        head = start(chunk);
      } catch (err) {
        callback(err as Error);
        return;
      }
      if (head) forward(head, callback);
      else callback();
    },
    final(callback) {
      const finish = () => {
        try {
          rawToFfmpeg?.end(`${options.input!.encoding} input`);
        } catch (err) {
          callback(err as Error);
          return;
        }
        if (units?.walker.inside) {
          const err = suspectCut(units.what);
          if (err) {
            callback(err);
            return;
          }
        }
        if (declaredInput !== undefined && inputBytes < declaredInput) {
          const err = suspectCut(
            `WAV input ends after ${inputBytes} of the ${declaredInput} bytes its header declares (a cut file)`,
          );
          if (err) {
            callback(err);
            return;
          }
        }
        inner!.end();
        callback();
      };
      if (inner) return finish();
      let head: Buffer | undefined;
      try {
        head = start(undefined);
      } catch (err) {
        callback(err as Error);
        return;
      }
      if (head && head.length > 0) forward(head, finish);
      else finish();
    },
    read() {
      if (inner?.isPaused()) inner.resume();
    },
    destroy(err, callback) {
      if (!inner || inner.closed) {
        callback(err);
        return;
      }
      // Close only once the inner chain (and so any ffmpeg child) is gone.
      inner.once('close', () => callback(err));
      inner.destroy(err ?? undefined);
    },
  });
  destroyOnAbort(outer, options.signal);
  return outer as DecodeStream;
}
