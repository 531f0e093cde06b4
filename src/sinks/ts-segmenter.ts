// TsSegmenter: the pure core that cuts an MPEG transport stream into HLS media segments. Bytes
// in (any chunking), events out: the streams the PMT lists, the first audio timestamp (zero of
// the captions' timeline), and segments that each start at a video keyframe (or, with audio
// only, at an audio packet) with the PAT and PMT, the bytes of each, and the timestamp where
// each ends. Segments keep within the playlists' target duration (RFC 8216 4.3.3.1: rounded,
// at most the target; 6.2.1: which never changes): one whose keyframe does not come in time is
// cut at a video frame, and says it starts without one; where the audio goes on after the
// pictures, at audio. A segment can still outlast the target over a gap in the pictures (ffmpeg
// writes the audio of the gap after the picture that ends it, so no cut point comes in time)
// and with video of under two frames a second. No stream, no I/O: hlsOutput() is the adapter.

import { InvalidArgumentError } from '../protocol/errors.ts';

/** 90 kHz ticks, the MPEG clock of every PTS. */
export const MPEG_CLOCK = 90_000;
const PACKET = 188;
const SYNC = 0x47;
const PTS_WRAP = 2 ** 33;

/** One elementary stream of the program, as the PMT lists it. */
export interface TsStream {
  pid: number;
  /** The PMT's stream_type (0x1b H.264, 0x24 HEVC, 0x0f AAC, 0x03/0x04 MP3, 0x81 AC-3, ...). */
  streamType: number;
  codec: string;
}

/** What the segmenter says about the stream, in order. */
export type SegmenterEvent =
  /** The program's video (the first) and audio (the first) streams, from the first PMT. */
  | { type: 'streams'; video: TsStream | undefined; audio: TsStream | undefined }
  /** The first audio PTS of the whole stream, unwrapped (the captions' time zero). */
  | { type: 'audio-start'; pts: number }
  /**
   * A segment begins at `pts` (unwrapped); `data` events follow until its `segment-end`.
   * `keyframe`: it starts where a player can start decoding (a video keyframe, or audio alone);
   * false when the input's keyframes are further apart than the target duration allows.
   */
  | { type: 'segment-start'; pts: number; keyframe: boolean }
  | { type: 'data'; bytes: Buffer }
  /**
   * The RFC 6381 codecs of the media (`avc1.64001f,mp4a.40.2`), once read from its first video
   * keyframe and audio frame, or undefined when one of them cannot be named (HEVC, MPEG-2
   * video, LATM, MPEG audio Layer II): a master playlist then lists no CODECS rather than a
   * wrong one. Once.
   */
  | { type: 'codecs'; codecs: string | undefined }
  /** The segment ends at `pts`, where the next one begins (or its last sample's end). */
  | { type: 'segment-end'; pts: number };

const CODECS = new Map<number, string>([
  [0x01, 'mpeg1video'],
  [0x02, 'mpeg2video'],
  [0x1b, 'h264'],
  [0x24, 'hevc'],
  [0x03, 'mp3'],
  [0x04, 'mp3'],
  [0x0f, 'aac'],
  [0x11, 'aac_latm'],
  [0x81, 'ac3'],
  [0x87, 'eac3'],
]);
const VIDEO_TYPES = new Set([0x01, 0x02, 0x1b, 0x24]);
const AUDIO_TYPES = new Set([0x03, 0x04, 0x0f, 0x11, 0x81, 0x87]);

/** Options of {@link TsSegmenter}. */
export interface TsSegmenterOptions {
  /**
   * Seconds a segment lasts at least before the next keyframe cuts it. The playlists' target
   * duration is this, rounded up (T): a segment whose next keyframe is not due before T + 0.5 s
   * (its duration rounded would be above T) is cut at a video frame before that. Default 2.
   */
  targetDurationSec?: number;
}

