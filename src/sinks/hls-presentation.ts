// HlsPresentation: the pure core of a live HLS presentation with captions. It is told of media
// segments as they complete and of caption cues as they are made, and says what to publish
// when: each media segment is held back by a fixed delay (a delay line), so that the captions
// of its speech exist when it goes out; then its WebVTT segment (the cues it overlaps, timed on
// the media's clock by X-TIMESTAMP-MAP), the playlists of the sliding window, the master
// playlist, and the files that fell out of the window. A cue made too late for its own segment
// goes into the next one to be published: no caption is ever dropped. No I/O: hlsOutput() writes
// what it says.

import { InvalidArgumentError } from '../protocol/errors.ts';
import { type Cue, formatVttCue } from '../transforms/to-captions.ts';
import { MPEG_CLOCK, targetDurationOf } from './ts-segmenter.ts';

/** Names of the files a presentation writes, in its directory. */
export const HLS_FILES = {
  master: 'master.m3u8',
  media: 'media.m3u8',
  subtitles: 'subtitles.m3u8',
} as const;

/** Options of {@link HlsPresentation}. */
export interface HlsPresentationOptions {
  /** Seconds each segment is held back after it was recorded (the delay line). */
  delaySec: number;
  /** Segments listed in the playlists (the sliding window). */
  windowSegments: number;
  /**
   * Seconds a segment lasts at least, as the segmenter was told; the playlists' target
   * duration is this rounded up, from the first playlist to the last (RFC 8216 says it must not
   * change, and the segmenter keeps every segment within it).
   */
  targetDurationSec: number;
  /** The captions' language, a BCP 47 tag, when known. */
  language?: string | undefined;
  /** The subtitle rendition's name in a player's menu. Default `Captions`. */
  name?: string;
  /** Speakers as WebVTT voices (`<v SPEAKER_00>`). Default true. */
  speakerLabels?: boolean;
}

/** A media segment, complete on disk. */
export interface CompletedSegment {
  /** Its file name in the presentation's directory. */
  uri: string;
  /** Where it starts and ends (unwrapped 90 kHz PTS). */
  startPts: number;
  endPts: number;
  bytes: number;
}

/** What to do now: files to write (each whole, atomically) in order, then files to remove. */
export interface Publication {
  write: { name: string; text: string }[];
  remove: string[];
  /** Media segments this publication lists for the first time. */
  published: number;
}

interface Pending extends CompletedSegment {
  sequence: number;
  /** Wall-clock ms when it may go out. */
  dueMs: number;
  /** Wall-clock ms of its start (for EXT-X-PROGRAM-DATE-TIME). */
  wallStartMs: number;
}

interface Listed {
  sequence: number;
  media: string;
  subtitles: string;
  durationSec: number;
  wallStartMs: number;
}

/** A cue waiting to be published, and whether a segment carried it yet. */
interface HeldCue {
  cue: Cue;
  carried: boolean;
}

const WRAP = 2 ** 33;

/** The pure core of a live HLS presentation with a WebVTT subtitle rendition. */
export class HlsPresentation {
  readonly #delayMs: number;
  readonly #window: number;
  readonly #target: number;
  readonly #options: HlsPresentationOptions;
  readonly #prefix: string;
  /** Complete media segments not yet published, oldest first. */
  readonly #pending: Pending[] = [];
  /** Segments in the playlists now, then those dropped from them whose files are kept a while. */
  readonly #listed: Listed[] = [];
  readonly #retired: Listed[] = [];
  readonly #cues: HeldCue[] = [];
  #sequence = 0;
  #audioStart: number | undefined;
  /** The wall clock at the first segment's start, and that start (PTS). */
  #anchor: { wallMs: number; pts: number } | undefined;
  /** Every segment starts where a player can start decoding (audio alone); unknown before the streams. */
  #independent = false;
  /** The media's RFC 6381 codecs, when the segmenter could name them all. */
  #codecs: string | undefined;
  #masterWritten = false;
  #mediaEnded = false;
  #captionsEnded = false;
  #endListed = false;
  #peakBitsPerSec = 0;

  /**
   * @param prefix what names this run's segment files (so that a player's cache never takes a
   *   segment of an earlier run for one of this run).
   */
  constructor(options: HlsPresentationOptions, prefix: string) {
    if (!(options.delaySec >= 0 && Number.isFinite(options.delaySec)))
      throw new InvalidArgumentError(
        `hls: delaySec must be a number of seconds >= 0, got ${options.delaySec}`,
      );
    if (!(Number.isSafeInteger(options.windowSegments) && options.windowSegments >= 2))
      throw new InvalidArgumentError(
        `hls: windowSegments must be an integer >= 2, got ${options.windowSegments}`,
      );
    if (!(options.targetDurationSec > 0 && Number.isFinite(options.targetDurationSec)))
      throw new InvalidArgumentError(
        `hls: targetDurationSec must be a number of seconds > 0, got ${options.targetDurationSec}`,
      );
    if (!/^[\w-]+$/.test(prefix)) throw new InvalidArgumentError(`hls: bad segment prefix ${prefix}`);
    this.#delayMs = options.delaySec * 1000;
    this.#window = options.windowSegments;
    this.#target = options.targetDurationSec;
    this.#options = options;
    this.#prefix = prefix;
  }

