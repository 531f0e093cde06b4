// WebM/Matroska Opus demuxer core: bytes in, the first Opus audio track's packets out, with the
// codec delay to drop at the start and each block's DiscardPadding. Handles SimpleBlocks and
// BlockGroups, all three lacings, and the unknown-size Segment and Cluster that live recorders
// (MediaRecorder, ffmpeg to a pipe) write. Elements it does not need are skipped unbuffered.
// (prism-media's WebmDemuxer drops BlockGroups, ignores lacing and unknown sizes.)

import { MediaError } from './media-error.ts';
import { type OpusDemuxItem, type OpusHead, parseOpusHead } from './ogg-opus.ts';

const ID = {
  EBML: 0x1a45dfa3,
  Segment: 0x18538067,
  Tracks: 0x1654ae6b,
  TrackEntry: 0xae,
  TrackNumber: 0xd7,
  TrackType: 0x83,
  CodecID: 0x86,
  CodecPrivate: 0x63a2,
  CodecDelay: 0x56aa,
  Audio: 0xe1,
  Channels: 0x9f,
  Cluster: 0x1f43b675,
  SimpleBlock: 0xa3,
  BlockGroup: 0xa0,
  Block: 0xa1,
  DiscardPadding: 0x75a2,
} as const;

/** Elements whose children we read. */
const MASTERS = new Set<number>([ID.Segment, ID.Tracks, ID.TrackEntry, ID.Audio, ID.Cluster, ID.BlockGroup]);
/** Elements whose payload we read whole. */
const LEAVES = new Set<number>([
  ID.TrackNumber,
  ID.TrackType,
  ID.CodecID,
  ID.CodecPrivate,
  ID.CodecDelay,
  ID.Channels,
  ID.SimpleBlock,
  ID.Block,
  ID.DiscardPadding,
]);
/** Largest leaf we buffer (a block of another track can be a video frame). */
const MAX_LEAF_BYTES = 64 * 1024 * 1024;

export interface WebmTrack {
  number: number;
  type: number;
  codecId: string;
  codecPrivate?: Buffer;
  codecDelayNs?: number;
  channels?: number;
}

interface Open {
  id: number;
  /** Absolute end offset; undefined for unknown size. */
  end: number | undefined;
}

function vintLength(first: number): number {
  for (let i = 0; i < 8; i++) if (first & (0x80 >> i)) return i + 1;
  return 0;
}

function readUint(b: Buffer): number {
  let v = 0;
  for (let i = 0; i < b.length; i++) v = v * 256 + b[i]!;
  return v;
}

function readInt(b: Buffer): number {
  if (b.length === 0) return 0;
  const u = readUint(b);
  return b[0]! & 0x80 ? u - 2 ** (8 * b.length) : u;
}

export class WebmOpusDemuxer {
  /** Input not parsed yet, and its length: joined only once the next element can be complete. */
  #chunks: Buffer[] = [];
  #bytes = 0;
  /** Bytes the next element needs before parsing can go on. */
  #need = 1;
  /** Absolute input offset of the next byte to parse. */
  #offset = 0;
  /** Bytes of a skipped element still to come. */
  #skip = 0;
  #stack: Open[] = [];
  #tracks: WebmTrack[] = [];
  #entry: WebmTrack | undefined;
  #track: WebmTrack | undefined;
  #tracksDone = false;
  #head: OpusHead | undefined;
  /** The Block of the current BlockGroup, held until the group ends (DiscardPadding may follow). */
  #groupBlock: Buffer | undefined;
  #groupDiscardNs = 0;
  #sawEbml = false;

  /** Every track, once the Tracks element has been read. */
  get tracks(): readonly WebmTrack[] | undefined {
    return this.#tracksDone ? this.#tracks : undefined;
  }

  /** The track decoded: the first audio track, when it is Opus. */
  get track(): WebmTrack | undefined {
    return this.#track;
  }

