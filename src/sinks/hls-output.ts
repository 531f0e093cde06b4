// hlsOutput(): a live HLS presentation with the captions as a WebVTT subtitle rendition. Two
// writable sides: the captions (a caption output, like captionRelay) and `media`, the MPEG-TS
// of the programme (from mediaInput(): video copied, audio copied or encoded). The media is cut
// into segments on disk as it comes (TsSegmenter), held back by a fixed delay, and published
// with the WebVTT segment of its captions (HlsPresentation); files are written whole and renamed
// into place, and those that left the sliding window are removed. `mount` serves the directory
// on a caption relay, under /hls/.

import { randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { type FileHandle, mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { InvalidArgumentError, SpeechpipeError } from '../protocol/errors.ts';
import { CaptionBuilder, type CaptionOptions } from '../transforms/to-captions.ts';
import { type CaptionOutput, captionOutput } from './caption-output.ts';
import { HlsPresentation } from './hls-presentation.ts';
import type { RelayMount } from './relay-router.ts';
import { type SegmenterEvent, TsSegmenter } from './ts-segmenter.ts';

/** Options of {@link hlsOutput}. */
export interface HlsOutputOptions extends Omit<CaptionOptions, 'format'> {
  /** The presentation's directory (made if missing; this output's own files in it are replaced). */
  dir: string;
  /**
   * Seconds every segment is held back (the delay line): longer than the captions take to come
   * (the service's latency), so that each caption is on screen with its speech. Default 4.
   */
  delaySec?: number;
  /**
   * Seconds a segment lasts at least (with video: up to the next keyframe after it). The
   * playlists' target duration is this rounded up (T), fixed for the whole presentation; a
   * segment whose keyframe is not due before T + 0.5 s is cut without one (see
   * {@link HlsOutputStats.withoutKeyframe}). Default 2.
   */
  targetDurationSec?: number;
  /** Segments in the playlists (the sliding window). Default 6. */
  windowSegments?: number;
  /** The captions' language (BCP 47) for the subtitle rendition, when known. */
  language?: string;
  /** The subtitle rendition's name in players' menus. Default `Captions`. */
  name?: string;
}

/** What an HLS output has done so far. */
export interface HlsOutputStats {
  /** Media segments published. */
  segments: number;
  /** Caption cues made. */
  cues: number;
  /** The media has video (from its PMT), once known. */
  video: boolean | undefined;
  /**
   * Segments that start without a keyframe: the input's keyframes were further apart than the
   * target duration allows (a player may show the start of such a segment late), or the
   * pictures ended before the audio. Set the encoder's keyframe interval to `targetDurationSec`
   * or less, or raise the target, to have none from the first.
   */
  withoutKeyframe: number;
}

/** A running HLS output: write the captions into it, and the programme's MPEG-TS into `media`. */
export interface HlsOutput extends CaptionOutput {
  /** The programme: MPEG-TS bytes. End it when the programme ends. */
  readonly media: Writable;
  /** Serves the directory under `/hls/` on a caption relay (`captionRelay({ mounts })`). */
  readonly mount: RelayMount;
  /** The presentation's directory (absolute). */
  readonly dir: string;
  /**
   * Seconds of media the playlists list (window times target): how long a player that loaded
   * them may still ask for their segments, after the end too.
   */
  readonly windowSec: number;
  /** Segments published, cues made, and whether the media has video. */
  stats(): HlsOutputStats;
}

/** Files an HLS output writes: its playlists, segments, and half-written temporaries. */
const OWN_FILE = /^(master|media|subtitles)\.m3u8$|^[a-z0-9]{8}-\d+\.(ts|vtt)$|\.tmp$/;

/** Content types of what an HLS presentation holds. */
const CONTENT_TYPES: Record<string, string> = {
  m3u8: 'application/vnd.apple.mpegurl',
  ts: 'video/mp2t',
  m4s: 'video/iso.segment',
  mp4: 'video/mp4',
  aac: 'audio/aac',
  vtt: 'text/vtt; charset=utf-8',
};

/**
 * Start an HLS output in `options.dir`. The presentation (`master.m3u8`, `media.m3u8`,
 * `subtitles.m3u8`) appears with its first segment, `delaySec` after that segment was recorded;
 * it ends (`#EXT-X-ENDLIST`) once both the media and the captions ended, and the captions side
 * finishes only then. The media side waits (backpressure) while more segments are held than the
 * delay needs: an input faster than real time goes out at real time.
 */
export async function hlsOutput(options: HlsOutputOptions): Promise<HlsOutput> {
  if (typeof options.dir !== 'string' || options.dir === '')
    throw new InvalidArgumentError('hlsOutput: dir must be a directory');
  const delaySec = options.delaySec ?? 4;
  const targetDurationSec = options.targetDurationSec ?? 2;
  const builder = new CaptionBuilder({ ...options, format: 'vtt' });
  const prefix = randomBytes(5).toString('hex').slice(0, 8);
  const windowSegments = options.windowSegments ?? 6;
  const presentation = new HlsPresentation(
    {
      delaySec,
      targetDurationSec,
      windowSegments,
      language: options.language,
      ...(options.name === undefined ? {} : { name: options.name }),
      speakerLabels: builder.layout.labels,
    },
    prefix,
  );
  const dir = resolve(options.dir);
  await mkdir(dir, { recursive: true });
  // An earlier run's playlists (ended, or dead) must not be served as this one's.
  for (const name of await readdir(dir)) if (OWN_FILE.test(name)) await rm(join(dir, name), { force: true });

  const segmenter = new TsSegmenter({ targetDurationSec });
  /** Segments held at most: the delay's worth, and some room. */
  const maxPending = Math.ceil(delaySec / targetDurationSec) + 3;
  const stats: HlsOutputStats = { segments: 0, cues: 0, video: undefined, withoutKeyframe: 0 };
  let open_: { handle: FileHandle; uri: string; startPts: number; bytes: number } | undefined;
  let sequence = 0;
  let timer: NodeJS.Timeout | undefined;
  let publishing = Promise.resolve();
  let failed: Error | undefined;
  /** Called when segments were published (the media side may go on) or on a failure. */
  const waiters = new Set<() => void>();
  let finished: { resolve: () => void; reject: (err: Error) => void } | undefined;
  const finishedPromise = new Promise<void>((resolve, reject) => (finished = { resolve, reject }));
  finishedPromise.catch(() => {});

  /** Stop everything: on a failure (`err`), or destroyed before the presentation ended. */
  const stop = (err?: Error) => {
    if (failed) return;
    failed = err ?? new SpeechpipeError('ERR_HLS_DESTROYED', 'hlsOutput: destroyed before the end');
    clearTimeout(timer);
    for (const wake of waiters) wake();
    finished?.reject(failed);
    if (!captions.destroyed) captions.destroy(err);
    if (!media.destroyed) media.destroy(err);
  };

  const writeWhole = async (name: string, text: string) => {
    // A player never reads half a playlist: written aside, then renamed over the old one.
    const temporary = join(dir, `.${name}.${prefix}.tmp`);
    await writeFile(temporary, text);
    await rename(temporary, join(dir, name));
  };

  const publishNow = async () => {
    const publication = presentation.publish(Date.now());
    if (publication) {
      for (const file of publication.write) await writeWhole(file.name, file.text);
      for (const name of publication.remove) await rm(join(dir, name), { force: true });
      stats.segments += publication.published;
    }
    for (const wake of waiters) wake();
    if (presentation.ended) finished?.resolve();
    else schedule();
  };

  function schedule(): void {
    clearTimeout(timer);
    if (failed) return;
    const due = presentation.nextDueMs();
    if (due === undefined) return;
    timer = setTimeout(
      () => {
        timer = undefined;
        publishing = publishing.then(publishNow).catch((err: Error) => stop(err));
      },
      Math.max(0, due - Date.now()),
    );
  }

  const onEvent = async (event: SegmenterEvent) => {
    switch (event.type) {
      case 'streams':
        if (!event.audio)
          throw new SpeechpipeError(
            'ERR_HLS_NO_AUDIO',
            'hlsOutput: the media has no audio stream to caption',
          );
        stats.video = event.video !== undefined;
        presentation.streams(stats.video);
        return;
      case 'codecs':
        presentation.codecs(event.codecs);
        return;
      case 'audio-start':
        presentation.audioStart(event.pts);
        return;
      case 'segment-start': {
        const uri = `${prefix}-${sequence++}.ts`;
        if (!event.keyframe) stats.withoutKeyframe++;
        open_ = { handle: await open(join(dir, uri), 'w'), uri, startPts: event.pts, bytes: 0 };
        presentation.segmentStarted(event.pts, Date.now());
        return;
      }
      case 'data':
        if (!open_) return;
        await open_.handle.write(event.bytes);
        open_.bytes += event.bytes.length;
        return;
      case 'segment-end': {
        if (!open_) return;
        const segment = open_;
        open_ = undefined;
        await segment.handle.close();
        presentation.segmentCompleted(
          { uri: segment.uri, startPts: segment.startPts, endPts: event.pts, bytes: segment.bytes },
          Date.now(),
        );
        schedule();
        return;
      }
    }
  };
  const handle = async (events: SegmenterEvent[]) => {
    for (const event of events) await onEvent(event);
    // Past the delay's worth of held segments, the input is faster than real time: wait.
    while (presentation.pending > maxPending && !failed)
      await new Promise<void>((resolve) => {
        const wake = () => {
          waiters.delete(wake);
          resolve();
        };
        waiters.add(wake);
      });
    if (failed) throw failed;
  };

  const media = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      handle(segmenter.push(chunk)).then(() => callback(), callback);
    },
    final(callback) {
      handle(segmenter.end()).then(() => {
        presentation.mediaEnded();
        schedule();
        callback();
      }, callback);
    },
    destroy(err, callback) {
      const file = open_;
      open_ = undefined;
      if (err) stop(err);
      (file ? file.handle.close() : Promise.resolve()).then(
        () => callback(err),
        () => callback(err),
      );
    },
  });

  const captions = captionOutput('hlsOutput', {
    utterance: (event) => {
      const cues = builder.add(event.words, { live: true });
      stats.cues += cues.length;
      presentation.addCues(cues);
    },
    end: async () => {
      presentation.captionsEnded();
      schedule();
      // The captions side finishes with the presentation: every segment out, the playlists ended.
      await finishedPromise;
    },
    destroy: (err) => {
      if (err || !presentation.ended) stop(err ?? undefined);
      clearTimeout(timer);
    },
  }) as HlsOutput;

  Object.defineProperties(captions, {
    media: { value: media, enumerable: true },
    mount: { value: hlsMount(dir), enumerable: true },
    dir: { value: dir, enumerable: true },
    windowSec: { value: windowSegments * targetDurationSec, enumerable: true },
    stats: { value: (): HlsOutputStats => ({ ...stats }) },
  });
  return captions;
}

