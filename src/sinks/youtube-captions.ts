// youtubeCaptions(): live captions to a YouTube Live stream's caption ingestion URL, in the
// format YouTube documents for caption vendors ("Closed Captions over HTTP"): each POST a plain
// UTF-8 body of `<UTC time>` and text lines (`<br>` between a cue's lines), `seq` counting the
// posts of new captions and unchanged on a retry. One post in flight at a time, so nothing is
// reordered; a failed one is sent again as it was, so nothing is repeated under another seq.

import { Agent, request } from 'undici';
import { backoffDelay } from '../client/retry.ts';
import { InvalidArgumentError, parseRetryAfter } from '../protocol/errors.ts';
import {
  CaptionBuilder,
  type CaptionOptions,
  type CaptionWord,
  type Cue,
} from '../transforms/to-captions.ts';
import {
  CaptionDelivery,
  type CaptionDeliveryStats,
  CaptionOutputError,
  type DeliveryItem,
  type DeliverySink,
  integerOption,
  SPEAKER_CHANGE,
  wordCount,
} from './caption-delivery.ts';

/** Options of {@link youtubeCaptions}: the ingestion URL, timing, and the captions' layout. */
export interface YoutubeCaptionsOptions extends Omit<CaptionOptions, 'format'> {
  /**
   * The stream's caption ingestion URL, as YouTube Studio gives it
   * (`http://upload.youtube.com/closedcaption?cid=...`). Its query is a secret: it is never
   * logged nor put in an error.
   */
  url: string;
  /**
   * When the audio's time 0 was, in epoch milliseconds, for a live input: each caption is then
   * stamped with the time its first word was spoken (never later than it is sent), so that
   * YouTube puts it with the speech. Default: stamped when it is made.
   */
  timeOrigin?: number;
  /** The first post's `seq`. Default 1. */
  startSeq?: number;
  /** Cues that may wait (the URL failing, or a burst): past it the oldest are counted `overflow`. Default 500. */
  maxQueuedCues?: number;
  /** Cues in one post at most. Default 20. */
  maxCuesPerPost?: number;
  /** Wait for the connection and for an answer, per attempt. Default 10 s. */
  timeoutMs?: number;
  /** Delays between attempts of a failed post: full jitter from `baseMs` doubling up to `maxMs`. Default 500 ms to 10 s. */
  retry?: { baseMs?: number; maxMs?: number };
  /**
   * At the end of the input, how long the cues still queued may wait without a post going
   * through before they are counted `unsent`. Default 30 s.
   */
  endTimeoutMs?: number;
}

/** What a YouTube caption output has done: the delivery counts, and its posts. */
export interface YoutubeCaptionStats extends CaptionDeliveryStats {
  /** Posts YouTube accepted. */
  posts: number;
  /** Attempts sent again after a failure (same seq, same body). */
  retries: number;
  /** The seq of the last post sent, 0 before the first. */
  seq: number;
}

/**
 * A running YouTube caption output: write transcript events into it. Emits `warning`
 * ({@link CaptionOutputError}: `ERR_YOUTUBE_REFUSED`, `ERR_YOUTUBE_RETRYING`,
 * `ERR_CAPTIONS_UNDELIVERED`, each once until a post goes through) and `delivered` (a
 * {@link DeliveryItem}) for each cue YouTube accepted. `close()` cuts the post in flight.
 */
export type YoutubeCaptions = DeliverySink<YoutubeCaptionStats>;

