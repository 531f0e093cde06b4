// `speechpipe tts`: text to a WAV file. A text longer than one request may carry is cut at
// sentence ends (else at spaces) into pieces the service accepts, spoken one after another
// into one file; `--list-voices` prints the voices.

import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { lstat, readFile, rename, rm } from 'node:fs/promises';
import { extname } from 'node:path';
import { finished } from 'node:stream/promises';
import { runFfmpeg } from '../audio/ffmpeg.ts';
import { isAuthFailure } from '../client/retry.ts';
import { SpeechpipeError } from '../protocol/errors.ts';
import { DEFAULT_LIMITS } from '../protocol/limits.ts';
import { countCodePoints, hasSpeakableText } from '../protocol/tts-request.ts';
import { wavFile } from '../sinks/wav-file.ts';
import { openService } from './service.ts';
import { badUsage, parseCommandArgs, UsageError } from './usage.ts';

export const USAGE = `usage: speechpipe tts <text>... --out FILE.wav|.ogg|.opus|.mp3|.flac [options]
       speechpipe tts --text-file FILE --out FILE [options]
       speechpipe tts --list-voices

  --out FILE        the file to write, its format from its extension: .wav (PCM16 mono),
                    .ogg/.opus (Ogg Opus), .mp3, .flac (the last three encoded by ffmpeg);
                    written whole or not at all
  --text-file FILE  read the text from FILE ('-' for standard input) instead of the arguments
  --voice UUID      a voice id from --list-voices (default: the deployment's choice)
  --model M         the TTS model (default nebula)
  --transport T     socketio (default: playable 24 kHz) or http (16 kHz protocol capture)
  --max-chars N     longest piece sent in one request, in code points (default ${DEFAULT_LIMITS.ttsInputCharacters.free}, the free tier's limit)
  --list-voices     print the voices as JSON lines and exit

Talks to API_URL with API_KEY, or to the built-in emulator when API_URL is not set.
Exit code: 0 when the file is written, 1 when synthesis failed, 2 on bad usage or environment
(a --text-file that cannot be read, a key the service refuses), 130 when interrupted (SIGINT, SIGTERM).`;

/**
 * `text` in pieces of at most `maxChars` code points, each with something speakable: cut after
 * sentence ends where possible, else at white space, else (one word longer than a piece) inside
 * the word. Pieces are trimmed; a piece with no letter or number joins its neighbour.
 */
export function splitForTts(text: string, maxChars: number): string[] {
  const length = countCodePoints;
  const pieces: string[] = [];
  let current = '';
  const push = (part: string) => {
    const joined = current ? `${current} ${part}` : part;
    if (length(joined) <= maxChars) {
      current = joined;
      return;
    }
    if (current) pieces.push(current);
    current = part;
  };
  for (const sentence of text.trim().split(/(?<=[.!?؟…])\s+/u)) {
    if (length(sentence) <= maxChars) {
      push(sentence);
      continue;
    }
    for (const word of sentence.split(/\s+/u)) {
      const points = [...word];
      for (let at = 0; at < points.length; at += maxChars) push(points.slice(at, at + maxChars).join(''));
    }
  }
  if (current) pieces.push(current);
  // Nothing to say in a piece of punctuation alone ("..."): drop it rather than fail the request.
  return pieces.map((p) => p.trim()).filter(hasSpeakableText);
}

interface Options {
  out: string | undefined;
  text: string | undefined;
  voice: string | undefined;
  model: string | undefined;
  transport: 'http' | 'socketio';
  maxChars: number;
  listVoices: boolean;
}

async function readText(path: string): Promise<string> {
  if (path !== '-') {
    // A text file that is not there (or not a file) is bad usage, as a missing input is.
    return readFile(path, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new UsageError(
        `--text-file ${JSON.stringify(path)}: cannot read it (${err.code ?? err.message})`,
      );
    });
  }
  const parts: Buffer[] = [];
  for await (const chunk of process.stdin) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

