// A speaker timeline as an SVG picture: one lane a speaker, a bar for each stretch one speaker
// held, the words of a stretch shown on hover (the bar's <title>), a time axis. Static markup
// only (no script), every text escaped, so it is safe to open from any archive.

import type { SpeakerWord } from './align-speakers.ts';

/** Options of {@link renderSpeakerSvg}. */
export interface SpeakerSvgOptions {
  /** Title drawn at the top (the input's name). */
  title?: string;
  /** Drawing width in pixels. Default 1000. */
  width?: number;
  /** Words further apart than this start a new bar, even for one speaker. Default 1.5 s. */
  gapSec?: number;
  /** The recording's length in seconds, when known: the time axis runs to it (else to the last word). */
  audioDurationSec?: number;
}

const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
const LANE = 28;
const LABEL = 120;
const TOP = 44;

const xmlText = (text: string) =>
  text
    .replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
    .replace(
      // biome-ignore lint/suspicious/noControlCharactersInRegex: XML 1.0 forbids them
      /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g,
      '',
    );

function clock(seconds: number): string {
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

/** A tick step (seconds) giving about 10 ticks over `total`. */
function tickStep(total: number): number {
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
  return steps.find((s) => total / s <= 12) ?? 7200;
}

/** The SVG document of `words`' speaker timeline. */
export function renderSpeakerSvg(words: readonly SpeakerWord[], options: SpeakerSvgOptions = {}): string {
  const width = options.width ?? 1000;
  const gap = options.gapSec ?? 1.5;
  const speakers: string[] = [];
  for (const w of words) {
    const label = w.speaker ?? '(unlabelled)';
    if (!speakers.includes(label)) speakers.push(label);
  }
  let end = 0;
  for (const w of words) if (w.end_time > end) end = w.end_time;
  const duration = options.audioDurationSec;
  if (duration !== undefined && Number.isFinite(duration) && duration > end) end = duration;
  const total = Math.max(end, 1);
  const plot = width - LABEL - 20;
  const x = (t: number) => LABEL + (t / total) * plot;
  const height = TOP + Math.max(1, speakers.length) * LANE + 36;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<title>${xmlText(options.title ?? 'speaker timeline')}</title>`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="20" font-size="14" font-weight="600">${xmlText(options.title ?? 'speaker timeline')}</text>`,
    `<text x="${width - 10}" y="20" text-anchor="end" fill="#555">${speakers.length} speaker${speakers.length === 1 ? '' : 's'} · ${clock(end)}</text>`,
  ];
  // Lanes.
  speakers.forEach((speaker, i) => {
    const y = TOP + i * LANE;
    out.push(
      `<rect x="${LABEL}" y="${y}" width="${plot}" height="${LANE - 6}" fill="${i % 2 ? '#f4f4f4' : '#fafafa'}"/>`,
      `<text x="${LABEL - 8}" y="${y + LANE / 2}" text-anchor="end" fill="${PALETTE[i % PALETTE.length]}">${xmlText(speaker)}</text>`,
    );
  });
  // Bars: consecutive words of one speaker, no gap longer than `gap`.
  let bar: SpeakerWord[] = [];
  const flush = () => {
    if (bar.length === 0) return;
    const lane = speakers.indexOf(bar[0]!.speaker ?? '(unlabelled)');
    const start = bar[0]!.start_time;
    let stop = bar[0]!.end_time;
    for (const w of bar) if (w.end_time > stop) stop = w.end_time;
    const left = x(start);
    const w = Math.max(1, x(stop) - left);
    const text = bar.map((b) => b.word).join(' ');
    out.push(
      `<rect x="${left.toFixed(1)}" y="${TOP + lane * LANE + 2}" width="${w.toFixed(1)}" height="${LANE - 10}" rx="2" fill="${PALETTE[lane % PALETTE.length]}"><title>${xmlText(`${clock(start)}–${clock(stop)} ${bar[0]!.speaker ?? ''}: ${text}`)}</title></rect>`,
    );
    bar = [];
  };
  for (const w of words) {
    const last = bar.at(-1);
    if (last && (last.speaker !== w.speaker || w.start_time - last.end_time > gap)) flush();
    bar.push(w);
  }
  flush();
  // Time axis.
  const axis = TOP + speakers.length * LANE + 6;
  out.push(`<line x1="${LABEL}" y1="${axis}" x2="${LABEL + plot}" y2="${axis}" stroke="#999"/>`);
  const step = tickStep(total);
  for (let t = 0; t <= total + 1e-9; t += step) {
    out.push(
      `<line x1="${x(t).toFixed(1)}" y1="${axis}" x2="${x(t).toFixed(1)}" y2="${axis + 5}" stroke="#999"/>`,
      `<text x="${x(t).toFixed(1)}" y="${axis + 18}" text-anchor="middle" fill="#555">${clock(t)}</text>`,
    );
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