/** The playlists' EXT-X-TARGETDURATION for a segmenter's `targetDurationSec`. */
export function targetDurationOf(targetDurationSec: number): number {
  return Math.ceil(targetDurationSec);
}

/** Cuts an MPEG-TS into segments that each start with PAT, PMT and a keyframe. */
export class TsSegmenter {
  readonly #target: number;
  /** Ticks a segment must stay below: its duration rounded is then at most the target duration. */
  readonly #ceiling: number;
  #rest: Buffer = Buffer.alloc(0);
  #pat: Buffer | undefined;
  #pmt: Buffer | undefined;
  #pmtPid: number | undefined;
  #video: TsStream | undefined;
  #audio: TsStream | undefined;
  #streamsKnown = false;
  #audioStart: number | undefined;
  /** Start of the open segment (unwrapped PTS), or undefined before the first. */
  #segmentStart: number | undefined;
  /** The latest timestamp seen (unwrapped), for the end of the last segment. */
  #lastPts: number | undefined;
  #lastAudioPts: number | undefined;
  /** Ticks between the last two audio packets: the last one's length, roughly. */
  #audioGap = 0;
  #lastVideoPts: number | undefined;
  /** The longest step between video timestamps so far (a frame, or more with B-frames), capped. */
  #videoStep = 0;
  /** The last video keyframe's timestamp, and the one before it: when the next one is due. */
  #keyframes: [number | undefined, number | undefined] = [undefined, undefined];
  /** The open segment started at a keyframe. */
  #segmentKeyframe = false;
  /** The codecs, while they are being read: null for one that cannot be named. */
  #codecs: { video: string | null | undefined; audio: string | null | undefined; said: boolean } = {
    video: undefined,
    audio: undefined,
    said: false,
  };
  /** The first video keyframe's first bytes, where its SPS is. */
  #keyframeBytes: Buffer[] = [];

  constructor(options: TsSegmenterOptions = {}) {
    const target = options.targetDurationSec ?? 2;
    if (!(target > 0 && Number.isFinite(target)))
      throw new InvalidArgumentError(`TsSegmenter: targetDurationSec must be > 0, got ${target}`);
    this.#target = Math.round(target * MPEG_CLOCK);
    // Half a millisecond under T + 0.5 s: EXTINF is written to the millisecond, rounded.
    this.#ceiling = (targetDurationOf(target) + 0.5) * MPEG_CLOCK - MPEG_CLOCK / 2000;
  }

  push(chunk: Buffer): SegmenterEvent[] {
    const events: SegmenterEvent[] = [];
    const bytes = this.#rest.length > 0 ? Buffer.concat([this.#rest, chunk]) : chunk;
    let run: number | undefined;
    let offset = 0;
    const flushRun = (end: number) => {
      if (run !== undefined && end > run)
        events.push({ type: 'data', bytes: Buffer.from(bytes.subarray(run, end)) });
      run = undefined;
    };
    while (offset + PACKET <= bytes.length) {
      if (bytes[offset] !== SYNC) {
        // Lost sync (a damaged input): skip to the next sync byte.
        flushRun(offset);
        const next = bytes.indexOf(SYNC, offset + 1);
        offset = next === -1 ? bytes.length : next;
        continue;
      }
      const packet = bytes.subarray(offset, offset + PACKET);
      const cut = this.#packet(packet, events);
      if (cut) flushRun(offset);
      if (cut || (run === undefined && this.#segmentStart !== undefined)) {
        if (cut) {
          events.push(...cut);
          // Each segment opens with the tables, so that a player can start at any of them.
          events.push({ type: 'data', bytes: Buffer.concat([this.#pat!, this.#pmt!]) });
        }
        run = offset;
      }
      offset += PACKET;
    }
    flushRun(offset);
    this.#rest = Buffer.from(bytes.subarray(offset));
    return events;
  }

  /** The input ended: the open segment ends after its last sample. */
  end(): SegmenterEvent[] {
    this.#rest = Buffer.alloc(0);
    if (this.#segmentStart === undefined) return [];
    const end = Math.max(this.#lastPts ?? this.#segmentStart, (this.#lastAudioPts ?? 0) + this.#audioGap);
    this.#segmentStart = undefined;
    return [{ type: 'segment-end', pts: end }];
  }

  /** Read one packet; returns the events of a cut before it, if it starts a segment. */
  #packet(packet: Buffer, events: SegmenterEvent[]): SegmenterEvent[] | undefined {
    const pid = ((packet[1]! & 0x1f) << 8) | packet[2]!;
    const unitStart = (packet[1]! & 0x40) !== 0;
    const adaptation = (packet[3]! >> 4) & 0x3;
    let payload = 4;
    let randomAccess = false;
    if (adaptation & 0x2) {
      const length = packet[4]!;
      randomAccess = length > 0 && (packet[5]! & 0x40) !== 0;
      payload = 5 + length;
    }
    if (!(adaptation & 0x1) || payload >= PACKET) return undefined;
    if (pid === 0 && unitStart) {
      this.#pat = Buffer.from(packet);
      this.#pmtPid = patProgramMapPid(packet.subarray(payload));
      return undefined;
    }
    if (pid === this.#pmtPid && unitStart) {
      const streams = pmtStreams(packet.subarray(payload));
      if (!streams) return undefined;
      this.#pmt = Buffer.from(packet);
      if (!this.#streamsKnown) {
        this.#video = streams.find((s) => VIDEO_TYPES.has(s.streamType));
        this.#audio = streams.find((s) => AUDIO_TYPES.has(s.streamType));
        this.#streamsKnown = true;
        events.push({ type: 'streams', video: this.#video, audio: this.#audio });
      }
      return undefined;
    }
    if (this.#streamsKnown && !this.#codecs.said)
      this.#readCodecs(pid, unitStart, randomAccess, packet.subarray(payload), events);
    if (!unitStart || !this.#streamsKnown) return undefined;
    const isVideo = pid === this.#video?.pid;
    const isAudio = pid === this.#audio?.pid;
    if (!isVideo && !isAudio) return undefined;
    const raw = pesPts(packet.subarray(payload));
    if (raw === undefined) return undefined;
    const pts = this.#unwrap(raw);
    if (isAudio) {
      if (this.#audioStart === undefined) {
        this.#audioStart = pts;
        events.push({ type: 'audio-start', pts });
      }
      if (this.#lastAudioPts !== undefined && pts > this.#lastAudioPts)
        this.#audioGap = pts - this.#lastAudioPts;
      this.#lastAudioPts = pts;
    }
    if (isVideo) {
      if (this.#lastVideoPts !== undefined && pts > this.#lastVideoPts)
        this.#videoStep = Math.max(this.#videoStep, Math.min(pts - this.#lastVideoPts, MPEG_CLOCK / 2));
      this.#lastVideoPts = pts;
    }
    // Segments start where a player can start decoding: a video keyframe, or any audio packet
    // when there is no video. A segment whose keyframe comes too late (the last interval between
    // keyframes says when the next is due) is cut at the last video frame that keeps it under
    // the ceiling; the segment after it ends at the next keyframe, however short, so the
    // segments are back on the keyframes after one interval.
    const keyframe = this.#video ? isVideo && randomAccess : isAudio;
    // The pictures ended and the audio goes on (audio 0.2 s past the last picture, where a
    // muxer interleaves audio behind the video): cut at audio instead.
    const videoGone =
      isAudio &&
      this.#video !== undefined &&
      this.#lastVideoPts !== undefined &&
      pts - this.#lastVideoPts > MPEG_CLOCK / 5;
    const start = this.#segmentStart;
    let cut: SegmenterEvent[] | undefined;
    if ((keyframe || isVideo || videoGone) && this.#pat && this.#pmt) {
      if (start === undefined) {
        if (keyframe) cut = [{ type: 'segment-start', pts, keyframe }];
      } else if (
        (keyframe && pts > start && (pts - start >= this.#target || !this.#segmentKeyframe)) ||
        (isVideo && !keyframe && pts > start && this.#lateKeyframe(pts, start)) ||
        (videoGone && pts > start && pts - start + this.#audioGap >= this.#ceiling)
      ) {
        cut = [
          { type: 'segment-end', pts },
          { type: 'segment-start', pts, keyframe },
        ];
      }
      if (cut) {
        this.#segmentStart = pts;
        this.#segmentKeyframe = keyframe;
      }
    }
    if (isVideo && randomAccess && pts !== this.#keyframes[1]) this.#keyframes = [this.#keyframes[1], pts];
    if (this.#lastPts === undefined || pts > this.#lastPts) this.#lastPts = pts;
    return cut;
  }

  /**
   * At video frame `pts` of the segment from `start`: the next frame could take the segment to
   * the ceiling, and no keyframe is due before it (its interval so far says when the next one
   * comes; until two were seen, none is).
   */
  #lateKeyframe(pts: number, start: number): boolean {
    if (pts - start + this.#videoStep < this.#ceiling) return false;
    const [before, last] = this.#keyframes;
    if (before === undefined || last === undefined || last <= before) return true;
    const due = last + (last - before);
    return !(due > pts && due - start < this.#ceiling);
  }

  /** Names the codecs from the first audio frame and the first video keyframe's SPS. */
  #readCodecs(
    pid: number,
    unitStart: boolean,
    randomAccess: boolean,
    payload: Buffer,
    events: SegmenterEvent[],
  ): void {
    const codecs = this.#codecs;
    const video = this.#video;
    const audio = this.#audio;
    if (video === undefined) codecs.video = null;
    else if (codecs.video === undefined && pid === video.pid) {
      if (video.streamType !== 0x1b) codecs.video = null;
      else if (unitStart && this.#keyframeBytes.length > 0)
        codecs.video = null; // its PES ended without an SPS
      else if (randomAccess || this.#keyframeBytes.length > 0) {
        this.#keyframeBytes.push(unitStart ? pesData(payload) : payload);
        codecs.video = avcCodec(Buffer.concat(this.#keyframeBytes));
        if (codecs.video === undefined && this.#keyframeBytes.length >= 16) codecs.video = null;
        if (codecs.video !== undefined) this.#keyframeBytes = [];
      }
    }
    if (audio === undefined) codecs.audio = null;
    else if (codecs.audio === undefined && pid === audio.pid && unitStart)
      codecs.audio = audioCodec(audio.streamType, pesData(payload));
    if (codecs.video === undefined || codecs.audio === undefined) return;
    codecs.said = true;
    const named = [codecs.video, codecs.audio].filter((c) => c !== null);
    const unnamed = (video && codecs.video === null) || (audio && codecs.audio === null);
    events.push({ type: 'codecs', codecs: unnamed || named.length === 0 ? undefined : named.join(',') });
  }

  /** A 33-bit PTS as a count that keeps growing past the wrap (every 26.5 hours). */
  #unwrap(raw: number): number {
    const reference = this.#lastPts;
    if (reference === undefined) return raw;
    const base = reference - (reference % PTS_WRAP);
    let best = base + raw;
    for (const candidate of [best - PTS_WRAP, best + PTS_WRAP])
      if (Math.abs(candidate - reference) < Math.abs(best - reference)) best = candidate;
    return best;
  }
}

/** The program_map_PID of the first program a PAT section lists. */
function patProgramMapPid(payload: Buffer): number | undefined {
  const start = 1 + payload[0]!;
  const section = payload.subarray(start);
  if (section.length < 12 || section[0] !== 0x00) return undefined;
  const length = ((section[1]! & 0x0f) << 8) | section[2]!;
  const end = Math.min(section.length, 3 + length - 4);
  for (let i = 8; i + 4 <= end; i += 4) {
    const program = (section[i]! << 8) | section[i + 1]!;
    if (program !== 0) return ((section[i + 2]! & 0x1f) << 8) | section[i + 3]!;
  }
  return undefined;
}

/** The elementary streams a PMT section lists (undefined for a section that is no PMT). */
function pmtStreams(payload: Buffer): TsStream[] | undefined {
  const section = payload.subarray(1 + payload[0]!);
  if (section.length < 12 || section[0] !== 0x02) return undefined;
  const length = ((section[1]! & 0x0f) << 8) | section[2]!;
  const end = Math.min(section.length, 3 + length - 4);
  const infoLength = ((section[10]! & 0x0f) << 8) | section[11]!;
  const streams: TsStream[] = [];
  for (let i = 12 + infoLength; i + 5 <= end; ) {
    const streamType = section[i]!;
    const pid = ((section[i + 1]! & 0x1f) << 8) | section[i + 2]!;
    const esInfo = ((section[i + 3]! & 0x0f) << 8) | section[i + 4]!;
    streams.push({ pid, streamType, codec: CODECS.get(streamType) ?? `0x${streamType.toString(16)}` });
    i += 5 + esInfo;
  }
  return streams;
}

/** The elementary stream's bytes in the first packet of a PES. */
function pesData(payload: Buffer): Buffer {
  if (payload.length < 9 || payload[0] !== 0 || payload[1] !== 0 || payload[2] !== 1) return Buffer.alloc(0);
  return payload.subarray(9 + payload[8]!);
}

const START_CODE = Buffer.from([0, 0, 1]);
const hex2 = (n: number) => n.toString(16).padStart(2, '0');

/** `avc1.PPCCLL` from the first H.264 SPS in Annex B bytes; undefined when none is whole yet. */
function avcCodec(bytes: Buffer): string | undefined {
  for (let i = bytes.indexOf(START_CODE); i !== -1; i = bytes.indexOf(START_CODE, i + 3)) {
    if (i + 6 >= bytes.length) return undefined;
    if ((bytes[i + 3]! & 0x1f) === 7)
      return `avc1.${hex2(bytes[i + 4]!)}${hex2(bytes[i + 5]!)}${hex2(bytes[i + 6]!)}`;
  }
  return undefined;
}
/** The audio's RFC 6381 name from its stream type and first frame; null when it cannot be named. */
function audioCodec(streamType: number, frame: Buffer): string | null {
  switch (streamType) {
    case 0x0f: // AAC in ADTS: the object type is the profile + 1
      return frame.length >= 3 && frame[0] === 0xff && (frame[1]! & 0xf0) === 0xf0
        ? `mp4a.40.${(frame[2]! >> 6) + 1}`
        : null;
    case 0x03:
    case 0x04:
      // MPEG audio: Layer III is MP3; Layer II (ffmpeg's MPEG-TS default, DVB) is not named.
      return frame.length >= 2 &&
        frame[0] === 0xff &&
        (frame[1]! & 0xe0) === 0xe0 &&
        ((frame[1]! >> 1) & 3) === 1
        ? 'mp4a.40.34'
        : null;
    case 0x81:
      return 'ac-3';
    case 0x87:
      return 'ec-3';
    default:
      return null;
  }
}

/** The PTS of a PES packet that starts in `payload`, when it has one. */
function pesPts(payload: Buffer): number | undefined {
  if (payload.length < 14 || payload[0] !== 0 || payload[1] !== 0 || payload[2] !== 1) return undefined;
  if ((payload[7]! & 0x80) === 0) return undefined;
  const p = payload.subarray(9, 14);
  return (p[0]! & 0x0e) * 2 ** 29 + ((p[1]! << 7) | (p[2]! >> 1)) * 2 ** 15 + ((p[3]! << 7) | (p[4]! >> 1));
}
