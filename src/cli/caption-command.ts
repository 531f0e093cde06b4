// `speechpipe caption`: a live captioning relay. Audio from a stream URL, a capture device, a
// file (played at its own pace with --realtime) or standard input goes through realtime ASR
// (and diarization with --speakers); captions go to an overlay page for a broadcast, as
// Server-Sent Events, optionally to a WebVTT or SRT file as they are made, to a live HLS
// presentation (the programme's media held back by a delay line, with a subtitle rendition),
// into OBS Studio's stream as CEA-608 closed captions (--obs), and to a YouTube Live stream
// (--youtube).

import { createWriteStream, type Stats } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { isAuthFailure } from '../client/retry.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import { isLanguage, type Language } from '../protocol/languages.ts';
import type { CaptionDeliveryStats } from '../sinks/caption-delivery.ts';
import { type CaptionRelay, captionRelay, isCorsOrigin } from '../sinks/caption-relay.ts';
import { type HlsOutput, hlsMount, hlsOutput } from '../sinks/hls-output.ts';
import { type ObsCaptions, obsCaptions } from '../sinks/obs-captions.ts';
import { type YoutubeCaptions, youtubeCaptions } from '../sinks/youtube-captions.ts';
import { liveInput, NETWORK_URL } from '../sources/live-input.ts';
import { hlsAudioFor, type MediaInput, mediaInput } from '../sources/media-input.ts';
import { alignSpeakersStream, SpeakerTimeline } from '../transforms/align-speakers.ts';
import { assembleTranscript } from '../transforms/assemble-transcript.ts';
import type { RawEncoding, RawInputFormat } from '../transforms/decode.ts';
import { ffmpegPcm } from '../transforms/ffmpeg-pcm.ts';
import {
  diarizationStream,
  type LiveTranscriptionStream,
  type LostAudio,
  sttStream,
} from '../transforms/live-stream.ts';
import { mergeDiarization } from '../transforms/merge-diarization.ts';
import { Pacer, pace } from '../transforms/pace.ts';
import { tee } from '../transforms/tee.ts';
import { toCaptions } from '../transforms/to-captions.ts';
import { toFrames } from '../transforms/to-frames.ts';
import { openService, type Service } from './service.ts';
import { badUsage, listenErrorCode, parseCommandArgs, UsageError } from './usage.ts';

/** A relay runs for days: sessions may keep failing this long (an outage) before it gives up. */
const RELAY_RESTART_WITHIN_MS = 10 * 60_000;

/**
 * After the first SIGINT or SIGTERM, how long the captions of the audio read until then may
 * take to come out (the service finalising its last utterance) before everything is cut.
 */
const DRAIN_MS = 5_000;