async function parse(args: string[]): Promise<Options> {
  const { values, positionals } = parseCommandArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: 'string' },
      'text-file': { type: 'string' },
      voice: { type: 'string' },
      model: { type: 'string' },
      transport: { type: 'string', default: 'socketio' },
      'max-chars': { type: 'string', default: String(DEFAULT_LIMITS.ttsInputCharacters.free) },
      'list-voices': { type: 'boolean', default: false },
    },
  });
  const listVoices = values['list-voices']!;
  const transport = values.transport;
  if (transport !== 'http' && transport !== 'socketio')
    throw new UsageError(`unknown --transport ${transport}`);
  const maxChars = Number(values['max-chars']);
  if (!Number.isSafeInteger(maxChars) || maxChars < 1)
    throw new UsageError('--max-chars must be a positive integer');
  let text: string | undefined;
  if (!listVoices) {
    if (values['text-file'] !== undefined && positionals.length > 0)
      throw new UsageError('give the text as arguments or with --text-file, not both');
    text = values['text-file'] !== undefined ? await readText(values['text-file']) : positionals.join(' ');
    if (!hasSpeakableText(text)) throw new UsageError('no text to speak');
    if (!values.out) throw new UsageError('--out is required');
    await checkReplaceable(values.out);
    formatOf(values.out);
  }
  return {
    out: values.out,
    text,
    voice: values.voice,
    model: values.model,
    transport,
    maxChars,
    listVoices,
  };
}

/** Output formats by extension: WAV written directly, the others encoded by ffmpeg from it. */
const FORMATS: Record<string, { name: string; ffmpeg?: string[] }> = {
  '.wav': { name: 'WAV (PCM16)' },
  '.ogg': { name: 'Ogg Opus', ffmpeg: ['-c:a', 'libopus', '-f', 'ogg'] },
  '.opus': { name: 'Ogg Opus', ffmpeg: ['-c:a', 'libopus', '-f', 'ogg'] },
  '.mp3': { name: 'MP3', ffmpeg: ['-c:a', 'libmp3lame', '-q:a', '2', '-f', 'mp3'] },
  '.flac': { name: 'FLAC', ffmpeg: ['-c:a', 'flac', '-f', 'flac'] },
};

/** The format `--out`'s extension asks for; any other extension is bad usage (not a WAV by another name). */
function formatOf(out: string): { name: string; ffmpeg?: string[] } {
  const format = FORMATS[extname(out).toLowerCase()];
  if (!format) {
    throw new UsageError(
      `--out ${JSON.stringify(out)}: unknown extension; use ${Object.keys(FORMATS).join(', ')}`,
    );
  }
  return format;
}

/**
 * The output is written beside `--out` and renamed over it: only a regular file (or nothing)
 * may be replaced so. A FIFO, a device, a socket, a directory or a symlink is refused: renaming
 * over it would silently replace the node (a symlink: the link, not what it points to).
 */
async function checkReplaceable(out: string): Promise<void> {
  const stat = await lstat(out).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw new UsageError(`--out ${JSON.stringify(out)}: ${err.message}`);
  });
  if (stat === undefined || stat.isFile()) return;
  const kind = stat.isSymbolicLink()
    ? 'a symbolic link'
    : stat.isFIFO()
      ? 'a FIFO'
      : stat.isSocket()
        ? 'a socket'
        : stat.isDirectory()
          ? 'a directory'
          : 'a device';
  throw new UsageError(`--out ${JSON.stringify(out)} is ${kind}, not a regular file: refusing to replace it`);
}

