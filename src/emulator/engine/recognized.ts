// Words recognized by PocketSphinx for the emulator's speech regions: a live ASR engine (a
// speech-final record per region once its words are decoded, provisional records while a
// region is open when a recognizer process is idle) and the words of a complete recording
// (batch jobs, fast transcription). Regions stay the emulator's own, so speaker turns and
// diarization are as with generated words; each is decoded with a little audio either side.

import { open, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AsrRecord, WordSegment } from '../../protocol/records.ts';
import { asrRecord } from './live.ts';
import { type RecognizedWord, RecognizerError, SAMPLE_RATE, type Utterance } from './pocketsphinx.ts';
import { RecognitionCancelled, type RecognizerPool } from './recognizer.ts';
import { type SpeechRegion, SpeechRegionDetector } from './regions.ts';
import { roundToMs } from './times.ts';

/** Audio decoded either side of a region: PocketSphinx expects silence around an utterance. */
export const PAD_SEC = 0.3;
/**
 * The longest utterance decoded at once: a longer region is cut at its quietest 20 ms in the
 * seconds before the limit, so a live stream holds at most this much audio and the search,
 * whose cost grows with the utterance, stays bounded.
 */
export const MAX_UTTERANCE_SEC = 20;
const CUT_SEARCH_SEC = 5;
/**
 * Provisional records decode a region as it grows, each stretch of audio once: a stretch of at
 * least this long since the last, cut at its quietest 20 ms in the last `PARTIAL_CUT_SEARCH_SEC`,
 * its words added to the region's provisional words. So provisional records cost at most the
 * decoding of the audio once more (the final record decodes the region whole), and only on a
 * process that would otherwise be idle.
 */
const PARTIAL_STEP_SEC = 1.5;
const PARTIAL_CUT_SEARCH_SEC = 0.5;
/**
 * A live stream's frames wait (are answered late) while more than this much of its audio is
 * waiting for or in the recognizer: a stream sent faster than it can be recognized is slowed,
 * so what it queues stays bounded.
 */
export const MAX_LIVE_BACKLOG_SEC = 10;

const BYTES_PER_SEC = SAMPLE_RATE * 2;
const WINDOW_SAMPLES = SAMPLE_RATE / 50;
let fileSeq = 0;

const toSegment = (offsetSec: number) => (w: RecognizedWord) => ({
  start_time: roundToMs(offsetSec + w.start),
  end_time: roundToMs(offsetSec + w.end),
  word: w.word,
});

/** The sample, in `pcm` (PCM16LE) whose first sample is `firstSample`, in its quietest 20 ms. */
export function quietestSample(pcm: Buffer, firstSample: number): number {
  const samples = Math.floor(pcm.length / 2);
  let best = firstSample + Math.floor(samples / 2);
  let bestEnergy = Number.POSITIVE_INFINITY;
  for (let w = 0; w + WINDOW_SAMPLES <= samples; w += WINDOW_SAMPLES) {
    let energy = 0;
    for (let i = w; i < w + WINDOW_SAMPLES; i++) {
      const s = pcm.readInt16LE(i * 2);
      energy += s * s;
    }
    if (energy < bestEnergy) {
      bestEnergy = energy;
      best = firstSample + w + WINDOW_SAMPLES / 2;
    }
  }
  return best;
}

/**
 * The pieces [from, to] (seconds) a region is decoded in: padded at both ends (within the
 * audio), cut where it is longest at its quietest point (`cutIn(from, to)` finds one).
 */
async function piecesOf(
  region: SpeechRegion,
  durationSec: number,
  cutIn: (fromSec: number, toSec: number) => Promise<number> | number,
): Promise<[number, number][]> {
  const end = Math.min(durationSec, region.end + PAD_SEC);
  let from = Math.max(0, region.start - PAD_SEC);
  const pieces: [number, number][] = [];
  while (end - from > MAX_UTTERANCE_SEC) {
    const limit = from + MAX_UTTERANCE_SEC;
    const cut = await cutIn(limit - CUT_SEARCH_SEC, limit);
    pieces.push([from, cut]);
    from = cut;
  }
  pieces.push([from, end]);
  return pieces;
}

/**
 * The recognized words of each region of a complete recording, `pcmPath` holding it as raw
 * PCM16LE 16 kHz mono. At most as many of its utterances wait for the recognizer at once as it
 * has processes, so a long recording does not fill the queue.
 */
