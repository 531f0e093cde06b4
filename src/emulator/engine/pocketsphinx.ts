// PocketSphinx, Debian's packaged English recognizer (`pocketsphinx`, `pocketsphinx-en-us`):
// where it is installed, and one long-lived `pocketsphinx_batch` process that decodes
// utterances of 16 kHz PCM16 files one at a time, each named by a control line, and answers
// each with its word segmentation.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { accessSync, constants, openSync, readFileSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Where Debian's pocketsphinx-en-us puts the US English model. */
export const POCKETSPHINX_MODEL_DIR = '/usr/share/pocketsphinx/model/en-us';

/** The recognizer's programs and model, as found on this machine. */
export interface PocketSphinxInstall {
  /** `pocketsphinx_batch` (the engine's decoder). */
  batch: string;
  /** `pocketsphinx_continuous` (the WER oracle's direct run). */
  continuous: string;
  /** Acoustic model directory, language model, pronunciation dictionary. */
  hmm: string;
  lm: string;
  dict: string;
}

let found: PocketSphinxInstall | null | undefined;

/** PocketSphinx's programs on the PATH and the en-us model, or null when either is missing. */
export function findPocketSphinx(): PocketSphinxInstall | null {
  if (found !== undefined) return found;
  const batch = onPath('pocketsphinx_batch');
  const continuous = onPath('pocketsphinx_continuous');
  const model = {
    hmm: join(POCKETSPHINX_MODEL_DIR, 'en-us'),
    lm: join(POCKETSPHINX_MODEL_DIR, 'en-us.lm.bin'),
    dict: join(POCKETSPHINX_MODEL_DIR, 'cmudict-en-us.dict'),
  };
  const readable = [join(model.hmm, 'mdef'), model.lm, model.dict].every((file) => {
    try {
      accessSync(file, constants.R_OK);
      return true;
    } catch {
      return false;
    }
  });
  found = batch && continuous && readable ? { batch, continuous, ...model } : null;
  return found;
}

/** The engine `choice` gives on this machine: `auto` is PocketSphinx when it is installed. */
export function chosenEngine(choice: 'generated' | 'pocketsphinx' | 'auto'): 'generated' | 'pocketsphinx' {
  if (choice !== 'auto') return choice;
  return findPocketSphinx() ? 'pocketsphinx' : 'generated';
}

function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * The search's settings, chosen for speed and measured on the English recordings of
 * ../shared/media (docs/emulator.md): `-maxwpf 10 -maxhmmpf 10000` prune the search to about
 * two thirds of the CPU with the same words, where `-ds 2` or `-topn 2` cost words.
 */
export const SPEED_ARGS: readonly string[] = ['-maxwpf', '10', '-maxhmmpf', '7000'];

/**
 * The engine's decoder settings: the speed settings, and no voice activity detection of
 * PocketSphinx's own, as the speech regions are the emulator's (with it on, the frames it drops
 * shift every later word's time).
 */
export const DECODER_ARGS: readonly string[] = ['-remove_silence', 'no', ...SPEED_ARGS];

/** The frames per second of PocketSphinx's features (`-frate`). */
const FRAME_RATE = 100;
export const SAMPLE_RATE = 16_000;

/** A stretch of a raw PCM16LE 16 kHz mono file to decode as one utterance. */
export interface Utterance {
  /** An absolute path without spaces (control lines are split on white space). */
  path: string;
  /** Seconds from the start of the file. */
  startSec: number;
  endSec: number;
}

/** A recognized word, its times in seconds from the start of the file. */
export interface RecognizedWord {
  word: string;
  start: number;
  end: number;
}

export class RecognizerError extends Error {
  override name = 'RecognizerError';
}

/**
 * The words of a `-hypseg` line: `uttid S s T t A a L l` then `startFrame ascr lscr word`
 * per segment and the utterance's last frame. Fillers (`<s>`, `</s>`, `<sil>`, `[NOISE]`...)
 * are dropped and alternative pronunciations (`and(2)`) named by their word; a word ends where
 * the next segment starts. Times are seconds from the start of the file (`offsetSec` is where
 * the utterance began).
 */