export async function run(args: string[]): Promise<number> {
  let options: Options;
  try {
    options = await parse(args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('tts', err);
  }
  const log = (line: string) => process.stderr.write(`${line}\n`);
  const controller = new AbortController();
  const onSignal = () => controller.abort(new SpeechpipeError('ERR_INTERRUPTED', 'interrupted'));
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const service = await openService(process.env, log, { transcribes: false });
  const signal = controller.signal;
  try {
    if (options.listVoices) {
      for (const voice of await service.client.tts.listVoices({ signal }))
        process.stdout.write(`${JSON.stringify(voice)}\n`);
      return 0;
    }
    const pieces = splitForTts(options.text!, options.maxChars);
    const out = options.out!;
    // Written beside the target and renamed at the end: a failure leaves no half a file, and
    // two runs writing the same target do not write into each other's.
    const partial = `${out}.${randomUUID().slice(0, 8)}.partial`;
    let wav: ReturnType<typeof wavFile> | undefined;
    // A file error (no such directory, a full disk) may come while we wait for audio: it stops
    // the synthesis and is the error reported.
    const fileFailed = new AbortController();
    /** Ends the syntheses still running when the command fails. */
    const cancel = new AbortController();
    const stopped = AbortSignal.any([signal, fileFailed.signal, cancel.signal]);
    let seconds = 0;
    try {
      // Pieces are spoken several at once (as many as the TTS limit allows) and written in
      // order: piece i streams to the file while the next ones are synthesized and held.
      const window = Math.max(
        1,
        service.client.admissionStats().find((w) => w.workload === 'tts')?.concurrency ?? 1,
      );
      /**
       * A piece's audio, gathered while an earlier piece is being written: a piece whose audio
       * breaks off is spoken again (`synthesizeToBuffer`), since none of it was written yet.
       */
      const gather = (text: string) =>
        service.client.tts.synthesizeToBuffer({
          text,
          transport: options.transport,
          ...(options.voice ? { voiceId: options.voice } : {}),
          ...(options.model ? { model: options.model } : {}),
          signal: stopped,
        });
      const pending: Array<ReturnType<typeof gather>> = [];
      const startNext = () => {
        const next = pieces[pending.length];
        if (next === undefined) return;
        const gathered = gather(next);
        gathered.catch(() => {}); // awaited in order below
        pending.push(gathered);
      };
      for (let i = 0; i < Math.min(window, pieces.length); i++) startNext();
      for (let i = 0; i < pieces.length; i++) {
        const piece = await pending[i]!;
        startNext();
        if (!wav) {
          wav = wavFile(partial, { sampleRate: piece.sampleRate, channels: 1 });
          wav.on('error', (err) => fileFailed.abort(err));
        }
        seconds += piece.pcm.length / 2 / piece.sampleRate;
        if (!wav.write(piece.pcm)) await once(wav, 'drain', { signal: stopped });
        if (pieces.length > 1) log(`spoke piece ${i + 1} of ${pieces.length}`);
      }
      wav!.end();
      await finished(wav!);
      const encode = formatOf(out).ffmpeg;
      if (encode) {
        // Encoded from the finished WAV into a second partial, which then replaces the first.
        const encoded = `${partial}${extname(out)}`;
        try {
          await runFfmpeg(['-i', partial, ...encode, '-y', encoded], { signal }).done;
          await rename(encoded, partial);
        } finally {
          await rm(encoded, { force: true });
        }
      }
      await checkReplaceable(out); // nothing became a FIFO or a link meanwhile
      await rename(partial, out);
    } catch (caught) {
      const err = fileFailed.signal.aborted ? fileFailed.signal.reason : caught;
      cancel.abort(err);
      if (wav) {
        // The file may still be opening: remove it only once the stream has let it go.
        wav.destroy();
        await finished(wav).catch(() => {});
      }
      await rm(partial, { force: true });
      throw err;
    }
    process.stdout.write(`${out}: ${seconds.toFixed(2)} s of speech\n`);
    return 0;
  } catch (err) {
    const code = (err as { code?: string }).code ?? 'ERR_UNKNOWN';
    log(`speechpipe tts: ${code}: ${err instanceof Error ? err.message : String(err)}`);
    // The account's limit is lower than the pieces sent (an account of another tier, a
    // deployment's own limit): say what to change.
    const limit = (err as { data?: { limit?: unknown } }).data?.limit;
    if (code === 'CHARACTER_COUNT_EXCEEDED')
      log(
        `the service takes fewer characters a request than --max-chars ${options.maxChars}: run again with --max-chars ${typeof limit === 'number' ? limit : 'N'}`,
      );
    if (signal.aborted) return 130;
    // The service refused the key (401) or what it may do (403): bad environment, as for every command.
    return isAuthFailure(err) ? 2 : 1;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await service.close();
  }
}
