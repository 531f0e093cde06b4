// How a bench report is shown: a table for a terminal, an HTML page with two pictures
// (latency over time, the latency distribution) drawn as inline SVG, and two reports side by
// side with their differences.

import type { BenchReport } from './run.ts';

const PERCENTILES = ['p50', 'p90', 'p99', 'p999', 'max'] as const;

/** A latency as read: ms, or s from 10 s; `-` where nothing was measured. */
const ms = (x: number | null) =>
  x === null ? '-' : x >= 10_000 ? `${(x / 1000).toFixed(1)} s` : `${Math.round(x)} ms`;

function loadText(r: BenchReport): string {
  return r.load.model === 'concurrency'
    ? `${r.load.concurrency} at once`
    : `${r.load.rate_per_second}/s arrivals`;
}

/** The report as a table for a terminal. */
export function formatReport(r: BenchReport): string {
  const lines: string[] = [];
  lines.push(
    `speechpipe bench: ${r.workload} over ${r.transport}, ${loadText(r)}, ${r.duration_sec} s (warm-up ${r.warmup_sec} s)${r.pace ? `, pace ${r.pace}x` : ''} against ${r.target}${r.interrupted ? ' (interrupted)' : ''}`,
  );
  lines.push(
    `operations: ${r.operations.completed} completed, ${r.operations.failed} failed, ${r.operations.cut} cut at the end`,
  );
  lines.push(
    `throughput: ${r.throughput.audio_seconds_per_second} audio s/s, ${r.throughput.requests_per_second} operations/s; real-time factor p50 ${r.real_time_factor.p50?.toFixed(3) ?? '-'}`,
  );
  lines.push('');
  const header = ['latency'.padEnd(24), ...PERCENTILES.map((p) => p.padStart(9)), 'count'.padStart(8)];
  lines.push(header.join(''));
  for (const [metric, s] of Object.entries(r.latency_ms))
    lines.push(
      [metric.padEnd(24), ...PERCENTILES.map((p) => ms(s[p]).padStart(9)), String(s.count).padStart(8)].join(
        '',
      ),
    );
  lines.push('');
  const errors = Object.entries(r.errors);
  lines.push(`errors: ${errors.length === 0 ? 'none' : errors.map(([c, n]) => `${c} ${n}`).join(', ')}`);
  lines.push(
    `429s: ${r.rate_limited.responses_429}, waiting on Retry-After ${ms(r.rate_limited.retry_after_wait_ms)}; client CPU ${r.client_cpu_seconds_per_audio_second} s per audio s`,
  );
  return `${lines.join('\n')}\n`;
}

const html = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/**
 * Where percentile `p` goes on a distribution's x axis: its "nines" (90 is 1, 99 is 2, 99.9 is
 * 3...), so the tail, which a linear axis squeezes into its last pixels, gets as much room as
 * the body; the maximum one nine past 99.99.
 */
const nines = (p: number) => (p >= 100 ? 5 : -Math.log10(1 - p / 100));
const NINES_TICKS: ReadonlyArray<[number, string]> = [
  [0, '0'],
  [50, '50'],
  [90, '90'],
  [99, '99'],
  [99.9, '99.9'],
  [99.99, '99.99'],
  [100, 'max'],
];

/**
 * A scatter of (x, y) points in an SVG, with axes; y on a log scale when it spans decades.
 * `percentiles`: x are percentiles, on a nines axis, joined by a line.
 */