export async function recognizeRecording(
  pool: RecognizerPool,
  pcmPath: string,
  regions: readonly SpeechRegion[],
  workClass: 'fast' | 'batch',
  owner: object,
): Promise<WordSegment[][]> {
  const stat = await open(pcmPath, 'r');
  try {
    const durationSec = (await stat.stat()).size / BYTES_PER_SEC;
    const cutIn = async (fromSec: number, toSec: number): Promise<number> => {
      const first = Math.floor(fromSec * SAMPLE_RATE);
      const bytes = Math.max(0, Math.floor(toSec * SAMPLE_RATE) - first) * 2;
      const { buffer, bytesRead } = await stat.read(Buffer.alloc(bytes), 0, bytes, first * 2);
      return quietestSample(buffer.subarray(0, bytesRead), first) / SAMPLE_RATE;
    };
    const work: { region: number; from: number; to: number }[] = [];
    for (const [i, region] of regions.entries())
      for (const [from, to] of await piecesOf(region, durationSec, cutIn)) work.push({ region: i, from, to });
    const words: WordSegment[][] = regions.map(() => []);
    const results: WordSegment[][] = new Array(work.length);
    let next = 0;
    let failed = false;
    const lane = async () => {
      while (next < work.length && !failed) {
        const k = next++;
        const { from, to } = work[k]!;
        const got = await pool.recognize({ path: pcmPath, startSec: from, endSec: to }, owner, workClass);
        results[k] = got.map(toSegment(0));
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(pool.processes, work.length) }, lane));
    } catch (err) {
      // One utterance failed: the recording's other work is dropped, not decoded for nothing.
      failed = true;
      pool.cancel(owner);
      throw err;
    }
    for (const [k, piece] of work.entries()) words[piece.region]!.push(...results[k]!);
    return words;
  } finally {
    await stat.close();
  }
}

/** PCM16LE 16 kHz mono kept from a sample onwards, as a live stream's audio arrives. */
class PcmWindow {
  #chunks: Buffer[] = [];
  /** Index of the first sample held. */
  #first = 0;
  #samples = 0;

  get end(): number {
    return this.#first + this.#samples;
  }

  append(pcm: Uint8Array): void {
    if (pcm.length === 0) return;
    this.#chunks.push(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
    this.#samples += pcm.length >> 1;
  }

