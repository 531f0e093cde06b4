// Reading the captions of a broadcast back: an FLV recording (nginx-rtmp writes what it received)
// parsed into its H.264 frames, their caption SEI decoded as CEA-608 (CC1). ffmpeg cannot do
// this for OBS's streams: OBS writes the caption SEI after the slices ("Late SEI").

import { open } from 'node:fs/promises';
import { type Cea608Caption, Cea608Decoder, ccDataFromNal } from '../../src/protocol/cea608.ts';

/** One H.264 frame of an FLV file: its timestamp and NAL units. */
export interface FlvVideoFrame {
  /** Milliseconds of the stream (decode time plus composition offset). */
  ms: number;
  nals: Uint8Array[];
}

/**
 * Incremental FLV reader: give it the file's bytes as they grow, get the complete video frames
 * (AVC) so far. A tag cut at the end waits for the next bytes.
 */
export class FlvReader {
  #buffer = Buffer.alloc(0);
  #offset = 0;
  #headerRead = false;
  #lengthSize = 4;

  push(chunk: Buffer): FlvVideoFrame[] {
    this.#buffer = Buffer.concat([this.#buffer.subarray(this.#offset), chunk]);
    this.#offset = 0;
    const frames: FlvVideoFrame[] = [];
    const b = this.#buffer;
    if (!this.#headerRead) {
      if (b.length < 13) return frames;
      if (b.toString('latin1', 0, 3) !== 'FLV') throw new Error('not an FLV file');
      this.#offset = b.readUInt32BE(5) + 4; // header, then PreviousTagSize0
      this.#headerRead = true;
    }
    while (this.#offset + 11 <= b.length) {
      const type = b[this.#offset]! & 0x1f;
      const size = b.readUIntBE(this.#offset + 1, 3);
      const end = this.#offset + 11 + size + 4;
      if (end > b.length) break;
      const ts = b.readUIntBE(this.#offset + 4, 3) | (b[this.#offset + 7]! << 24);
      const data = b.subarray(this.#offset + 11, this.#offset + 11 + size);
      this.#offset = end;
      if (type !== 9 || data.length < 5 || (data[0]! & 0x0f) !== 7) continue; // video, AVC
      const packetType = data[1]!;
      const composition = (data.readIntBE(2, 3) << 8) >> 8;
      if (packetType === 0) {
        // AVCDecoderConfigurationRecord: the NAL length field's size.
        this.#lengthSize = (data[9]! & 0x03) + 1;
        continue;
      }
      if (packetType !== 1) continue;
      const nals: Uint8Array[] = [];
      for (let i = 5; i + this.#lengthSize <= data.length; ) {
        const n = data.readUIntBE(i, this.#lengthSize);
        i += this.#lengthSize;
        nals.push(data.subarray(i, i + n));
        i += n;
      }
      frames.push({ ms: ts + composition, nals });
    }
    return frames;
  }
}

/** A caption seen in the stream, with the frame that completed it: its time and its CC1 entries. */
export interface StreamCaption extends Cea608Caption {
  ms: number;
  /** The field-1 cc_data entries of that frame. */
  entries: number;
}

/** Decodes the CC1 captions of H.264 frames as they come. */
export class StreamCaptionReader {
  readonly #flv = new FlvReader();
  readonly #decoder = new Cea608Decoder();
  /** Frames seen, and frames that carried caption data. */
  frames = 0;
  captionFrames = 0;

  get parityErrors(): number {
    return this.#decoder.parityErrors;
  }

  push(chunk: Buffer): StreamCaption[] {
    const out: StreamCaption[] = [];
    for (const frame of this.#flv.push(chunk)) {
      this.frames++;
      const cc = frame.nals.flatMap((nal) => ccDataFromNal(nal)).filter((c) => c.type === 0);
      if (cc.length > 0) this.captionFrames++;
      for (const c of cc)
        for (const caption of this.#decoder.push(c.data1, c.data2))
          out.push({ ...caption, ms: frame.ms, entries: cc.length });
    }
    return out;
  }
}

/** Every CC1 caption of an FLV recording, in stream order. */
export async function captionsOfFlv(
  path: string,
): Promise<{ captions: StreamCaption[]; frames: number; captionFrames: number; parityErrors: number }> {
  const reader = new StreamCaptionReader();
  const file = await open(path);
  try {
    const captions: StreamCaption[] = [];
    for await (const chunk of file.createReadStream()) captions.push(...reader.push(chunk as Buffer));
    return {
      captions,
      frames: reader.frames,
      captionFrames: reader.captionFrames,
      parityErrors: reader.parityErrors,
    };
  } finally {
    await file.close();
  }
}

/**
 * The lines a caption added to the one before it: those it rolled up from the caption before
 * (its last lines, now on top) left out.
 */
export function addedLines(previous: readonly string[], lines: readonly string[]): string[] {
  for (let k = Math.min(lines.length - 1, previous.length); k > 0; k--) {
    if (lines.slice(0, k).join('\n') === previous.slice(-k).join('\n')) return lines.slice(k);
  }
  return [...lines];
}

/** The lines the captions added, in order, each once. */
export function newLines(captions: readonly { lines: string[] }[]): string[] {
  return captions.flatMap((c, k) => addedLines(k === 0 ? [] : captions[k - 1]!.lines, c.lines));
}
