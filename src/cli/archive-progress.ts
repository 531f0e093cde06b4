// How `transcribe` shows a run: on a terminal a live display (log-update redraws it: files done,
// failed and total, audio hours done and total, speed as a multiple of real time, the ETA from
// audio seconds, the files in flight); otherwise a line per finished file; or the run's events
// as NDJSON for other programs. Names from the file system are printed with control characters
// escaped, never sent to the terminal.

import type { Writable } from 'node:stream';
import { createLogUpdate } from 'log-update';
import { isAlreadyDone } from '../archive/events.ts';
import type { ArchiveEvent, ArchiveSummary } from '../archive/index.ts';

export type ProgressMode = 'tty' | 'plain' | 'json';

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it escapes
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

/** Control characters (terminal escapes among them) shown as \xNN. */
export function printable(text: string): string {
  return text.replace(CONTROL, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/** An event as one JSON object: the file's path and name, never its results. */
export function eventJson(event: ArchiveEvent | ArchiveSummary): Record<string, unknown> {
  if (!('file' in event)) return { ...event };
  const { file, ...rest } = event as ArchiveEvent & { file: { path: string; relative: string } };
  const out: Record<string, unknown> = { type: rest.type, input: file.path, relative: file.relative };
  for (const [key, value] of Object.entries(rest)) {
    if (key === 'type') continue;
    if (key === 'result') {
      const result = value as { words: unknown[]; audioSeconds?: number };
      out.words = result.words.length;
      if (result.audioSeconds !== undefined) out.audioSeconds = result.audioSeconds;
      continue;
    }
    out[key] = value;
  }
  return out;
}

const hours = (seconds: number) => (seconds / 3600).toFixed(seconds < 36 ? 3 : 2);

function duration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** A run's inputs by how they ended so far (a summary has them all). */
export type RunCounts = Pick<ArchiveSummary, 'total' | 'done' | 'failed' | 'skipped' | 'alreadyDone'>;

/**
 * The counts in words: done, failed and skipped, already done when there are any, and with
 * `left`, the inputs found that none of those took.
 */
export function countsText(counts: RunCounts, { left = false } = {}): string {
  const { total, done, failed, skipped, alreadyDone } = counts;
  const parts = [`${done} done`, `${failed} failed`, `${skipped} skipped`];
  if (alreadyDone > 0) parts.push(`${alreadyDone} already done`);
  if (left) parts.push(`${Math.max(0, total - done - failed - skipped - alreadyDone)} left`);
  return parts.join(', ');
}

export class ArchiveProgress {
  readonly #mode: ProgressMode;
  readonly #out: Writable;
  readonly #update: ReturnType<typeof createLogUpdate> | undefined;
  readonly #began = performance.now();
  readonly #inFlight = new Map<string, { relative: string; since: number; audioSeconds: number }>();
  #total = 0;
  #done = 0;
  #failed = 0;
  #skipped = 0;
  #alreadyDone = 0;
  #audioDone = 0;
  #audioTotal = 0;
  #probed = 0;
  #paused: string | undefined;
  /** The reason code of the last pause (kept for its `resumed` line). */
  #pausedCode: string | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(mode: ProgressMode, out: Writable & { isTTY?: boolean }) {
    this.#mode = mode;
    this.#out = out;
    if (mode === 'tty') {
      this.#update = createLogUpdate(out as NodeJS.WriteStream, { showCursor: true });
      this.#timer = setInterval(() => this.#render(), 250);
      this.#timer.unref();
    }
  }

  /** A line of its own (above the live display on a terminal). */
  log(line: string): void {
    if (this.#mode === 'json') {
      this.#out.write(`${JSON.stringify({ type: 'log', message: line })}\n`);
      return;
    }
    this.#update?.clear();
    this.#out.write(`${printable(line)}\n`);
    this.#render();
  }

  event(event: ArchiveEvent | ArchiveSummary): void {
    this.#count(event);
    if (this.#mode === 'json') {
      this.#out.write(`${JSON.stringify(eventJson(event))}\n`);
      return;
    }
    const line = this.#line(event);
    if (line !== undefined) this.log(line);
  }

  /** The inputs counted so far, by how they ended. */
  counts(): RunCounts {
    return {
      total: this.#total,
      done: this.#done,
      failed: this.#failed,
      skipped: this.#skipped,
      alreadyDone: this.#alreadyDone,
    };
  }

  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    if (this.#update) {
      this.#render();
      this.#update.done();
    }
  }

  #count(event: ArchiveEvent | ArchiveSummary): void {
    switch (event.type) {
      case 'queued':
        this.#total++;
        break;
      case 'probed':
        this.#audioTotal += event.durationSec;
        this.#probed++;
        break;
      case 'started':
        this.#inFlight.set(event.file.path, {
          relative: event.file.relative,
          since: performance.now(),
          audioSeconds: 0,
        });
        break;
      case 'progress': {
        const f = this.#inFlight.get(event.file.path);
        if (f) f.audioSeconds = event.audioSeconds;
        break;
      }
      case 'done':
        this.#done++;
        this.#audioDone += event.audioSeconds ?? 0;
        this.#inFlight.delete(event.file.path);
        break;
      case 'failed':
        this.#failed++;
        this.#inFlight.delete(event.file.path);
        break;
      case 'skipped':
        if (isAlreadyDone(event.reason)) this.#alreadyDone++;
        else this.#skipped++;
        break;
      case 'paused':
        this.#paused = event.reason.message;
        this.#pausedCode = event.reason.code;
        break;
      case 'resumed':
        this.#paused = undefined;
        break;
    }
  }

  #line(event: ArchiveEvent | ArchiveSummary): string | undefined {
    switch (event.type) {
      case 'done': {
        const warnings = (event.warnings ?? []).map(
          (w) => `warning ${event.file.relative}: ${w.code}: ${w.message}\n`,
        );
        const audio = event.audioSeconds === undefined ? '' : `${event.audioSeconds.toFixed(1)} s of audio, `;
        const took = `took ${(event.elapsedMs / 1000).toFixed(1)} s`;
        return `${warnings.join('')}done    ${event.file.relative} (${event.words} words, ${audio}${took})`;
      }
      case 'failed':
        return `failed  ${event.file.relative}: ${event.error.code}: ${event.error.message}`;
      case 'skipped':
        // Done in an earlier run: counted, not listed (a resumed run of 100,000 files).
        if (isAlreadyDone(event.reason)) return undefined;
        return `skipped ${event.file.relative}: ${event.reason.code}: ${event.reason.message}`;
      case 'paused':
        return event.reason.code === 'NO_WORKER'
          ? `waiting: ${event.reason.message}`
          : `paused: the service does not answer (${event.reason.message}); waiting for it`;
      case 'resumed':
        return this.#pausedCode === 'NO_WORKER'
          ? `resumed: a worker serves the queue (after ${duration(event.pausedMs / 1000)})`
          : `resumed: the service answers again (after ${duration(event.pausedMs / 1000)})`;
      case 'summary':
        return event.removedTemporary > 0
          ? `removed ${event.removedTemporary} temporary file(s) a stopped run left`
          : undefined;
      default:
        return undefined;
    }
  }

  #render(): void {
    if (!this.#update) return;
    const elapsed = (performance.now() - this.#began) / 1000;
    let inFlightAudio = 0;
    for (const f of this.#inFlight.values()) inFlightAudio += f.audioSeconds;
    const audio = this.#audioDone + inFlightAudio;
    const speed = elapsed > 0 ? audio / elapsed : 0;
    const left = Math.max(0, this.#audioTotal - audio);
    const eta = speed > 0 && this.#probed > 0 ? duration(left / speed) : '?';
    const ended = this.#done + this.#failed + this.#skipped + this.#alreadyDone;
    const alreadyDone = this.#alreadyDone > 0 ? ` · ${this.#alreadyDone} already done` : '';
    const lines = [
      `${ended}/${this.#total} files · ${this.#done} done · ${this.#failed} failed · ${this.#skipped} skipped${alreadyDone}`,
      `audio ${hours(audio)}/${hours(this.#audioTotal)} h · ${speed.toFixed(1)}× real time · ETA ${eta} · ${duration(elapsed)} elapsed`,
    ];
    if (this.#paused)
      lines.push(
        this.#pausedCode === 'NO_WORKER'
          ? `waiting: ${printable(this.#paused)}`
          : `paused: waiting for the service (${printable(this.#paused)})`,
      );
    const now = performance.now();
    for (const f of [...this.#inFlight.values()].slice(0, 8))
      lines.push(`  ▸ ${printable(f.relative)} ${duration((now - f.since) / 1000)}`);
    if (this.#inFlight.size > 8) lines.push(`  … ${this.#inFlight.size - 8} more`);
    this.#update(lines.join('\n'));
  }
}