  /** Samples [from, to) as one buffer (clamped to what is held). */
  slice(from: number, to: number): Buffer {
    const a = Math.max(from, this.#first);
    const b = Math.min(to, this.end);
    if (b <= a) return Buffer.alloc(0);
    const all = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks);
    this.#chunks = [all];
    return all.subarray((a - this.#first) * 2, (b - this.#first) * 2);
  }

  /** Forget the samples before `sample`. */
  dropBefore(sample: number): void {
    let drop = Math.min(sample, this.end) - this.#first;
    while (drop > 0 && this.#chunks.length > 0) {
      const head = this.#chunks[0]!;
      const n = head.length >> 1;
      if (n <= drop) {
        this.#chunks.shift();
        this.#first += n;
        this.#samples -= n;
        drop -= n;
      } else {
        this.#chunks[0] = head.subarray(drop * 2);
        this.#first += drop;
        this.#samples -= drop;
        drop = 0;
      }
    }
  }
}

interface OpenRegion {
  start: number;
  /** Where the part not yet sent to the recognizer begins (seconds). */
  pieceStart: number;
  /** The words of the pieces already cut off (a long region), in order. */
  pieces: Promise<WordSegment[]>[];
  /** Their words once decoded (for provisional records). */
  decoded: (WordSegment[] | undefined)[];
  /** Where the audio not yet decoded for provisional records begins (seconds). */
  partialFrom: number;
  /** The provisional words of the audio before `partialFrom` (and after `pieceStart`). */
  partialWords: WordSegment[];
  lastPartial: string | undefined;
}

/** Realtime ASR for one stream, with words from the recognizer. */
export class RecognizedAsrEngine {
  readonly #id: string;
  readonly #pool: RecognizerPool;
  readonly #detector = new SpeechRegionDetector(SAMPLE_RATE);
  readonly #audio = new PcmWindow();
  readonly #files = new Set<string>();
  #seq = 0;
  #open: OpenRegion | undefined;
  /** A provisional decode that came back, for the next record out. */
  #partial: { region: OpenRegion; words: WordSegment[] } | undefined;
  #partialRunning = false;
  /** Records are made in order: each answer waits for the one before. */
  #out: Promise<unknown> = Promise.resolve();
  #building = 0;
  #closed = false;
  /**
   * The recognizer could not decode some of this stream's audio (a process died twice): its
   * words are missing, so the stream fails rather than go on without them.
   */
  failed = false;
  /** Audio seconds sent to the recognizer for final records and not decoded yet. */
  #backlogSec = 0;
  #backlogWaiters: (() => void)[] = [];

  constructor(id: string, pool: RecognizerPool) {
    this.#id = id;
    this.#pool = pool;
  }

  /** Records for one accepted chunk of PCM16LE 16 kHz mono: at once, or once decoded. */
  push(pcm: Uint8Array): AsrRecord[] | Promise<AsrRecord[]> {
    this.#audio.append(pcm);
    this.#detector.push(pcm);
    const finals = this.#detector.takeClosed().map((r) => this.#regionWords(r));
    this.#follow();
    const records = this.#emit(finals, undefined);
    this.#startPartial();
    this.#trim();
    return records;
  }

  /** The stream's last records, ending with the final record (`is_final: true`). */
  finish(): AsrRecord[] | Promise<AsrRecord[]> {
    const closed = this.#detector.end().map((r) => this.#regionWords(r));
    this.#partial = undefined;
    const last = closed.pop();
    return this.#emit(closed, last ?? Promise.resolve([]));
  }

  /** While too much of this stream waits for the recognizer: when it no longer does. */
  backlogWait(): Promise<void> | undefined {
    if (this.#backlogSec <= MAX_LIVE_BACKLOG_SEC || this.#closed) return undefined;
    return new Promise((resolve) => this.#backlogWaiters.push(resolve));
  }

  /** The stream ended: its waiting work is dropped and its files removed. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#pool.cancel(this);
    for (const path of this.#files) void rm(path, { force: true });
    this.#files.clear();
    for (const wake of this.#backlogWaiters.splice(0)) wake();
  }

  /** Cut pieces off a long open region, as its audio arrives. */
  #follow(): void {
    const start = this.#detector.openStart;
    if (start === undefined) {
      this.#open = undefined;
      return;
    }
    if (this.#open?.start !== start) {
      this.#open = {
        start,
        pieceStart: Math.max(0, start - PAD_SEC),
        pieces: [],
        decoded: [],
        partialFrom: Math.max(0, start - PAD_SEC),
        partialWords: [],
        lastPartial: undefined,
      };
    }
    const open = this.#open;
    const position = this.#detector.position;
    while (position - open.pieceStart > MAX_UTTERANCE_SEC) {
      const cut = this.#cutIn(
        open.pieceStart + MAX_UTTERANCE_SEC - CUT_SEARCH_SEC,
        open.pieceStart + MAX_UTTERANCE_SEC,
      );
      const index = open.pieces.length;
      const piece = this.#decode(open.pieceStart, cut);
      open.pieces.push(piece);
      open.decoded.push(undefined);
      piece.then(
        (words) => {
          open.decoded[index] = words;
        },
        () => {},
      );
      open.pieceStart = cut;
      // The final words of the piece cut off stand for its provisional ones.
      open.partialWords = open.partialWords.filter((w) => w.start_time >= cut);
      open.partialFrom = Math.max(open.partialFrom, cut);
    }
  }

  /** A closed region's words: the pieces already sent for it and the rest, decoded now. */
  #regionWords(region: SpeechRegion): Promise<WordSegment[]> {
    const open = this.#open?.start === region.start ? this.#open : undefined;
    if (open) this.#open = undefined;
    const pieces = open ? [...open.pieces] : [];
    let from = open ? open.pieceStart : Math.max(0, region.start - PAD_SEC);
    const end = Math.min(this.#detector.position, region.end + PAD_SEC);
    while (end - from > MAX_UTTERANCE_SEC) {
      const cut = this.#cutIn(from + MAX_UTTERANCE_SEC - CUT_SEARCH_SEC, from + MAX_UTTERANCE_SEC);
      pieces.push(this.#decode(from, cut));
      from = cut;
    }
    pieces.push(this.#decode(from, end));
    const all = Promise.all(pieces).then((parts) => parts.flat());
    all.catch(() => {});
    return all;
  }

  #cutIn(fromSec: number, toSec: number): number {
    const first = Math.round(fromSec * SAMPLE_RATE);
    const pcm = this.#audio.slice(first, Math.round(toSec * SAMPLE_RATE));
    return quietestSample(pcm, first) / SAMPLE_RATE;
  }

  /** Decode [from, to] seconds of the stream (held in memory) as one utterance. */
  #decode(fromSec: number, toSec: number): Promise<WordSegment[]> {
    const seconds = Math.max(0, toSec - fromSec);
    this.#backlogSec += seconds;
    const decoded = this.#decodeWith(fromSec, toSec, (u) => this.#pool.recognize(u, this, 'live'));
    const settled = () => {
      this.#backlogSec -= seconds;
      if (this.#backlogSec <= MAX_LIVE_BACKLOG_SEC) for (const wake of this.#backlogWaiters.splice(0)) wake();
    };
    decoded.then(settled, (err: unknown) => {
      if (err instanceof RecognizerError) this.failed = true;
      settled();
    });
    return decoded.then((words) => words ?? []);
  }

  /** The audio written to a file of its own for `recognize`; undefined when that skipped it. */
  #decodeWith(
    fromSec: number,
    toSec: number,
    recognize: (u: Utterance) => Promise<RecognizedWord[]> | undefined,
  ): Promise<WordSegment[] | undefined> {
    if (this.#closed || this.#pool.closed)
      return Promise.reject(new RecognitionCancelled('the stream ended'));
    const pcm = this.#audio.slice(Math.round(fromSec * SAMPLE_RATE), Math.round(toSec * SAMPLE_RATE));
    const path = join(this.#pool.directory, `live-${++fileSeq}.raw`);
    this.#files.add(path);
    const decoded = writeFile(path, pcm)
      .then(() => (this.#closed ? [] : recognize({ path, startSec: 0, endSec: pcm.length / BYTES_PER_SEC })))
      .then((words) => words?.map(toSegment(fromSec)))
      .finally(() => {
        this.#files.delete(path);
        return rm(path, { force: true });
      });
    decoded.catch(() => {});
    return decoded;
  }

  /** Decode the open region's newest audio for a provisional record, when a process is idle. */
  #startPartial(): void {
    const open = this.#open;
    if (!open || this.#partialRunning || this.#closed) return;
    const position = this.#detector.position;
    const from = open.partialFrom;
    if (position - from < PARTIAL_STEP_SEC || !this.#pool.partialWouldRun()) return;
    const cut = this.#cutIn(position - PARTIAL_CUT_SEARCH_SEC, position);
    this.#partialRunning = true;
    this.#decodeWith(from, cut, (u) => this.#pool.recognizePartial(u, this))
      .then(
        (words) => {
          // Skipped (no idle process after all): the stretch waits for the next try.
          if (!words || this.#open !== open || open.partialFrom !== from) return;
          open.partialFrom = cut;
          open.partialWords.push(...words);
          if (open.decoded.some((d) => d === undefined)) return;
          this.#partial = { region: open, words: [...open.decoded.flatMap((d) => d!), ...open.partialWords] };
        },
        () => {},
      )
      .finally(() => {
        this.#partialRunning = false;
      });
  }

  /**
   * The records of one push or of the end, made in order: speech-final records for `finals`,
   * then a provisional record that came back for the region still open, or the final record
   * with `last`'s words. At once when nothing is waiting for the recognizer.
   */
  #emit(
    finals: Promise<WordSegment[]>[],
    last: Promise<WordSegment[]> | undefined,
  ): AsrRecord[] | Promise<AsrRecord[]> {
    const partial = last === undefined ? this.#takePartial() : undefined;
    if (finals.length === 0 && last === undefined && this.#building === 0)
      return partial ? [this.#record(partial, false, false)] : [];
    this.#building++;
    const built = this.#out
      .then(() => Promise.all([Promise.all(finals), last]))
      .then(([words, lastWords]) => {
        const out = words.map((w) => this.#record(w, true, false));
        if (lastWords) out.push(this.#record(lastWords, true, true));
        else if (partial) out.push(this.#record(partial, false, false));
        return out;
      })
      .finally(() => {
        this.#building--;
      });
    this.#out = built.catch(() => {});
    return built;
  }

  /** The provisional words decoded for the region still open, if they changed. */
  #takePartial(): WordSegment[] | undefined {
    const partial = this.#partial;
    this.#partial = undefined;
    if (!partial || partial.region !== this.#open || partial.words.length === 0) return undefined;
    const text = partial.words.map((w) => w.word).join(' ');
    if (text === partial.region.lastPartial) return undefined;
    partial.region.lastPartial = text;
    return partial.words;
  }

  /** Keep only the audio a region may still need. */
  #trim(): void {
    const keepFromSec = this.#open
      ? this.#open.pieceStart
      : this.#detector.position - PAD_SEC - 2 * (WINDOW_SAMPLES / SAMPLE_RATE);
    this.#audio.dropBefore(Math.floor(Math.max(0, keepFromSec) * SAMPLE_RATE));
  }

  #record(words: WordSegment[], speechFinal: boolean, final: boolean): AsrRecord {
    return asrRecord(this.#id, this.#seq++, words, speechFinal, final);
  }
}