/**
 * Serve the files of an HLS presentation in `dir` under `prefix`: by name only (no path, no
 * hidden or temporary file), with the content type of each kind, playlists never cached (they
 * change), segments cached for good (each run names its own).
 */
export function hlsMount(dir: string, prefix = '/hls/'): RelayMount {
  const root = resolve(dir);
  return {
    prefix,
    serve(req, res, path, corsHeaders) {
      let name: string;
      try {
        name = decodeURIComponent(path);
      } catch {
        res.writeHead(400, { 'content-type': 'text/plain' }).end('bad request\n');
        return;
      }
      const extension = /^[A-Za-z0-9_-][A-Za-z0-9._-]*\.([a-z0-9]+)$/.exec(name)?.[1];
      const type = extension === undefined ? undefined : CONTENT_TYPES[extension];
      if (!type || name.includes('..') || name.endsWith('.tmp')) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      const file = join(root, name);
      stat(file).then(
        (info) => {
          if (!info.isFile()) {
            res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
            return;
          }
          res.writeHead(200, {
            ...corsHeaders,
            'content-type': type,
            'content-length': String(info.size),
            'cache-control': extension === 'm3u8' ? 'no-cache, no-store' : 'public, max-age=86400, immutable',
            'x-content-type-options': 'nosniff',
          });
          if (req.method === 'HEAD') {
            res.end();
            return;
          }
          // A file removed from the window after its stat: the response is cut, the client retries.
          pipeline(createReadStream(file), res).catch(() => res.destroy());
        },
        () => res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n'),
      );
    },
  };
}