export const USAGE = `usage: speechpipe caption <input> [options]

  <input>               what ffmpeg opens (a stream URL, a file, a device with --input-format),
                        or - for audio on standard input
  --realtime            read a file at its own pace, as if it were a broadcast
  --input-format F      ffmpeg's input format for a device (pulse, alsa, lavfi, ...); with -,
                        raw PCM on standard input: s16le, f32le, alaw or mulaw, with
                        --sample-rate N and --channels N
  --language L          auto, en, ar, codeswitch (default auto)
  --speakers            label speakers (realtime diarization)
  --transport T         socketio (default: the lower caption latency, see docs/cli.md) or http
  --port N              the relay's port (default 8080; 0: any free port)
  --host H              address to bind (default 127.0.0.1)
  --out FILE            also write the captions to FILE as they are made (.vtt or .srt)
  --cors ORIGIN         let pages of ORIGIN (https://host[:port], or *) read /events,
                        /cues.json, /captions.vtt and /hls/
  --hls DIR             also write a live HLS presentation into DIR, served at
                        http://HOST:PORT/hls/master.m3u8: the input's video copied as it is,
                        its audio copied (a stream URL; a file's AAC or MP3) or encoded to AAC
                        (standard input, devices, other files), and the captions as a WebVTT
                        subtitle rendition; a file is read at its own pace (as --realtime);
                        ends with the input
  --delay SEC           with --hls: hold the media back SEC seconds so that each caption is on
                        screen with its speech (default 4; more than the captions' latency)
  --obs ws://HOST:PORT  also send the captions to OBS Studio (obs-websocket 5: OBS 28 or later),
                        which puts them into the stream it broadcasts as CEA-608 closed captions
                        (32-character lines, rolling up; Latin script only)
  --obs-password-file F the obs-websocket server password, read from the file F
  --youtube URL         also post the captions to a YouTube Live stream's caption ingestion URL
                        (YouTube Studio, stream settings: closed captions, POST captions to URL);
                        the URL holds the stream's key: it is never printed, but a command
                        line is visible to other users in \`ps\`; --youtube-file avoids that
  --youtube-file F      as --youtube, the caption ingestion URL read from the file F

Open http://HOST:PORT/ as a browser source: the captions appear at the bottom of a transparent
page. /events is the Server-Sent Events stream, /captions.vtt and /cues.json the recent cues. Prints
{"url": ...} on stdout once serving ({"url": ..., "hls": ...} with --hls). Stops at the end of the
input, or on SIGINT or SIGTERM: the input is closed there and the captions of the audio read
until then still come out (to --out and --hls too) for up to ${DRAIN_MS / 1000} s; a second signal
stops at once. With --hls the presentation then ends (#EXT-X-ENDLIST) and is served a window
longer (12 s) for players still playing it, or until a signal. Session failures and restarts are
warnings on stderr.
OBS and YouTube never hold the other outputs back: their captions wait in a bounded queue. OBS
gets no captions while it is not streaming, and a restarted OBS is reconnected to; a YouTube post
that fails is sent again unchanged (same seq). Captions that could not be delivered are counted
by reason, said once as they happen, and in the summary at the end.
Talks to API_URL with API_KEY, or to the built-in emulator when API_URL is not set.
Exit code: 0 at the end of the input, 1 on a failure, 2 on bad usage or environment (a key the
service refuses), 130 when interrupted (SIGINT, SIGTERM).`;

const RAW_ENCODINGS: readonly RawEncoding[] = ['s16le', 'f32le', 'alaw', 'mulaw'];

interface Options {
  input: string;
  realtime: boolean;
  inputFormat: string | undefined;
  /** Standard input is headerless PCM of this format. */
  stdinFormat: RawInputFormat | undefined;
  language: Language;
  speakers: boolean;
  transport: 'http' | 'socketio';
  port: number;
  host: string;
  out: string | undefined;
  cors: string | undefined;
  hls: string | undefined;
  delaySec: number;
  obs: string | undefined;
  obsPasswordFile: string | undefined;
  youtube: string | undefined;
  youtubeFile: string | undefined;
}