function scatter(
  given: ReadonlyArray<[number, number]>,
  xLabel: string,
  yLabel: string,
  percentiles = false,
): string {
  const points = percentiles ? given.map(([p, v]) => [nines(p), v] as [number, number]) : given;
  const W = 720;
  const H = 300;
  const L = 64;
  const B = 36;
  if (points.length === 0) return `<svg width="${W}" height="60"><text x="10" y="30">no data</text></svg>`;
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => Math.max(1, p[1]));
  const xMax = Math.max(...xs, 1e-9);
  const xMin = Math.min(...xs, 0);
  const yMax = Math.max(...ys);
  const yMin = Math.min(...ys);
  const log = yMax / yMin > 50;
  const fy = (y: number) =>
    log
      ? (Math.log10(Math.max(1, y)) - Math.log10(yMin)) / Math.max(1e-9, Math.log10(yMax) - Math.log10(yMin))
      : y / yMax;
  const px = (x: number) => L + ((x - xMin) / Math.max(1e-9, xMax - xMin)) * (W - L - 10);
  const py = (y: number) => H - B - fy(Math.max(1, y)) * (H - B - 10);
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-size="11" font-family="system-ui, sans-serif">`,
    `<line x1="${L}" y1="${H - B}" x2="${W - 10}" y2="${H - B}" stroke="#888"/>`,
    `<line x1="${L}" y1="10" x2="${L}" y2="${H - B}" stroke="#888"/>`,
    `<text x="${(W + L) / 2}" y="${H - 6}" text-anchor="middle">${html(xLabel)}</text>`,
    `<text x="12" y="${H / 2}" transform="rotate(-90 12 ${H / 2})" text-anchor="middle">${html(yLabel)}${log ? ' (log)' : ''}</text>`,
  ];
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const y = log ? 10 ** (Math.log10(yMin) + f * (Math.log10(yMax) - Math.log10(yMin))) : f * yMax;
    out.push(
      `<text x="${L - 4}" y="${py(y) + 4}" text-anchor="end">${html(ms(y))}</text>`,
      `<line x1="${L}" y1="${py(y)}" x2="${W - 10}" y2="${py(y)}" stroke="#eee"/>`,
    );
    if (percentiles) continue;
    const x = xMin + f * (xMax - xMin);
    out.push(
      `<text x="${px(x)}" y="${H - B + 14}" text-anchor="${f === 1 ? 'end' : 'middle'}">${Math.round(x * 100) / 100}</text>`,
    );
  }
  if (percentiles)
    for (const [p, label] of NINES_TICKS)
      if (nines(p) <= xMax)
        out.push(
          `<text x="${px(nines(p)).toFixed(1)}" y="${H - B + 14}" text-anchor="${p >= 100 ? 'end' : 'middle'}">${label}</text>`,
          `<line x1="${px(nines(p)).toFixed(1)}" y1="10" x2="${px(nines(p)).toFixed(1)}" y2="${H - B}" stroke="#eee"/>`,
        );
  if (percentiles) {
    const d = points
      .map((p, i) => `${i === 0 ? 'M' : 'L'}${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`)
      .join('');
    out.push(`<path d="${d}" fill="none" stroke="#1f77b4" stroke-width="2"/>`);
    for (const [i, p] of points.entries()) {
      const pct = given[i]![0];
      out.push(
        `<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="3" fill="#1f77b4"><title>${pct >= 100 ? 'max' : `p${pct}`}: ${html(ms(p[1]))}</title></circle>`,
      );
    }
  } else
    for (const p of points)
      out.push(
        `<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="1.6" fill="#1f77b4" fill-opacity="0.6"/>`,
      );
  out.push('</svg>');
  return out.join('\n');
}

/**
 * The report as one standalone SVG picture: what was run, the headline figures, latency over
 * time and the latency distribution (no script, no external resource, every text escaped).
 */
export function renderSvg(r: BenchReport): string {
  const headline = Object.keys(r.latency_ms)[0] ?? 'latency';
  const s = r.latency_ms[headline];
  const lines = [
    `speechpipe bench: ${r.workload} over ${r.transport}, ${loadText(r)}, ${r.duration_sec} s${r.pace ? `, pace ${r.pace}x` : ''}${r.interrupted ? ' (interrupted)' : ''}`,
    `against ${r.target}, ${r.started_at}`,
    `${r.operations.completed} completed, ${r.operations.failed} failed, ${r.operations.cut} cut; ${r.throughput.audio_seconds_per_second} audio s/s, ${r.throughput.requests_per_second} operations/s`,
    s
      ? `${headline}: ${PERCENTILES.map((p) => `${p} ${ms(s[p])}`).join(', ')} (${s.count})`
      : 'no latency recorded',
  ];
  const W = 720;
  const top = lines.length * 18 + 14;
  const H = top + 2 * (24 + 300) + 10;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="system-ui, sans-serif">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    ...lines.map(
      (line, i) =>
        `<text x="10" y="${20 + i * 18}" font-size="${i === 0 ? 13 : 12}"${i === 0 ? ' font-weight="bold"' : ''}>${html(line)}</text>`,
    ),
    `<text x="10" y="${top + 16}" font-size="13">${html(`Latency (${headline}) over time`)}</text>`,
    `<g transform="translate(0 ${top + 24})">${scatter(r.series ?? [], 'seconds into the measured run', headline)}</g>`,
    `<text x="10" y="${top + 324 + 16}" font-size="13">${html(`Latency distribution (${headline})`)}</text>`,
    `<g transform="translate(0 ${top + 324 + 24})">${scatter(r.distribution ?? [], 'percentile', headline, true)}</g>`,
    '</svg>',
  ];
  return `${out.join('\n')}\n`;
}

/** The report as a standalone HTML page (no script, no external resource). */
export function renderHtml(r: BenchReport): string {
  const headline = Object.keys(r.latency_ms)[0] ?? 'latency';
  const rows = Object.entries(r.latency_ms)
    .map(
      ([metric, s]) =>
        `<tr><th>${html(metric)}</th>${PERCENTILES.map((p) => `<td>${html(ms(s[p]))}</td>`).join('')}<td>${s.count}</td></tr>`,
    )
    .join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>speechpipe bench: ${html(r.workload)} over ${html(r.transport)}</title>
<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:800px}table{border-collapse:collapse}td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}th:first-child{text-align:left}</style>
</head><body>
<h1>${html(r.workload)} over ${html(r.transport)}</h1>
<pre>${html(formatReport(r))}</pre>
<h2>Latency (${html(headline)}) over time</h2>
${scatter(r.series ?? [], 'seconds into the measured run', headline)}
<h2>Latency distribution (${html(headline)})</h2>
${scatter(r.distribution ?? [], 'percentile', headline, true)}
<h2>All latencies</h2>
<table><tr><th>metric</th>${PERCENTILES.map((p) => `<th>${p}</th>`).join('')}<th>count</th></tr>
${rows}
</table>
</body></html>
`;
}