  /** Complete segments waiting for their time. */
  get pending(): number {
    return this.#pending.length;
  }

  /** The presentation is over: every segment out, the playlists closed. */
  get ended(): boolean {
    return this.#endListed;
  }

  /** The first audio timestamp: the captions' time zero. */
  audioStart(pts: number): void {
    this.#audioStart ??= pts;
  }

  /**
   * The media's streams, before its first segment. With video, a segment may start without a
   * keyframe (the input's keyframes further apart than the target duration), so the master
   * playlist claims independent segments for audio alone only.
   */
  streams(video: boolean): void {
    this.#independent = !video;
  }

  /** The media's codecs (`avc1.64001f,mp4a.40.2`), for the master playlist's CODECS. */
  codecs(codecs: string | undefined): void {
    this.#codecs = codecs;
  }

  /** A segment began at `pts`, at wall time `nowMs`: the first one anchors the delay line. */
  segmentStarted(pts: number, nowMs: number): void {
    this.#anchor ??= { wallMs: nowMs, pts };
  }

  /** A media segment is complete on disk (at wall time `nowMs`). */
  segmentCompleted(segment: CompletedSegment, nowMs: number): void {
    this.#anchor ??= { wallMs: nowMs, pts: segment.startPts };
    const anchor = this.#anchor;
    const wallStartMs = anchor.wallMs + ((segment.startPts - anchor.pts) * 1000) / MPEG_CLOCK;
    const wallEndMs = anchor.wallMs + ((segment.endPts - anchor.pts) * 1000) / MPEG_CLOCK;
    // Held back from when it was recorded: its end on the input's clock, or when it came, if
    // it came later than that (a source that fell behind). An input faster than real time
    // (a file) goes out at its own pace.
    this.#pending.push({
      ...segment,
      sequence: this.#sequence++,
      dueMs: Math.max(nowMs, wallEndMs) + this.#delayMs,
      wallStartMs,
    });
  }

  /** Cues of the captions (times in ms from the first audio). */
  addCues(cues: readonly Cue[]): void {
    for (const cue of cues) this.#cues.push({ cue, carried: false });
  }

  /** The media ended (its last segment is complete). */
  mediaEnded(): void {
    this.#mediaEnded = true;
  }

  /** The captions ended. */
  captionsEnded(): void {
    this.#captionsEnded = true;
  }

  /** Wall-clock ms when {@link publish} has something to do next, or undefined for nothing. */
  nextDueMs(): number | undefined {
    if (this.#endListed) return undefined;
    if (this.#mediaEnded && this.#captionsEnded) return 0;
    if (this.#mediaEnded && this.#pending.length <= 1) return undefined;
    return this.#pending[0]?.dueMs;
  }

  /**
   * What to publish at wall time `nowMs`: the segments due, or, once both the media and the
   * captions ended, every segment left and the end of the playlists.
   */
  publish(nowMs: number): Publication | undefined {
    if (this.#endListed) return undefined;
    const finishing = this.#mediaEnded && this.#captionsEnded;
    // The media's last segment waits for the end of the captions: cues made after its time
    // still go into it.
    const keep = this.#mediaEnded && !finishing ? 1 : 0;
    const due: Pending[] = [];
    while (this.#pending.length > keep && (finishing || this.#pending[0]!.dueMs <= nowMs))
      due.push(this.#pending.shift()!);
    if (due.length === 0 && !finishing) return undefined;
    const write: Publication['write'] = [];
    const remove: string[] = [];
    for (const segment of due) {
      const subtitles = `${this.#prefix}-${segment.sequence}.vtt`;
      write.push({ name: subtitles, text: this.#vttSegment(segment, finishing && segment === due.at(-1)) });
      const durationSec = Math.max(0.001, (segment.endPts - segment.startPts) / MPEG_CLOCK);
      this.#peakBitsPerSec = Math.max(this.#peakBitsPerSec, (segment.bytes * 8) / durationSec);
      this.#listed.push({
        sequence: segment.sequence,
        media: segment.uri,
        subtitles,
        durationSec,
        wallStartMs: segment.wallStartMs,
      });
    }
    while (this.#listed.length > this.#window) this.#retired.push(this.#listed.shift()!);
    // A segment's files stay a window's length after it left the playlists (a player that
    // loaded the playlist just before may still ask for them), then go.
    while (this.#retired.length > this.#window) {
      const gone = this.#retired.shift()!;
      remove.push(gone.media, gone.subtitles);
    }
    // The captions are all out, and the last segment took every cue left.
    if (finishing) this.#endListed = true;
    if (this.#listed.length > 0) {
      write.push({ name: HLS_FILES.subtitles, text: this.#playlist('subtitles') });
      write.push({ name: HLS_FILES.media, text: this.#playlist('media') });
      if (!this.#masterWritten) {
        write.push({ name: HLS_FILES.master, text: this.#master() });
        this.#masterWritten = true;
      }
    }
    return { write, remove, published: due.length };
  }

  /** The files of every segment still kept (to remove when the presentation is taken down). */
  files(): string[] {
    return [...this.#retired, ...this.#listed].flatMap((s) => [s.media, s.subtitles]);
  }

  /**
   * The WebVTT segment of `segment`: every cue it overlaps, and every cue made too late for the
   * segments already out, moved to its start (late, but on screen). The last segment of a
   * presentation takes every cue left.
   */
  #vttSegment(segment: Pending, last: boolean): string {
    const zero = this.#audioStart ?? segment.startPts;
    const fromMs = ((segment.startPts - zero) * 1000) / MPEG_CLOCK;
    const toMs = ((segment.endPts - zero) * 1000) / MPEG_CLOCK;
    const carried: Cue[] = [];
    for (const held of this.#cues) {
      const { cue } = held;
      if (cue.startMs < toMs && cue.endMs > fromMs) {
        carried.push(cue);
        held.carried = true;
      } else if (!held.carried && (cue.endMs <= fromMs || last)) {
        // Too late for its own segment (or past the media's end): shown from this segment on.
        const moved = {
          ...cue,
          startMs: Math.max(fromMs, Math.min(cue.startMs, toMs - 1)),
          endMs: 0,
        };
        moved.endMs = moved.startMs + Math.max(1, cue.endMs - cue.startMs);
        carried.push(moved);
        held.carried = true;
      }
    }
    // A cue carried and ended before this segment's end is done with.
    for (let i = this.#cues.length - 1; i >= 0; i--) {
      const held = this.#cues[i]!;
      if (held.carried && held.cue.endMs <= toMs) this.#cues.splice(i, 1);
    }
    carried.sort((a, b) => a.startMs - b.startMs);
    const labels = this.#options.speakerLabels ?? true;
    // LOCAL 0 is the first audio sample: cue times are the captions' own times.
    const map = `X-TIMESTAMP-MAP=MPEGTS:${zero % WRAP},LOCAL:00:00:00.000`;
    return `WEBVTT\n${map}\n\n${carried.map((c) => formatVttCue(c, labels)).join('')}`;
  }

  #playlist(kind: 'media' | 'subtitles'): string {
    const first = this.#listed[0]!;
    const target = targetDurationOf(this.#target);
    const lines = [
      '#EXTM3U',
      '#EXT-X-VERSION:3',
      `#EXT-X-TARGETDURATION:${target}`,
      `#EXT-X-MEDIA-SEQUENCE:${first.sequence}`,
    ];
    for (const s of this.#listed) {
      lines.push(`#EXT-X-PROGRAM-DATE-TIME:${new Date(Math.round(s.wallStartMs)).toISOString()}`);
      lines.push(`#EXTINF:${s.durationSec.toFixed(3)},`);
      lines.push(kind === 'media' ? s.media : s.subtitles);
    }
    if (this.#endListed) lines.push('#EXT-X-ENDLIST');
    return `${lines.join('\n')}\n`;
  }

  #master(): string {
    const language = this.#options.language;
    const name = (this.#options.name ?? 'Captions').replace(/"/g, "'");
    const media = [
      'TYPE=SUBTITLES',
      'GROUP-ID="captions"',
      `NAME="${name}"`,
      ...(language ? [`LANGUAGE="${language}"`] : []),
      'DEFAULT=YES',
      'AUTOSELECT=YES',
      'FORCED=NO',
      `URI="${HLS_FILES.subtitles}"`,
    ];
    // The first segments' rate, with room: a master playlist is read once.
    const bandwidth = Math.max(1000, Math.ceil((this.#peakBitsPerSec * 1.25) / 1000) * 1000);
    return [
      '#EXTM3U',
      '#EXT-X-VERSION:3',
      ...(this.#independent ? ['#EXT-X-INDEPENDENT-SEGMENTS'] : []),
      `#EXT-X-MEDIA:${media.join(',')}`,
      `#EXT-X-STREAM-INF:BANDWIDTH=${bandwidth},${this.#codecs ? `CODECS="${this.#codecs}",` : ''}SUBTITLES="captions"`,
      HLS_FILES.media,
      '',
    ].join('\n');
  }
}
