// Ogg Opus demuxer core (RFC 3533, RFC 7845): bytes in, Opus packets out with the granule
// positions that trim the decoded audio at the end. Pages are CRC-checked; packets continued
// across pages are joined; a stream cut inside a page or packet is an error, never dropped.
// (prism-media's OggDemuxer stalls on continued packets and has no granule positions.)

import { MediaError } from './media-error.ts';
import { UnitWalker } from './unit-walker.ts';

/** The identification header of an Opus stream (RFC 7845 section 5.1). */
export interface OpusHead {
  version: number;
  channels: number;
  /** 48 kHz samples to drop from the start of the decoded output. */
  preSkip: number;
  /** Sample rate of the original input (informational). */
  inputSampleRate: number;
  /** Q7.8 dB gain to apply. */
  outputGain: number;
  mappingFamily: number;
}

export function parseOpusHead(packet: Uint8Array): OpusHead {
  const b = Buffer.from(packet.buffer, packet.byteOffset, packet.byteLength);
  if (b.length < 19 || b.toString('latin1', 0, 8) !== 'OpusHead') {
    throw new MediaError('ERR_MEDIA_FORMAT', 'not an OpusHead packet');
  }
  const head: OpusHead = {
    version: b[8]!,
    channels: b[9]!,
    preSkip: b.readUInt16LE(10),
    inputSampleRate: b.readUInt32LE(12),
    outputGain: b.readInt16LE(16),
    mappingFamily: b[18]!,
  };
  if (head.version >> 4 !== 0)
    throw new MediaError('ERR_MEDIA_FORMAT', `unsupported OpusHead version ${head.version}`);
  if (head.channels < 1) throw new MediaError('ERR_MEDIA_FORMAT', 'OpusHead with zero channels');
  return head;
}

/** What the demuxer yields, in stream order. */
export type OpusDemuxItem =
  /** The start of an Opus stream (again for each stream of a chained file). */
  | { kind: 'head'; head: OpusHead }
  /**
   * One Opus packet. `endGranule`, on the last packet completed on a page, is the page's granule
   * position: 48 kHz samples (pre-skip included) decoded up to the end of this packet.
   */
  | { kind: 'packet'; data: Buffer; endGranule?: number }
  /** Samples to drop from the end of the preceding packet's output (WebM DiscardPadding). */
  | { kind: 'discard'; samples: number };

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let r = i << 24;
    for (let k = 0; k < 8; k++) r = r & 0x80000000 ? (r << 1) ^ 0x04c11db7 : r << 1;
    table[i] = r >>> 0;
  }
  return table;
})();

/** The Ogg page checksum (CRC-32, polynomial 0x04C11DB7, not reflected) with its field zeroed. */
export function oggCrc(page: Uint8Array): number {
  let crc = 0;
  for (let i = 0; i < page.length; i++) {
    const byte = i >= 22 && i < 26 ? 0 : page[i]!;
    crc = ((crc << 8) ^ CRC_TABLE[((crc >>> 24) ^ byte) & 0xff]!) >>> 0;
  }
  return crc;
}

const HEADER_BYTES = 27;
const FLAG_CONTINUED = 1;
const FLAG_BOS = 2;
const FLAG_EOS = 4;

/**
 * Follows the page structure of any Ogg stream (Vorbis, FLAC, Speex ... that ffmpeg decodes)
 * without keeping it: whether the input so far ends on a page boundary. ffmpeg decodes an Ogg
 * file cut inside a page without a word (and drops the pages before it too).
 */
export class OggPageWalker extends UnitWalker {
  constructor() {
    super(HEADER_BYTES + 255);
  }

  /** The fixed header, then its segment table; not Ogg (junk, another format): no verdict. */
  protected headNeed(have: number): number | undefined {
    if (have < HEADER_BYTES) return HEADER_BYTES;
    if (this.head.readUInt32BE(0) !== 0x4f676753) return undefined;
    return HEADER_BYTES + this.head[26]!;
  }