/** A caption ingestion URL as far as can be told without posting (never echoed: it holds the key). */
const isCaptionUrl = (url: string) => /^https?:\/\/[^/?#]+/i.test(url);

/** A file given for a secret (never echoed); one that cannot be read is bad usage, by its code. */
async function readSecretFile(path: string, option: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read ${option}: ${(err as { code?: string }).code ?? 'ERR_UNKNOWN'}`);
  }
}

function parse(args: string[]): Options {
  const { values, positionals } = parseCommandArgs({
    args,
    allowPositionals: true,
    options: {
      realtime: { type: 'boolean', default: false },
      'input-format': { type: 'string' },
      'sample-rate': { type: 'string' },
      channels: { type: 'string' },
      language: { type: 'string', default: 'auto' },
      speakers: { type: 'boolean', default: false },
      transport: { type: 'string', default: 'socketio' },
      port: { type: 'string', default: '8080' },
      host: { type: 'string', default: '127.0.0.1' },
      out: { type: 'string' },
      cors: { type: 'string' },
      hls: { type: 'string' },
      delay: { type: 'string' },
      obs: { type: 'string' },
      'obs-password-file': { type: 'string' },
      youtube: { type: 'string' },
      'youtube-file': { type: 'string' },
    },
  });
  if (positionals.length !== 1) throw new UsageError('give exactly one input');
  if (!isLanguage(values.language)) throw new UsageError(`unknown --language ${values.language}`);
  const transport = values.transport;
  if (transport !== 'http' && transport !== 'socketio')
    throw new UsageError(`unknown --transport ${transport}`);
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535)
    throw new UsageError('--port must be an integer from 0 to 65535');
  if (values.host!.trim() === '')
    throw new UsageError('--host must be an address (every interface: 0.0.0.0)');
  if (values.out !== undefined && !/\.(vtt|srt)$/i.test(values.out))
    throw new UsageError('--out must name a .vtt or .srt file');
  if (values.cors !== undefined && !isCorsOrigin(values.cors))
    throw new UsageError('--cors must be an origin (https://host[:port]) or *');
  if (values.hls !== undefined && values.hls.trim() === '')
    throw new UsageError('--hls must name a directory');
  if (values.delay !== undefined && values.hls === undefined)
    throw new UsageError('--delay is the HLS delay line: give it with --hls DIR');
  const delaySec = Number(values.delay ?? 4);
  if (values.delay?.trim() === '' || !Number.isFinite(delaySec) || delaySec < 0 || delaySec > 600)
    throw new UsageError('--delay must be a number of seconds from 0 to 600');
  if (values.obs !== undefined && !/^wss?:\/\/[^/?#@]+\/?$/i.test(values.obs))
    throw new UsageError("--obs must be obs-websocket's address, ws://HOST:PORT");
  if (values['obs-password-file'] !== undefined && values.obs === undefined)
    throw new UsageError('--obs-password-file goes with --obs');
  if (values.obs !== undefined && values.language === 'ar')
    throw new UsageError('--obs: CEA-608 closed captions have no Arabic characters');
  // Never echoed: the URL carries the stream's key.
  if (values.youtube !== undefined && !isCaptionUrl(values.youtube))
    throw new UsageError("--youtube must be the stream's caption ingestion URL (http:// or https://)");
  if (values.youtube !== undefined && values['youtube-file'] !== undefined)
    throw new UsageError('give --youtube or --youtube-file, not both');
  let stdinFormat: RawInputFormat | undefined;
  if (positionals[0] === '-') {
    if (values.realtime) throw new UsageError('--realtime is for what ffmpeg opens, not standard input');
    if (values['input-format'] !== undefined) {
      // Headerless PCM on standard input: its encoding, rate and channels are declared.
      const encoding = values['input-format'] as RawEncoding;
      if (!RAW_ENCODINGS.includes(encoding))
        throw new UsageError(`standard input takes --input-format ${RAW_ENCODINGS.join(', ')} (raw PCM)`);
      const sampleRate = Number(values['sample-rate']);
      const channels = Number(values.channels);
      if (!Number.isInteger(sampleRate) || sampleRate < 1000 || sampleRate > 384_000)
        throw new UsageError('raw PCM on standard input needs --sample-rate N (Hz)');
      if (!Number.isInteger(channels) || channels < 1 || channels > 8)
        throw new UsageError('raw PCM on standard input needs --channels N (1 to 8)');
      stdinFormat = { encoding, sampleRate, channels };
    }
  } else if (values['sample-rate'] !== undefined || values.channels !== undefined) {
    throw new UsageError('--sample-rate and --channels describe raw PCM on standard input (-)');
  }
  return {
    stdinFormat,
    input: positionals[0]!,
    realtime: values.realtime!,
    inputFormat: values['input-format'],
    language: values.language,
    speakers: values.speakers!,
    transport,
    port,
    host: values.host!,
    out: values.out,
    cors: values.cors,
    hls: values.hls,
    delaySec,
    obs: values.obs,
    obsPasswordFile: values['obs-password-file'],
    youtube: values.youtube,
    youtubeFile: values['youtube-file'],
  };
}

/** One output's delivery, as the summary says it. */
function delivery(label: string, unit: string, stats: CaptionDeliveryStats): string {
  const missing = [
    ...Object.entries(stats.undelivered)
      .filter(([, n]) => n > 0)
      .map(([reason, n]) => `${n} ${reason}`),
    ...(stats.pending > 0 ? [`${stats.pending} pending`] : []),
  ];
  const why = missing.length > 0 ? ` (not delivered: ${missing.join(', ')})` : '';
  return `${label}: ${stats.delivered} of ${stats.made} ${unit} delivered${why}`;
}

/**
 * The input until it ends, or until `stop` aborts: then it is closed (ffmpeg stopped, standard
 * input let go) and what was read goes on as if the input had ended there. An input that fails
 * (a source that stalled, a reset connection) ends there too, after telling `failed`: the
 * captions of the audio read until then still come out, and the failure is reported after.
 */
async function* readUntil(
  source: Readable,
  stop: AbortSignal,
  cut: AbortSignal,
  failed: (err: unknown, afterAudio: boolean) => void,
  close: () => void = () => source.destroy(),
): AsyncGenerator<Buffer> {
  if (stop.aborted) {
    close();
    return;
  }
  stop.addEventListener('abort', close, { once: true });
  let afterAudio = false;
  try {
    for await (const chunk of source) {
      afterAudio = true;
      yield chunk as Buffer;
    }
  } catch (err) {
    if (cut.aborted) throw err;
    // Closed by `stop` (a premature close), or failing as it was closed: the input ended.
    if (!stop.aborted) failed(err, afterAudio);
  } finally {
    stop.removeEventListener('abort', close);
  }
}

const describe = (err: unknown) =>
  `${(err as { code?: string }).code ?? 'ERR_UNKNOWN'}: ${err instanceof Error ? err.message : String(err)}`;

/**
 * A file input that is not there (or is a directory): bad usage, said before anything starts
 * (ffmpeg would fail only once the captions were being served). Standard input, what
 * `--input-format` names (a device, lavfi) and URLs (`rtmp://`, `file:`) are ffmpeg's to open.
 */
async function checkInputFile(input: string, inputFormat: string | undefined): Promise<void> {
  if (input === '-' || inputFormat !== undefined || /^[a-z][a-z0-9+.-]*:/i.test(input)) return;
  let info: Stats;
  try {
    info = await stat(input);
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    throw new UsageError(
      code === 'ENOENT' ? `no such file: ${input}` : `cannot read ${input} (${String(code)})`,
    );
  }
  if (info.isDirectory()) throw new UsageError(`${input} is a directory: caption takes one input`);
}

export async function run(args: string[]): Promise<number> {
  let options: Options;
  try {
    options = parse(args);
    await checkInputFile(options.input, options.inputFormat);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('caption', err);
  }
  const log = (line: string) => process.stderr.write(`${line}\n`);
  /** The first signal: close the input, let the captions of what was read come out. */
  const drain = new AbortController();
  /** A second signal, or a drain that took too long: stop everything at once. */
  const interrupt = new AbortController();
  // The first pipeline to fail stops the others, so that nothing runs on while we close.
  const stop = new AbortController();
  const signal = AbortSignal.any([interrupt.signal, stop.signal]);
  let drainTimer: NodeJS.Timeout | undefined;
  /** The input failed: reported once the captions of what it gave are out (or cut). */
  let inputFailure: { error: unknown } | undefined;
  let failTimer: NodeJS.Timeout | undefined;
  const inputFailed = (error: unknown, afterAudio: boolean) => {
    inputFailure = { error };
    if (afterAudio)
      log(
        `the input failed (${describe(error)}): the captions of the audio read until then follow (at most ${DRAIN_MS / 1000} s)`,
      );
    failTimer = setTimeout(() => stop.abort(error), DRAIN_MS);
  };
  /** Serving the end of an HLS presentation after the input ended: a signal stops it. */
  let lingering: (() => void) | undefined;
  const onSignal = () => {
    if (lingering) {
      lingering();
      return;
    }
    if (drain.signal.aborted) {
      interrupt.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
      return;
    }
    log(
      `interrupted: closing the input; the captions of the audio read until now follow (at most ${DRAIN_MS / 1000} s; a second signal stops at once)`,
    );
    drain.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
    drainTimer = setTimeout(
      () => interrupt.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted')),
      DRAIN_MS,
    );
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  let service: Service | undefined;
  let relay: CaptionRelay | undefined;
  let hls: HlsOutput | undefined;
  /** With --hls: the programme read once, as MPEG-TS, for the presentation and the captions. */
  let media: MediaInput | undefined;
  let obs: ObsCaptions | undefined;
  let youtube: YoutubeCaptions | undefined;
  /** The --out file, once it is being written. */
  let writing: string | undefined;
  try {
    let obsPassword: string | undefined;
    let youtubeUrl = options.youtube;
    try {
      if (options.obsPasswordFile !== undefined)
        obsPassword = (await readSecretFile(options.obsPasswordFile, '--obs-password-file')).replace(
          /\r?\n$/,
          '',
        );
      if (options.youtubeFile !== undefined) {
        youtubeUrl = (await readSecretFile(options.youtubeFile, '--youtube-file'))
          .split(/\r?\n/, 1)[0]!
          .trim();
        if (!isCaptionUrl(youtubeUrl))
          throw new UsageError(
            "--youtube-file must hold the stream's caption ingestion URL (http:// or https://)",
          );
      }
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      return badUsage('caption', err);
    }
    service = await openService(process.env, log);
    const client = service.client;
    // The relay listens first: an address it cannot take is bad usage before anything is done
    // (the HLS output clears an earlier run's playlists from its directory).
    const hlsDir = options.hls === undefined ? undefined : resolve(options.hls);
    try {
      relay = await captionRelay({
        ...(hlsDir === undefined ? {} : { mounts: [hlsMount(hlsDir)] }),
        port: options.port,
        host: options.host,
        ...(options.cors === undefined ? {} : { cors: options.cors }),
        // The page's lang where one language is captioned (codeswitch mixes two; auto is unknown).
        ...(options.language === 'ar' || options.language === 'en' ? { lang: options.language } : {}),
      });
    } catch (err) {
      // A port in use or not allowed, a host that is not this machine's: bad usage, as for the
      // emulator.
      const code = listenErrorCode(err);
      if (code === undefined) throw err;
      log(`speechpipe caption: cannot listen on ${options.host}:${options.port} (${(err as Error).message})`);
      return 2;
    }
    if (hlsDir !== undefined) {
      hls = await hlsOutput({
        dir: hlsDir,
        delaySec: options.delaySec,
        ...(options.language === 'ar' || options.language === 'en' ? { language: options.language } : {}),
      });
    }
    const hlsUrl = hls ? `${relay.url}${hls.mount.prefix}master.m3u8` : undefined;
    process.stdout.write(`${JSON.stringify({ url: relay.url, ...(hlsUrl ? { hls: hlsUrl } : {}) })}\n`);
    log(`captions at ${relay.url}/ (events: ${relay.url}/events)${hlsUrl ? `; HLS at ${hlsUrl}` : ''}`);
    if (options.obs !== undefined) {
      obs = await obsCaptions({
        url: options.obs,
        ...(obsPassword === undefined ? {} : { password: obsPassword }),
      });
      obs.on('warning', (w: Error) => log(`warning: ${w.message}`));
      log(`captions to OBS at ${options.obs}`);
    }
    if (drain.signal.aborted) throw drain.signal.reason;

    // A live input's audio starts now: YouTube gets each caption stamped with when it was said.
    const spokenNow =
      options.realtime || options.input === '-' || options.inputFormat !== undefined || hls !== undefined;
    if (youtubeUrl !== undefined) {
      youtube = youtubeCaptions({ url: youtubeUrl, ...(spokenNow ? { timeOrigin: Date.now() } : {}) });
      youtube.on('warning', (w: Error) => log(`warning: ${w.message}`));
    }
    const inputArgs = options.stdinFormat
      ? [
          '-f',
          options.stdinFormat.encoding,
          '-ar',
          String(options.stdinFormat.sampleRate),
          '-ac',
          String(options.stdinFormat.channels),
        ]
      : options.inputFormat
        ? ['-f', options.inputFormat]
        : [];
    let audio: Readable;
    if (hls) {
      const hlsAudio = await hlsAudioFor(options.input, { inputArgs, signal });
      // A live presentation goes at the programme's own pace: a file (or a generated source) is
      // read as if it were a broadcast; a stream URL and standard input come at theirs.
      const ownPace = options.realtime || (options.input !== '-' && !NETWORK_URL.test(options.input));
      media = mediaInput(options.input, { realtime: ownPace, inputArgs, audio: hlsAudio, signal });
      log(
        `HLS: video copied, audio ${hlsAudio === 'copy' ? 'copied' : 'encoded to AAC'}, held back ${options.delaySec} s`,
      );
      media.on('warning', (w: Error) => log(`warning: ${w.message}`));
      // The captions' audio is decoded from the same MPEG-TS: one clock for both.
      audio = ffmpegPcm({
        sampleRate: 16_000,
        channels: 1,
        inputArgs: ['-probesize', '65536', '-analyzeduration', '500000', '-f', 'mpegts'],
        lowLatency: true,
      });
    } else {
      const live = liveInput(options.input, {
        realtime: options.realtime,
        ...(options.stdinFormat ? { stdinFormat: options.stdinFormat } : { inputArgs }),
        signal,
      });
      live.on('warning', (w: Error) => log(`warning: ${w.message}`));
      audio = live;
    }
    // A live source is real time already; a file is sent as fast as the session allows.
    const pacer = new Pacer();
    const live = options.realtime || options.input === '-' || options.inputFormat !== undefined;
    const framesFor = (stream: 'stt' | 'diarization'): Readable[] => [
      toFrames({ language: options.language }),
      ...(stream === 'stt' ? [pace({ pacer, live })] : [pace({ live })]),
    ];
    // A session that fails is replaced (for up to RELAY_RESTART_WITHIN_MS of failures): said on
    // stderr, so that an outage or a wrong API_URL is not ten silent minutes, nor a gap in the
    // captions (audio the replay buffer could not keep) a silent one.
    const watch = (stream: LiveTranscriptionStream, name: string) => {
      stream.on('session-error', (err) =>
        log(`warning: ${name} session failed (${describe(err)}); restarting`),
      );
      stream.on('audio-lost', (lost: LostAudio) =>
        log(
          `warning: ${name}: the audio from ${lost.start_time.toFixed(1)} s to ${lost.end_time.toFixed(1)} s was lost with a failed session (not captioned)`,
        ),
      );
      return stream;
    };
    // Days of captions: nothing kept for a final transcript.
    const transcript = [
      ...framesFor('stt'),
      watch(
        sttStream({ client, transport: options.transport, pacer, restartWithinMs: RELAY_RESTART_WITHIN_MS }),
        'ASR',
      ),
      assembleTranscript({ keepWords: false }),
    ];
    const split = tee(options.speakers ? 2 : 1);
    const [forAsr, forSpeakers] = split.branches;
    const timeline = new SpeakerTimeline();
    const outputs = tee(1 + [options.out, hls, obs, youtube].filter(Boolean).length, { objectMode: true });
    const [toRelay, ...others] = outputs.branches;
    const toFile = options.out ? others.shift() : undefined;
    const toHls = hls ? others.shift() : undefined;
    const toObs = obs ? others.shift() : undefined;
    const toYoutube = youtube ? others.shift() : undefined;
    const theRelay = relay;
    const programme = media;
    const done = [
      pipeline(
        readUntil(audio, drain.signal, signal, inputFailed, programme ? () => programme.finish() : undefined),
        split.input,
        { signal },
      ),
      pipeline(
        [
          forAsr!,
          ...transcript,
          ...(options.speakers ? [alignSpeakersStream({ timeline, keepWords: false })] : []),
          outputs.input,
        ] as unknown as [Readable, Writable],
        { signal },
      ),
      // The relay's end tells viewers the captions are over: only at the input's own end. An
      // interrupted or failed relay just closes its connections, and overlays reconnect to the
      // next one.
      pipeline(toRelay!, theRelay, { signal, end: false }).then(async () => {
        if (drain.signal.aborted || inputFailure) return;
        await new Promise<void>((resolve, reject) =>
          theRelay.end((err?: Error | null) => (err ? reject(err) : resolve())),
        );
      }),
    ];
    if (forSpeakers) {
      done.push(
        pipeline(
          [
            forSpeakers,
            ...framesFor('diarization'),
            watch(
              diarizationStream({
                client,
                transport: options.transport,
                restartWithinMs: RELAY_RESTART_WITHIN_MS,
              }),
              'diarization',
            ),
            mergeDiarization({ keepTimeline: false }),
            timeline.writable(),
          ] as unknown as [Readable, Writable],
          { signal },
        ),
      );
    }
    if (programme && hls && toHls) {
      // The programme to the presentation and, decoded, to the captions.
      const media = tee(2);
      const [toDecoder, toSegments] = media.branches;
      done.push(
        pipeline(programme, media.input, { signal }),
        pipeline(toDecoder!, audio as unknown as Writable, { signal }),
        pipeline(toSegments!, hls.media, { signal }),
        pipeline(toHls, hls, { signal }),
      );
    }
    if (toFile) {
      const format = options.out!.toLowerCase().endsWith('.srt') ? 'srt' : 'vtt';
      done.push(pipeline(toFile, toCaptions({ format }), createWriteStream(options.out!), { signal }));
      writing = options.out;
    }
    if (toObs && obs) done.push(pipeline(toObs, obs, { signal }));
    if (toYoutube && youtube) done.push(pipeline(toYoutube, youtube, { signal }));
    const failures: unknown[] = [];
    await Promise.all(
      done.map((p) =>
        p.catch((err: unknown) => {
          failures.push(err);
          stop.abort(err);
        }),
      ),
    );
    if (inputFailure) throw inputFailure.error;
    if (failures.length > 0) throw failures[0];
    const stats = relay.stats();
    if (drain.signal.aborted) {
      log(
        `interrupted: ${stats.cues} cues${options.out ? `, all written to ${options.out}` : ''}, ${stats.dropped} viewers dropped for falling behind`,
      );
      return 130;
    }
    log(
      `the input ended: ${stats.cues} cues, ${stats.dropped} viewers dropped for falling behind${hls ? `; ${hls.stats().segments} HLS segments, ended` : ''}`,
    );
    if (hls) {
      // Players behind the live edge still fetch the last segments: serve them a window longer.
      log(`serving the HLS presentation's end for ${hls.windowSec} s more (a signal stops at once)`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, hls!.windowSec * 1000);
        lingering = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return 0;
  } catch (err) {
    if (drain.signal.aborted || interrupt.signal.aborted) {
      // Cut before the captions were all out (a second signal, the drain's bound, or a failure).
      const cut =
        interrupt.signal.aborted || !(err instanceof SpeechpipeError && err.code === 'ERR_INTERRUPTED');
      log(
        cut
          ? `interrupted: stopped before the last captions were out${writing ? ` (${writing} has those made until then)` : ''}${interrupt.signal.aborted ? '' : `: ${describe(err)}`}`
          : 'interrupted',
      );
      return 130;
    }
    log(`speechpipe caption: ${describe(err)}`);
    if (writing) log(`${writing} has the captions made until then`);
    // A bad setting in the environment (API_URL without API_KEY, a refused key) is bad usage,
    // as for every command.
    const code = (err as { code?: unknown }).code;
    return code === 'ERR_CONFIG' ||
      code === 'ERR_OBS_AUTH' ||
      code === 'ERR_OBS_PROTOCOL' ||
      isAuthFailure(err)
      ? 2
      : 1;
  } finally {
    clearTimeout(drainTimer);
    clearTimeout(failTimer);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    media?.destroy();
    hls?.destroy();
    await obs?.close();
    await youtube?.close();
    if (obs) log(delivery('OBS', 'lines', obs.stats()));
    if (youtube) {
      const stats = youtube.stats();
      log(`${delivery('YouTube', 'cues', stats)}, in ${stats.posts} posts (${stats.retries} sent again)`);
    }
    await relay?.close();
    await service?.close();
  }
}