  push(chunk: Uint8Array): OpusDemuxItem[] {
    const items: OpusDemuxItem[] = [];
    let data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.#skip > 0) {
      const n = Math.min(this.#skip, data.length);
      this.#skip -= n;
      this.#offset += n;
      data = data.subarray(n);
      this.#closeEnded(items);
    }
    if (data.length === 0) return items;
    this.#chunks.push(data);
    this.#bytes += data.length;
    // Joining the input on every push would copy an element over and over when it comes in small chunks.
    if (this.#bytes < this.#need) return items;
    const buf = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    let at = 0;
    this.#need = 1;
    while (at < buf.length) {
      const idLen = vintLength(buf[at]!);
      if (idLen === 0 || idLen > 4) {
        throw new MediaError('ERR_MEDIA_FORMAT', 'invalid EBML element ID', { offset: this.#offset });
      }
      if (buf.length - at < idLen + 1) {
        this.#need = idLen + 1;
        break;
      }
      const sizeLen = vintLength(buf[at + idLen]!);
      if (sizeLen === 0)
        throw new MediaError('ERR_MEDIA_FORMAT', 'invalid EBML size', { offset: this.#offset });
      const headLen = idLen + sizeLen;
      if (buf.length - at < headLen) {
        this.#need = headLen;
        break;
      }
      const id = buf.readUIntBE(at, idLen);
      if (!this.#sawEbml) {
        if (id !== ID.EBML) throw new MediaError('ERR_MEDIA_FORMAT', 'not an EBML (WebM/Matroska) file');
        this.#sawEbml = true;
      }
      let size = buf[at + idLen]! & (0xff >> sizeLen);
      let unknown = size === 0xff >> sizeLen;
      for (let i = 1; i < sizeLen; i++) {
        const byte = buf[at + idLen + i]!;
        size = size * 256 + byte;
        if (byte !== 0xff) unknown = false;
      }
      // `#offset` is the absolute position of `buf[at]`.
      const start = this.#offset;
      if (MASTERS.has(id)) {
        if (unknown && id !== ID.Segment && id !== ID.Cluster) {
          throw new MediaError('ERR_MEDIA_FORMAT', `element 0x${id.toString(16)} of unknown size`, {
            offset: start,
          });
        }
        this.#openMaster(id, unknown ? undefined : start + headLen + size, items);
        at += headLen;
        this.#advance(headLen, items);
        continue;
      }
      if (unknown)
        throw new MediaError('ERR_MEDIA_FORMAT', `element 0x${id.toString(16)} of unknown size`, {
          offset: start,
        });
      if (LEAVES.has(id)) {
        if (size > MAX_LEAF_BYTES)
          throw new MediaError('ERR_MEDIA_FORMAT', `element of ${size} bytes`, { offset: start });
        if (buf.length - at < headLen + size) {
          this.#need = headLen + size;
          break;
        }
        this.#leaf(id, buf.subarray(at + headLen, at + headLen + size), items);
        at += headLen + size;
        this.#advance(headLen + size, items);
        continue;
      }
      // Not needed: skip it, without buffering what has not arrived yet.
      const have = Math.min(size, buf.length - at - headLen);
      at += headLen + have;
      this.#skip = size - have;
      this.#advance(headLen + have, items);
      if (this.#skip > 0) break;
    }
    // A copy, so the elements already parsed can be collected.
    this.#chunks = at >= buf.length ? [] : [Buffer.from(buf.subarray(at))];
    this.#bytes = Math.max(0, buf.length - at);
    return items;
  }

  /** End of input: fails if it stopped inside an element, or held no Opus track. */
  end(): OpusDemuxItem[] {
    const items: OpusDemuxItem[] = [];
    if (this.#bytes > 0 || this.#skip > 0) {
      throw new MediaError('ERR_MEDIA_TRUNCATED', 'WebM input ends inside an element', {
        offset: this.#offset,
      });
    }
    for (const open of this.#stack) {
      if (open.end !== undefined && open.end > this.#offset) {
        throw new MediaError('ERR_MEDIA_TRUNCATED', 'WebM input ends inside an element', {
          offset: this.#offset,
        });
      }
    }
    this.#flushGroup(items);
    if (!this.#track) throw new MediaError('ERR_MEDIA_FORMAT', 'no Opus audio track in the WebM input');
    return items;
  }

  #advance(n: number, items: OpusDemuxItem[]): void {
    this.#offset += n;
    this.#closeEnded(items);
  }

  #closeEnded(items: OpusDemuxItem[]): void {
    while (this.#stack.length > 0) {
      const top = this.#stack[this.#stack.length - 1]!;
      if (top.end === undefined || top.end > this.#offset) return;
      this.#stack.pop();
      this.#close(top.id, items);
    }
  }

  #openMaster(id: number, end: number | undefined, items: OpusDemuxItem[]): void {
    // An unknown-size Cluster ends where the next Cluster (or any top-level element) starts.
    if (id === ID.Cluster) {
      while (this.#stack.length > 0 && this.#stack[this.#stack.length - 1]!.id !== ID.Segment) {
        const open = this.#stack.pop()!;
        this.#close(open.id, items);
      }
      this.#finishTracks(items);
    }
    if (id === ID.TrackEntry) this.#entry = { number: 0, type: 0, codecId: '' };
    if (id === ID.BlockGroup) {
      this.#groupBlock = undefined;
      this.#groupDiscardNs = 0;
    }
    this.#stack.push({ id, end });
  }

  #close(id: number, items: OpusDemuxItem[]): void {
    if (id === ID.TrackEntry && this.#entry) {
      this.#tracks.push(this.#entry);
      this.#entry = undefined;
    } else if (id === ID.Tracks) this.#finishTracks(items);
    else if (id === ID.BlockGroup) this.#flushGroup(items);
  }

  #finishTracks(items: OpusDemuxItem[]): void {
    if (this.#tracksDone) return;
    this.#tracksDone = true;
    const audio = this.#tracks.find((t) => t.type === 2);
    if (audio?.codecId !== 'A_OPUS') return;
    if (!audio.codecPrivate) throw new MediaError('ERR_MEDIA_FORMAT', 'Opus track without its OpusHead');
    this.#track = audio;
    this.#head = parseOpusHead(audio.codecPrivate);
    // Matroska's CodecDelay, not the OpusHead pre-skip, says what to drop (as ffmpeg does).
    const preSkip = Math.round(((audio.codecDelayNs ?? 0) * 48_000) / 1e9);
    items.push({ kind: 'head', head: { ...this.#head, preSkip } });
  }

  #leaf(id: number, payload: Buffer, items: OpusDemuxItem[]): void {
    const entry = this.#entry;
    switch (id) {
      case ID.TrackNumber:
        if (entry) entry.number = readUint(payload);
        return;
      case ID.TrackType:
        if (entry) entry.type = readUint(payload);
        return;
      case ID.CodecID:
        if (entry) entry.codecId = payload.toString('latin1').replace(/\0+$/, '');
        return;
      case ID.CodecPrivate:
        if (entry) entry.codecPrivate = Buffer.from(payload);
        return;
      case ID.CodecDelay:
        if (entry) entry.codecDelayNs = readUint(payload);
        return;
      case ID.Channels:
        if (entry) entry.channels = readUint(payload);
        return;
      case ID.SimpleBlock:
        this.#block(payload, items);
        return;
      case ID.Block:
        this.#groupBlock = Buffer.from(payload);
        return;
      case ID.DiscardPadding:
        this.#groupDiscardNs = readInt(payload);
        return;
    }
  }

  #flushGroup(items: OpusDemuxItem[]): void {
    const block = this.#groupBlock;
    if (!block) return;
    this.#groupBlock = undefined;
    const emitted = this.#block(block, items);
    if (emitted && this.#groupDiscardNs > 0) {
      items.push({ kind: 'discard', samples: Math.round((this.#groupDiscardNs * 48_000) / 1e9) });
    }
    this.#groupDiscardNs = 0;
  }

  /** Emit the frames of a (Simple)Block of our track; returns whether it was ours. */
  #block(b: Buffer, items: OpusDemuxItem[]): boolean {
    if (!this.#track) return false;
    const numLen = vintLength(b[0] ?? 0);
    if (numLen === 0 || b.length < numLen + 3)
      throw new MediaError('ERR_MEDIA_FORMAT', 'malformed WebM block');
    let track = b[0]! & (0xff >> numLen);
    for (let i = 1; i < numLen; i++) track = track * 256 + b[i]!;
    if (track !== this.#track.number) return false;
    const flags = b[numLen + 2]!;
    const lacing = (flags >> 1) & 3;
    let at = numLen + 3;
    if (lacing === 0) {
      items.push({ kind: 'packet', data: Buffer.from(b.subarray(at)) });
      return true;
    }
    const count = b[at++]! + 1;
    const sizes: number[] = [];
    if (lacing === 1) {
      // Xiph lacing: each size a run of 255s and a final byte.
      for (let f = 0; f < count - 1; f++) {
        let size = 0;
        let byte = 255;
        while (byte === 255) {
          if (at >= b.length) throw new MediaError('ERR_MEDIA_FORMAT', 'malformed Xiph lacing');
          byte = b[at++]!;
          size += byte;
        }
        sizes.push(size);
      }
    } else if (lacing === 3) {
      // EBML lacing: the first size as a vint, the others as signed differences.
      let prev = 0;
      for (let f = 0; f < count - 1; f++) {
        const len = vintLength(b[at] ?? 0);
        if (len === 0 || at + len > b.length)
          throw new MediaError('ERR_MEDIA_FORMAT', 'malformed EBML lacing');
        let v = b[at]! & (0xff >> len);
        for (let i = 1; i < len; i++) v = v * 256 + b[at + i]!;
        at += len;
        const size = f === 0 ? v : prev + v - (2 ** (7 * len - 1) - 1);
        sizes.push(size);
        prev = size;
      }
    }
    const rest = b.length - at - sizes.reduce((s, x) => s + x, 0);
    if (lacing === 2) {
      if ((b.length - at) % count !== 0)
        throw new MediaError('ERR_MEDIA_FORMAT', 'malformed fixed-size lacing');
      for (let f = 0; f < count - 1; f++) sizes.push((b.length - at) / count);
      sizes.push((b.length - at) / count);
    } else {
      if (rest < 0) throw new MediaError('ERR_MEDIA_FORMAT', 'laced frame sizes exceed the block');
      sizes.push(rest);
    }
    for (const size of sizes) {
      if (size < 0) throw new MediaError('ERR_MEDIA_FORMAT', 'negative laced frame size');
      items.push({ kind: 'packet', data: Buffer.from(b.subarray(at, at + size)) });
      at += size;
    }
    return true;
  }
}