  /** The sum of the segment table. */
  protected bodyLength(): number {
    let body = 0;
    for (let i = 0; i < this.head[26]!; i++) body += this.head[HEADER_BYTES + i]!;
    return body;
  }
}

/** Default bound of one packet (a continued packet may span any number of pages). */
export const MAX_OGG_PACKET_BYTES = 64 * 1024 * 1024;

export interface OggOpusDemuxerOptions {
  /** Largest packet assembled; a longer one is `ERR_MEDIA_FORMAT`. Default 64 MiB. */
  maxPacketBytes?: number;
}

export class OggOpusDemuxer {
  readonly #maxPacket: number;
  /** Input not parsed yet, and its length: joined only once a page can be complete. */
  #chunks: Buffer[] = [];
  #bytes = 0;
  /** Bytes the next page needs before parsing can go on. */
  #need = HEADER_BYTES;
  /** Bytes consumed before `#chunks`. */
  #offset = 0;
  /** Serial of the Opus stream being read, or undefined between streams. */
  #serial: number | undefined;
  /** Packets of the current stream seen (0: OpusHead next, 1: OpusTags next). */
  #packetIndex = 0;
  #partial: Buffer[] = [];
  #partialBytes = 0;
  #streams = 0;
  /** A page that is not a BOS page has been seen since the last BOS page (its link's data began). */
  #linkStarted = false;

  constructor(options: OggOpusDemuxerOptions = {}) {
    this.#maxPacket = options.maxPacketBytes ?? MAX_OGG_PACKET_BYTES;
  }

  /** Opus streams started so far. */
  get streams(): number {
    return this.#streams;
  }