/** The caption URL as it may be shown: its query (the stream's secret key) left out. */
export function redactCaptionUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname}${u.search === '' ? '' : '?[redacted]'}`;
  } catch {
    return '[a caption URL]';
  }
}

/** `YYYY-MM-DDTHH:MM:SS.mmm`, UTC, as YouTube's caption format writes times. */
export function youtubeTime(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 23);
}

/** A line of caption text: no line break nor control character may end it early. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it removes
const oneLine = (text: string) => text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ').trim();

interface QueuedCue extends DeliveryItem {
  /** When it is stamped, epoch ms. */
  at: number;
}

interface Post {
  seq: number;
  body: string;
  cues: QueuedCue[];
  attempts: number;
}

/**
 * When the last word of each cue was spoken, in seconds: the cues hold the words in order,
 * white space normalised, empty words left out (as `CaptionBuilder` lays them out).
 */
function spokenEnds(words: readonly CaptionWord[], cues: readonly Cue[]): number[] {
  const spoken = words.filter((w) => w.word.trim() !== '');
  let next = 0;
  return cues.map((cue) => {
    let tokens = cue.lines.join(' ').split(' ').length;
    let end = cue.endMs / 1000;
    while (tokens > 0 && next < spoken.length) {
      const w = spoken[next++]!;
      tokens -= w.word.trim().split(/\s+/).length;
      end = w.end_time;
    }
    return end;
  });
}

const RETRY_STATUS = (status: number) => status === 408 || status === 429 || status >= 500;

/**
 * Start a YouTube caption output. Each committed utterance is laid out as cues (as for a
 * WebVTT file); the cues are posted in order, several in one post when they wait. A post that
 * fails for the network, a timeout, 408, 429 or 5xx is sent again, unchanged and with the same
 * `seq`, after a backoff (honouring `Retry-After`); one refused (another 4xx) is counted and
 * said once, and the next cues are tried. Writes never wait for YouTube.
 */
export function youtubeCaptions(options: YoutubeCaptionsOptions): YoutubeCaptions {
  const name = 'youtubeCaptions';
  let target: URL;
  try {
    target = new URL(options.url);
  } catch {
    throw new InvalidArgumentError(`${name}: url must be the stream's caption ingestion URL (http or https)`);
  }
  const shown = redactCaptionUrl(options.url);
  if (target.protocol !== 'http:' && target.protocol !== 'https:')
    throw new InvalidArgumentError(`${name}: url must be http or https, got ${shown}`);
  if (options.timeOrigin !== undefined && !Number.isFinite(options.timeOrigin))
    throw new InvalidArgumentError(`${name}: timeOrigin must be epoch milliseconds`);
  let seq = integerOption(name, 'startSeq', options.startSeq, 1, 0) - 1;
  const maxQueued = integerOption(name, 'maxQueuedCues', options.maxQueuedCues, 500, 1);
  const perPost = integerOption(name, 'maxCuesPerPost', options.maxCuesPerPost, 20, 1);
  const timeoutMs = integerOption(name, 'timeoutMs', options.timeoutMs, 10_000, 1);
  const endTimeoutMs = integerOption(name, 'endTimeoutMs', options.endTimeoutMs, 30_000, 0);
  const retryBase = integerOption(name, 'retry.baseMs', options.retry?.baseMs, 500, 1);
  const retryMax = integerOption(name, 'retry.maxMs', options.retry?.maxMs, 10_000, 1);
  const builder = new CaptionBuilder({ ...options, format: 'vtt' });

  const delivery = new CaptionDelivery<QueuedCue>('youtube', {
    maxQueued,
    endTimeoutMs,
    saying: {
      overflow: [
        'ERR_CAPTIONS_UNDELIVERED',
        `YouTube: more than ${maxQueued} cues waiting; the oldest are dropped (and counted) until posts go through`,
      ],
    },
  });
  const { queue } = delivery;
  const agent = new Agent({ connect: { timeout: timeoutMs }, keepAliveTimeout: 4_000 });
  const abort = new AbortController();
  let inFlight: Post | undefined;
  let retryTimer: NodeJS.Timeout | undefined;
  let posts = 0;
  let retries = 0;
  let lastStamp = Number.NEGATIVE_INFINITY;
  let lastSpeaker: string | null = null;

  /** When a cue is stamped: its first word's time when the origin is known, never ahead of now, never before the last. */
  const stamp = (cue: Cue): number => {
    const now = Date.now();
    const spoken = options.timeOrigin === undefined ? now : Math.min(now, options.timeOrigin + cue.startMs);
    lastStamp = Math.max(spoken, lastStamp + 1);
    return lastStamp;
  };

  const textOf = (cue: Cue): string => {
    const lines = cue.lines.map(oneLine).filter((l) => l !== '');
    if (cue.speaker !== null && cue.speaker !== lastSpeaker) {
      if (lastSpeaker !== null && lines.length > 0) lines[0] = `${SPEAKER_CHANGE} ${lines[0]}`;
      lastSpeaker = cue.speaker;
    }
    return lines.join('<br>');
  };

  const attempt = async (post: Post): Promise<void> => {
    const url = new URL(target);
    url.searchParams.set('seq', String(post.seq));
    let status: number;
    let retryAfterMs: number | undefined;
    try {
      const res = await request(url, {
        dispatcher: agent,
        method: 'POST',
        headers: { 'content-type': 'text/plain; charset=utf-8' },
        body: post.body,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        signal: abort.signal,
      });
      status = res.statusCode;
      const header = res.headers['retry-after'];
      retryAfterMs = parseRetryAfter(Array.isArray(header) ? header[0] : header);
      // The answer is the server's time (or an error page): read and let go.
      await res.body.dump();
    } catch (err) {
      if (delivery.closed) return;
      // Only the error's code: undici's messages and causes may carry the address.
      const code = (err as { code?: string }).code ?? (err as { cause?: { code?: string } }).cause?.code;
      retryLater(post, `${code ?? 'network error'}`);
      return;
    }
    if (delivery.closed) return;
    if (status >= 200 && status < 300) {
      inFlight = undefined;
      posts++;
      delivery.forgive('ERR_YOUTUBE_RETRYING', 'ERR_YOUTUBE_REFUSED', 'ERR_CAPTIONS_UNDELIVERED');
      delivery.deliver(post.cues);
    } else if (RETRY_STATUS(status)) {
      retryLater(post, `HTTP ${status}`, retryAfterMs);
      return;
    } else {
      inFlight = undefined;
      delivery.lose(post.cues, 'refused');
      delivery.warn(
        'ERR_YOUTUBE_REFUSED',
        `YouTube refused the captions posted to ${shown} (HTTP ${status}); check the caption ingestion URL and that the stream is live. Refused captions are counted; the next ones are tried`,
      );
      delivery.progress();
    }
    move();
  };

  const retryLater = (post: Post, why: string, retryAfterMs?: number) => {
    delivery.warn(
      'ERR_YOUTUBE_RETRYING',
      `YouTube caption post failed (${why}); retrying with backoff (captions wait, up to ${maxQueued} cues)`,
    );
    const delay = backoffDelay(post.attempts - 1, { baseMs: retryBase, maxMs: retryMax }, retryAfterMs);
    retryTimer = setTimeout(() => {
      retryTimer = undefined;
      post.attempts++;
      retries++;
      void attempt(post);
    }, delay);
  };

  /** Post the waiting cues, one post at a time. */
  const move = (): void => {
    if (delivery.closed || inFlight) return;
    if (queue.length === 0) {
      delivery.idle();
      return;
    }
    const cues = queue.take(perPost);
    const body = cues.map((c) => `${youtubeTime(c.at)}\n${c.text}\n`).join('');
    inFlight = { seq: ++seq, body, cues, attempts: 1 };
    void attempt(inFlight);
  };

  return delivery.writable(
    name,
    {
      itemsOf: (words) => {
        const cues = builder.add(words, { live: true });
        const ends = spokenEnds(words, cues);
        const items: QueuedCue[] = [];
        cues.forEach((cue, k) => {
          const text = textOf(cue);
          if (text !== '')
            items.push({ text, words: wordCount(text.replace(/<br>/g, ' ')), end: ends[k]!, at: stamp(cue) });
        });
        return items;
      },
      move,
      inFlight: () => inFlight?.cues.length ?? 0,
      release: async () => {
        clearTimeout(retryTimer);
        if (inFlight) delivery.lose(inFlight.cues, 'unsent');
        inFlight = undefined;
        abort.abort(
          new CaptionOutputError('youtube', 'ERR_CAPTIONS_UNDELIVERED', 'the YouTube caption output closed'),
        );
        await agent.destroy().catch(() => {});
      },
    },
    () => ({ ...delivery.stats(), posts, retries, seq: Math.max(0, seq) }),
  );
}