/**
 * B's change against A in percent, to one decimal; `-` when either was not measured. Rounded
 * before its sign is chosen: a change that rounds to nothing is 0.0%, never -0.0% or +0.0%.
 */
export function percentChange(a: number | null, b: number | null): string {
  if (a === null || b === null) return '-';
  if (a === 0) return b === 0 ? '0.0%' : 'new';
  const tenths = Math.round(((b - a) / a) * 1000);
  if (tenths === 0) return '0.0%';
  return `${tenths > 0 ? '+' : '-'}${(Math.abs(tenths) / 10).toFixed(1)}%`;
}

/** Two reports side by side: each figure of A, of B, and B's change against A. */
export function compareReports(a: BenchReport, b: BenchReport): string {
  const rows: Array<[string, number | null, number | null, string]> = [];
  const add = (name: string, x: number | null, y: number | null, unit = '') => rows.push([name, x, y, unit]);
  add('throughput audio s/s', a.throughput.audio_seconds_per_second, b.throughput.audio_seconds_per_second);
  add('throughput operations/s', a.throughput.requests_per_second, b.throughput.requests_per_second);
  for (const metric of new Set([...Object.keys(a.latency_ms), ...Object.keys(b.latency_ms)]))
    for (const p of PERCENTILES)
      add(`${metric} ${p}`, a.latency_ms[metric]?.[p] ?? null, b.latency_ms[metric]?.[p] ?? null, 'ms');
  add('failed operations', a.operations.failed, b.operations.failed);
  add('429s', a.rate_limited.responses_429, b.rate_limited.responses_429);
  add(
    'client CPU s per audio s',
    a.client_cpu_seconds_per_audio_second,
    b.client_cpu_seconds_per_audio_second,
  );
  const width = Math.max(...rows.map((r) => r[0].length)) + 2;
  const lines = [
    `A: ${a.workload} over ${a.transport}, ${loadText(a)}, ${a.started_at}`,
    `B: ${b.workload} over ${b.transport}, ${loadText(b)}, ${b.started_at}`,
    '',
    `${''.padEnd(width)}${'A'.padStart(12)}${'B'.padStart(12)}${'B vs A'.padStart(10)}`,
  ];
  for (const [name, x, y, unit] of rows) {
    const f = (v: number | null) => (unit === 'ms' ? ms(v) : String(v ?? '-'));
    lines.push(
      `${name.padEnd(width)}${f(x).padStart(12)}${f(y).padStart(12)}${percentChange(x, y).padStart(10)}`,
    );
  }
  return `${lines.join('\n')}\n`;
}