export function parseHypseg(line: string, offsetSec: number): { uttId: string; words: RecognizedWord[] } {
  const tokens = line.trim().split(/\s+/);
  const uttId = tokens[0] ?? '';
  const words: RecognizedWord[] = [];
  const segments = tokens.slice(9);
  const lastFrame = Number(segments.at(-1));
  for (let i = 0; i + 3 < segments.length; i += 4) {
    const word = segments[i + 3]!;
    if (/^[<[+]/.test(word)) continue;
    const startFrame = Number(segments[i]);
    const next = Number(segments[i + 4]);
    const endFrame = i + 4 < segments.length - 1 ? next : lastFrame + 1;
    if (!Number.isFinite(startFrame) || !Number.isFinite(endFrame)) continue;
    words.push({
      word: word.replace(/\(\d+\)$/, ''),
      start: offsetSec + startFrame / FRAME_RATE,
      end: offsetSec + Math.max(startFrame, endFrame) / FRAME_RATE,
    });
  }
  return { uttId, words };
}

const KILL_GRACE_MS = 2000;

/**
 * One `pocketsphinx_batch` process, kept running between utterances (loading the model and
 * dictionary costs about a quarter of a second). Its control file and its `-hypseg` output are
 * FIFOs in the emulator's temp directory: it opens its files by name, and a name for Node's
 * stdio (a socket) cannot be opened. Both FIFOs are held open read-write here, so neither end
 * blocks or sees an early end of file; closing the control FIFO ends the process normally.
 */
export class PocketSphinxProcess {
  readonly #install: PocketSphinxInstall;
  readonly #ready: Promise<{ control: Socket; output: Socket; child: ChildProcess }>;
  #current:
    | { uttId: string; offsetSec: number; resolve: (w: RecognizedWord[]) => void; reject: (e: Error) => void }
    | undefined;
  #seq = 0;
  #lineBuffer = '';
  #stderrTail = '';
  #exited = false;
  #stopping = false;
  #killTimer: NodeJS.Timeout | undefined;
  #pid: number | undefined;
  readonly #fifos: string[];
  /** CPU seconds the process had used when last read (kept after it exits). */
  #cpuSec = 0;
  readonly exited: Promise<void>;
  #onExit!: () => void;

  /** `fifoBase`: a fresh path prefix in a private directory for the two FIFOs. */
  constructor(install: PocketSphinxInstall, fifoBase: string) {
    this.#install = install;
    this.#fifos = [`${fifoBase}.ctl`, `${fifoBase}.hypseg`];
    this.exited = new Promise((resolve) => {
      this.#onExit = resolve;
    });
    this.#ready = this.#start();
    this.#ready.catch((err: Error) => this.#died(err));
  }

  /** Whether the process is gone (or going). */
  get dead(): boolean {
    return this.#exited || this.#stopping;
  }

  /** CPU seconds (user + system) the process has used. */
  cpuSeconds(): number {
    this.#readCpu();
    return this.#cpuSec;
  }

  async #start(): Promise<{ control: Socket; output: Socket; child: ChildProcess }> {
    const [controlPath, outputPath] = this.#fifos as [string, string];
    await run('mkfifo', ['-m', '600', controlPath, outputPath]);
    if (this.#stopping) throw new RecognizerError('stopped before it started');
    // O_RDWR: opening never waits for the other end, and reading never sees an end of file
    // while the process has not opened its end yet.
    const flags = constants.O_RDWR | constants.O_NONBLOCK;
    const control = new Socket({ fd: openSync(controlPath, flags), readable: false, writable: true });
    const output = new Socket({ fd: openSync(outputPath, flags), readable: true, writable: false });
    control.on('error', () => {});
    output.on('error', () => {});
    output.setEncoding('utf8');
    output.on('data', (text: string) => this.#output(text));
    const i = this.#install;
    const child = spawn(
      i.batch,
      [
        '-hmm',
        i.hmm,
        '-lm',
        i.lm,
        '-dict',
        i.dict,
        '-adcin',
        'yes',
        '-cepext',
        '',
        '-ctl',
        controlPath,
        '-hypseg',
        outputPath,
        ...DECODER_ARGS,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], windowsHide: true },
    );
    this.#pid = child.pid;
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => this.#stderr(text));
    child.once('error', (err) => this.#died(err));
    child.once('close', (code, signal) => {
      control.destroy();
      output.destroy();
      this.#died(new RecognizerError(`pocketsphinx_batch ended (${signal ?? `exit code ${code}`})`));
    });
    if (this.#stopping) child.kill('SIGTERM');
    return { control, output, child };
  }

  /** Decode one utterance (one at a time: the previous must have settled). */
  async decode(utterance: Utterance): Promise<RecognizedWord[]> {
    if (this.#current) throw new RecognizerError('the process is decoding another utterance');
    if (this.dead) throw new RecognizerError('the process has ended');
    const uttId = `u${++this.#seq}`;
    const first = Math.max(0, Math.floor(utterance.startSec * FRAME_RATE));
    const last = Math.max(first, Math.ceil(utterance.endSec * FRAME_RATE));
    const done = new Promise<RecognizedWord[]>((resolve, reject) => {
      this.#current = { uttId, offsetSec: first / FRAME_RATE, resolve, reject };
    });
    done.catch(() => {}); // it may fail while the process starts; the caller gets it below
    const { control } = await this.#ready;
    if (this.dead) throw new RecognizerError('the process has ended');
    control.write(`${utterance.path} ${first} ${last} ${uttId}\n`);
    return done;
  }

  /** End the process: SIGTERM, then SIGKILL after a grace period. */
  stop(): void {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#readCpu();
    this.#ready.then(
      ({ child, control, output }) => {
        control.destroy();
        output.destroy();
        if (this.#exited) return;
        child.kill('SIGTERM');
        this.#killTimer = setTimeout(() => {
          if (!this.#exited) child.kill('SIGKILL');
        }, KILL_GRACE_MS);
      },
      () => {},
    );
    this.#fail(new RecognizerError('the process was stopped'));
  }

  #output(text: string): void {
    this.#lineBuffer += text;
    for (let nl = this.#lineBuffer.indexOf('\n'); nl >= 0; nl = this.#lineBuffer.indexOf('\n')) {
      const line = this.#lineBuffer.slice(0, nl);
      this.#lineBuffer = this.#lineBuffer.slice(nl + 1);
      const current = this.#current;
      if (!current) continue;
      const { uttId, words } = parseHypseg(line, current.offsetSec);
      if (uttId !== current.uttId) continue;
      this.#current = undefined;
      this.#readCpu();
      current.resolve(words);
    }
  }

  #stderr(text: string): void {
    // The log is informational but for errors; a file it cannot open is answered with no line.
    this.#stderrTail = (this.#stderrTail + text).slice(-4096);
    const failed = /ERROR: "batch\.c".*|FATAL.*/.exec(text);
    if (failed && this.#current) this.#fail(new RecognizerError(`pocketsphinx_batch: ${failed[0]}`));
  }

  #fail(err: Error): void {
    const current = this.#current;
    this.#current = undefined;
    current?.reject(err);
  }

  #died(err: Error): void {
    if (this.#exited) return;
    this.#exited = true;
    if (this.#killTimer) clearTimeout(this.#killTimer);
    const tail = this.#stderrTail.trim().split('\n').at(-1);
    this.#fail(tail && !this.#stopping ? new RecognizerError(`${err.message}: ${tail}`) : err);
    for (const fifo of this.#fifos) rmSync(fifo, { force: true });
    this.#onExit();
  }

  #readCpu(): void {
    if (this.#pid === undefined || this.#exited) return;
    try {
      // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
      const stat = readFileSync(`/proc/${this.#pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      this.#cpuSec = (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
    } catch {
      // gone, or no /proc: the last reading stands
    }
  }
}

/** Linux's USER_HZ, the unit of /proc/PID/stat times (100 on every Linux Node runs on). */
const CLOCK_TICKS = 100;