  push(chunk: Uint8Array): OpusDemuxItem[] {
    if (chunk.length === 0) return [];
    this.#chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
    this.#bytes += chunk.length;
    // Joining the input on every push would copy a page over and over when it comes in small chunks.
    if (this.#bytes < this.#need) return [];
    const buf = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    const items: OpusDemuxItem[] = [];
    let at = 0;
    this.#need = HEADER_BYTES;
    while (buf.length - at >= HEADER_BYTES) {
      if (buf.readUInt32BE(at) !== 0x4f676753) {
        throw new MediaError('ERR_MEDIA_FORMAT', 'Ogg capture pattern "OggS" not found where a page starts', {
          offset: this.#offset + at,
        });
      }
      if (buf[at + 4] !== 0)
        throw new MediaError('ERR_MEDIA_FORMAT', `unsupported Ogg version ${buf[at + 4]}`);
      const segments = buf[at + 26]!;
      if (buf.length - at < HEADER_BYTES + segments) {
        this.#need = HEADER_BYTES + segments;
        break;
      }
      let bodyBytes = 0;
      for (let i = 0; i < segments; i++) bodyBytes += buf[at + HEADER_BYTES + i]!;
      const pageBytes = HEADER_BYTES + segments + bodyBytes;
      if (buf.length - at < pageBytes) {
        this.#need = pageBytes;
        break;
      }
      const page = buf.subarray(at, at + pageBytes);
      if (oggCrc(page) !== page.readUInt32LE(22)) {
        throw new MediaError('ERR_MEDIA_FORMAT', 'Ogg page checksum mismatch (corrupt input)', {
          offset: this.#offset + at,
        });
      }
      this.#page(page, segments, items);
      at += pageBytes;
    }
    this.#offset += at;
    // A copy, so the pages already parsed can be collected.
    this.#chunks = at === buf.length ? [] : [Buffer.from(buf.subarray(at))];
    this.#bytes = buf.length - at;
    return items;
  }

  /** End of input: fails if it stopped inside a page or packet, or held no Opus stream. */
  end(): void {
    if (this.#bytes > 0) {
      throw new MediaError(
        'ERR_MEDIA_TRUNCATED',
        `Ogg input ends inside a page (${this.#bytes} bytes left)`,
        {
          offset: this.#offset,
        },
      );
    }
    if (this.#partial.length > 0) {
      throw new MediaError(
        'ERR_MEDIA_TRUNCATED',
        'Ogg input ends inside a packet continued on a missing page',
      );
    }
    if (this.#streams === 0) throw new MediaError('ERR_MEDIA_FORMAT', 'no Opus stream in the Ogg input');
  }

  #page(page: Buffer, segments: number, items: OpusDemuxItem[]): void {
    const flags = page[5]!;
    const granule = Number(page.readBigInt64LE(6));
    const serial = page.readUInt32LE(14);
    const body = HEADER_BYTES + segments;
    if (flags & FLAG_BOS) {
      // Every BOS page of a link comes before its other pages (RFC 3533): one after them starts
      // the next link of a chained file, so every stream of the last link has ended, whether or
      // not its EOS page came (a recording cut short, then another appended to it).
      if (this.#linkStarted) {
        this.#linkStarted = false;
        this.#endStream();
      }
      const first = page.subarray(body, body + 8).toString('latin1');
      // A new Opus stream: the first one, or the next of a chained file once the last ended.
      if (first === 'OpusHead' && this.#serial === undefined) {
        this.#serial = serial;
        this.#packetIndex = 0;
        this.#partial = [];
        this.#partialBytes = 0;
      }
    } else this.#linkStarted = true;
    if (serial !== this.#serial) return; // another logical stream (video, a second track)
    if (!(flags & FLAG_CONTINUED) && this.#partial.length > 0) {
      throw new MediaError('ERR_MEDIA_FORMAT', 'Ogg packet continued on a page not marked as continued');
    }
    let lastPacket: { kind: 'packet'; data: Buffer; endGranule?: number } | undefined;
    let pos = body;
    let start = body;
    for (let i = 0; i < segments; i++) {
      const lace = page[HEADER_BYTES + i]!;
      pos += lace;
      if (lace === 255) continue;
      this.#gather(page.subarray(start, pos));
      const packet =
        this.#partial.length === 1 ? Buffer.from(this.#partial[0]!) : Buffer.concat(this.#partial);
      this.#partial = [];
      this.#partialBytes = 0;
      start = pos;
      const item = this.#packet(packet);
      if (item) {
        items.push(item);
        if (item.kind === 'packet') lastPacket = item;
      }
    }
    // A packet whose last lacing value is 255 continues on the next page.
    if (start < pos) this.#gather(page.subarray(start, pos));
    if (lastPacket && granule >= 0) lastPacket.endGranule = granule;
    if (flags & FLAG_EOS) this.#endStream();
  }

  /** The Opus stream being read has ended (its EOS page, or the next link began). */
  #endStream(): void {
    if (this.#partial.length > 0)
      throw new MediaError('ERR_MEDIA_TRUNCATED', 'Ogg stream ends inside a packet');
    this.#serial = undefined;
  }

  /** Add a piece of the packet being assembled; bounded, as a packet may go on for any number of pages. */
  #gather(piece: Buffer): void {
    this.#partialBytes += piece.length;
    if (this.#partialBytes > this.#maxPacket) {
      throw new MediaError('ERR_MEDIA_FORMAT', `Ogg packet over ${this.#maxPacket} bytes`, {
        offset: this.#offset,
      });
    }
    this.#partial.push(piece);
  }

  #packet(packet: Buffer): OpusDemuxItem | undefined {
    const index = this.#packetIndex++;
    if (index === 0) {
      this.#streams++;
      return { kind: 'head', head: parseOpusHead(packet) };
    }
    if (index === 1) {
      if (packet.toString('latin1', 0, 8) !== 'OpusTags') {
        throw new MediaError('ERR_MEDIA_FORMAT', 'the second Opus packet is not OpusTags');
      }
      return undefined;
    }
    return { kind: 'packet', data: packet };
  }
}
