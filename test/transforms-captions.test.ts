// toCaptions(): SRT and WebVTT checked strictly (numbering, timestamps, order, header, voice
// tags, line limits), cue breaks, reading speed, and live cues as soon as words are committed.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import fc from 'fast-check';
import type { JobV2Done } from '../src/protocol/jobs.ts';
import type { WordSegment } from '../src/protocol/records.ts';
import type { SpeakerWord } from '../src/transforms/align-speakers.ts';
import {
  type CaptionOptions,
  type CaptionWord,
  renderCaptions,
  toCaptions,
} from '../src/transforms/to-captions.ts';
import { collectBytes } from './helpers/collect.ts';

interface ParsedCue {
  start: number;
  end: number;
  lines: string[];
  voice?: string;
}

const TIME = String.raw`(\d{2,}):([0-5]\d):([0-5]\d)[.,](\d{3})`;
const toMs = (m: RegExpMatchArray, at: number) =>
  ((Number(m[at]) * 60 + Number(m[at + 1])) * 60 + Number(m[at + 2])) * 1000 + Number(m[at + 3]);

/** A strict SRT reader: throws on anything a player could misread. */
function parseSrt(text: string): ParsedCue[] {
  if (text === '') return [];
  assert.ok(text.endsWith('\n\n'), 'the last cue ends with a blank line');
  const blocks = text.slice(0, -2).split('\n\n');
  return blocks.map((block, i) => {
    const [index, timing, ...lines] = block.split('\n');
    assert.equal(index, String(i + 1), 'cues numbered from 1 without gaps');
    const m = timing!.match(new RegExp(`^${TIME.replace('[.,]', ',')} --> ${TIME.replace('[.,]', ',')}$`));
    assert.ok(m, `SRT timing line: ${JSON.stringify(timing)}`);
    assert.ok(lines.length > 0 && lines.every((l) => l.trim() !== ''), 'text lines, none blank');
    return { start: toMs(m, 1), end: toMs(m, 5), lines };
  });
}

/** A strict WebVTT reader for what we write. */
function parseVtt(text: string): ParsedCue[] {
  assert.ok(text.startsWith('WEBVTT\n\n'), 'WEBVTT header and a blank line');
  const body = text.slice('WEBVTT\n\n'.length);
  if (body === '') return [];
  assert.ok(body.endsWith('\n\n'));
  return body
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const [timing, ...lines] = block.split('\n');
      const m = timing!.match(
        new RegExp(`^${TIME.replace('[.,]', String.raw`\.`)} --> ${TIME.replace('[.,]', String.raw`\.`)}$`),
      );
      assert.ok(m, `VTT timing line: ${JSON.stringify(timing)}`);
      assert.ok(lines.length > 0 && lines.every((l) => l.trim() !== '' && !l.includes('-->')));
      let voice: string | undefined;
      const v = lines[0]!.match(/^<v ([^>]+)>/);
      if (v) {
        voice = v[1];
        lines[0] = lines[0]!.slice(v[0].length);
      }
      for (const l of lines) assert.ok(!/[<>]/.test(l) && !/&(?!amp;|lt;|gt;)/.test(l), `escaped text: ${l}`);
      const shown = lines.map((l) => l.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&'));
      return { start: toMs(m, 1), end: toMs(m, 5), lines: shown, voice };
    });
}

/** Timing rules every output must keep. */
function checkTiming(cues: ParsedCue[], options: Partial<CaptionOptions> = {}): void {
  const maxChars = options.maxCharsPerLine ?? 42;
  let prevEnd = 0;
  for (const c of cues) {
    assert.ok(c.end > c.start, 'each cue lasts');
    assert.ok(c.start >= prevEnd, 'in order, no overlap');
    assert.ok(c.lines.length <= (options.maxLines ?? 2), 'line count');
    for (const l of c.lines) assert.ok(l.length <= maxChars || !l.includes(' '), `line too long: ${l}`);
    prevEnd = c.end;
  }
}

const TEXT =
  'And so my fellow Americans, ask not what your country can do for you. Ask what you can do for your country! ' +
  'We choose to go to the Moon in this decade and do the other things, not because they are easy, but because they are hard?';

function speech(text = TEXT, speakerEvery = 0): SpeakerWord[] {
  let t = 0.5;
  return text.split(' ').map((word, i) => {
    const start = t;
    const end = t + 0.12 + 0.03 * word.length;
    t = end + (word.endsWith(',') ? 0.35 : 0.08);
    const speaker = speakerEvery > 0 ? `S${Math.floor(i / speakerEvery) % 2}` : null;
    return { word, start_time: +start.toFixed(3), end_time: +end.toFixed(3), speaker };
  });
}

/**
 * Any words in time order: each `word` text, after a gap of 0..3 s, lasting up to 0.9 s (at
 * least `minMs`), said by one of `speakers`.
 */
function timedWords(
  word: fc.Arbitrary<string>,
  speakers: readonly (string | null)[],
  { minLength = 0, maxLength = 80, minMs = 0 } = {},
): fc.Arbitrary<CaptionWord[]> {
  const one = fc.tuple(
    word,
    fc.integer({ min: 0, max: 3000 }),
    fc.integer({ min: minMs, max: 900 }),
    fc.constantFrom(...speakers),
  );
  return fc.array(one, { minLength, maxLength }).map((spec) => {
    let t = 0;
    return spec.map(([text, gap, len, speaker]) => {
      const start = (t + gap) / 1000;
      t += gap + len;
      return { word: text, start_time: start, end_time: t / 1000, speaker };
    });
  });
}

async function stream(inputs: unknown[], options: CaptionOptions): Promise<string> {
  return (await collectBytes(inputs, toCaptions(options))).toString();
}

test('SRT from word segments: valid, numbered, in order, within the line limits', () => {
  const srt = renderCaptions(speech(), { format: 'srt' });
  const cues = parseSrt(srt);
  checkTiming(cues);
  assert.ok(cues.length >= 4);
  const words = cues.flatMap((c) => c.lines.join(' ').split(' '));
  assert.deepEqual(words, TEXT.split(' '), 'every word once, in order');
});

test('cues break at sentence ends and speaker changes; VTT voices the speaker', () => {
  const cues = parseVtt(renderCaptions(speech(TEXT, 7), { format: 'vtt' }));
  checkTiming(cues);
  for (const c of cues) {
    const text = c.lines.join(' ');
    // No sentence end inside a cue: only at its end.
    assert.ok(!/[.!?]\s/.test(text), `sentence end inside: ${text}`);
    assert.match(c.voice ?? '', /^S[01]$/);
  }
  const srt = parseSrt(renderCaptions(speech(TEXT, 7), { format: 'srt' }));
  assert.match(srt[0]!.lines[0]!, /^S0: /, 'SRT names the speaker in front');
  const plain = parseVtt(renderCaptions(speech(TEXT, 7), { format: 'vtt', speakerLabels: false }));
  assert.ok(plain.every((c) => c.voice === undefined));
});

test('reading speed, minimum and maximum duration hold where the next cue leaves room', () => {
  // Fast speech: 12 chars per word in 0.2 s each, with pauses between sentences.
  const words: WordSegment[] = [];
  let t = 0;
  for (let i = 0; i < 60; i++) {
    words.push({ word: i % 6 === 5 ? 'abcdefghijk.' : 'abcdefghijkl', start_time: t, end_time: t + 0.2 });
    t += i % 6 === 5 ? 4 : 0.2;
  }
  const options = { format: 'srt', maxCharsPerSecond: 15, minDurationMs: 1200, maxDurationMs: 5000 } as const;
  const cues = parseSrt(renderCaptions(words, options));
  checkTiming(cues);
  for (const [i, c] of cues.entries()) {
    const chars = c.lines.join('').length;
    const next = cues[i + 1];
    assert.ok(c.end - c.start <= 5000, 'max duration');
    const roomy = !next || next.start - c.start >= 5000;
    if (roomy) {
      assert.ok(c.end - c.start >= 1200, 'min duration');
      assert.ok(
        chars / ((c.end - c.start) / 1000) <= 15 + 1e-9,
        `reading speed ${chars} chars in ${c.end - c.start} ms`,
      );
    }
  }
});

test('property: any words give valid SRT and VTT within the limits', () => {
  fc.assert(
    fc.property(
      timedWords(fc.stringMatching(/^[a-zA-Z<>&'.,!?-]{1,14}$/), ['A', 'B', null]),
      fc.integer({ min: 10, max: 50 }),
      fc.integer({ min: 1, max: 3 }),
      (words, maxCharsPerLine, maxLines) => {
        const options = { maxCharsPerLine, maxLines };
        checkTiming(
          parseSrt(renderCaptions(words, { format: 'srt', ...options, speakerLabels: false })),
          options,
        );
        const vtt = parseVtt(renderCaptions(words, { format: 'vtt', ...options }));
        checkTiming(vtt, options);
        assert.equal(
          vtt
            .flatMap((c) => c.lines)
            .join(' ')
            .split(' ')
            .filter(Boolean).length,
          words.length,
        );
      },
    ),
    { numRuns: 200 },
  );
});

test('SRT and VTT time and break the same words alike: the SRT speaker prefix takes no room from them', () => {
  fc.assert(
    fc.property(
      timedWords(fc.stringMatching(/^[a-zA-Z.,!?]{1,12}$/), ['SPEAKER_00', 'SPEAKER_01', null], {
        maxLength: 60,
        minMs: 50,
      }),
      fc.integer({ min: 12, max: 50 }),
      (words, maxCharsPerLine) => {
        const srt = parseSrt(renderCaptions(words, { format: 'srt', maxCharsPerLine }));
        const vtt = parseVtt(renderCaptions(words, { format: 'vtt', maxCharsPerLine }));
        assert.equal(srt.length, vtt.length);
        for (const [i, v] of vtt.entries()) {
          const s = srt[i]!;
          const label = v.voice === undefined ? '' : `${v.voice}: `;
          assert.ok(s.lines[0]!.startsWith(label), s.lines[0]);
          assert.deepEqual(
            { start: s.start, end: s.end, lines: [s.lines[0]!.slice(label.length), ...s.lines.slice(1)] },
            { start: v.start, end: v.end, lines: v.lines },
          );
        }
      },
    ),
    { numRuns: 200 },
  );
});

test('no cue ends after the audio does: a 0.3 s recording, and any words within the audio', () => {
  const short = [{ word: 'Hi.', start_time: 0.03, end_time: 0.25 }];
  assert.equal(
    renderCaptions(short, { format: 'vtt', audioDurationMs: 300 }),
    'WEBVTT\n\n00:00:00.030 --> 00:00:00.300\nHi.\n\n',
  );
  assert.equal(
    renderCaptions(short, { format: 'srt', audioDurationMs: 300 }),
    '1\n00:00:00,030 --> 00:00:00,300\nHi.\n\n',
  );
  fc.assert(
    fc.property(
      timedWords(fc.constantFrom('word', 'word', 'end.'), [null], { minLength: 1, maxLength: 40, minMs: 1 }),
      fc.integer({ min: 0, max: 5000 }),
      (words, tail) => {
        const audioDurationMs = Math.round(words.at(-1)!.end_time * 1000) + tail;
        for (const format of ['srt', 'vtt'] as const) {
          const text = renderCaptions(words, { format, audioDurationMs });
          const cues = format === 'srt' ? parseSrt(text) : parseVtt(text);
          checkTiming(cues);
          for (const c of cues)
            assert.ok(c.end <= audioDurationMs, `${c.end} ms after the audio's ${audioDurationMs} ms`);
        }
      },
    ),
    { numRuns: 200 },
  );
  assert.throws(() => renderCaptions(short, { format: 'vtt', audioDurationMs: -1 }), /audioDurationMs/);
});

test('a V2 done job: final words, speakers from its diarization segments', () => {
  const words = speech('Good morning everyone. Thanks for having me.');
  const job = {
    id: '5e1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f',
    status: 'done',
    final_word_segments: words.map(({ speaker: _s, ...w }) => w),
    asr_word_segments: [],
    diarization_segments: [
      { start_time: 0, end_time: 1.2, speaker: 'SPEAKER_00' },
      { start_time: 1.2, end_time: 10, speaker: 'SPEAKER_01' },
    ],
  } as unknown as JobV2Done;
  const cues = parseVtt(renderCaptions(job, { format: 'vtt' }));
  assert.deepEqual(
    cues.map((c) => [c.voice, c.lines.join(' ')]),
    [
      ['SPEAKER_00', 'Good morning'],
      ['SPEAKER_01', 'everyone.'],
      ['SPEAKER_01', 'Thanks for having me.'],
    ],
  );
});

test('live: a cue goes out as soon as its utterance is committed', async () => {
  const out: string[] = [];
  const captions = toCaptions({ format: 'vtt' });
  captions.on('data', (c: Buffer) => out.push(c.toString()));
  const words = speech();
  captions.write({ type: 'partial', id: 'x', text: 'And so', words: words.slice(0, 2) });
  captions.write({ type: 'utterance', id: 'x', index: 0, text: '', words: words.slice(0, 12) });
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(out.join('').startsWith('WEBVTT\n\n'));
  const first = parseVtt(out.join(''));
  assert.ok(first.length >= 1, 'cues before the end of the stream');
  captions.end({ type: 'utterance', id: 'x', index: 1, text: '', words: words.slice(12) });
  await new Promise((resolve) => captions.once('end', resolve));
  const all = parseVtt(out.join(''));
  checkTiming(all);
  assert.deepEqual(all.slice(0, first.length), first, 'cues already sent never change');
});

test('empty input: an empty SRT, a WebVTT header alone; bad input is refused', async () => {
  assert.equal(await stream([], { format: 'srt' }), '');
  assert.equal(await stream([], { format: 'vtt' }), 'WEBVTT\n\n');
  await assert.rejects(stream([42], { format: 'srt' }), /expected utterance events/);
  assert.throws(() => toCaptions({ format: 'ass' as 'srt' }), /format/);
});

test('a WebVTT stream gives its header before any input: a live file cut before its first cue is still WebVTT', () => {
  const captions = toCaptions({ format: 'vtt' });
  assert.equal(String(captions.read()), 'WEBVTT\n\n');
  captions.destroy();
  const srt = toCaptions({ format: 'srt' });
  assert.equal(srt.read(), null);
  srt.destroy();
});

test('a word without times, or not a word at all, is a typed error: never NaN:NaN:NaN in the file, nor a TypeError', async () => {
  const bad: unknown[] = [
    { word: 'hello' },
    { word: 'hello', start_time: 0, end_time: Number.POSITIVE_INFINITY },
    { start_time: 0, end_time: 1 },
    null,
  ];
  for (const word of bad) {
    const words = [{ word: 'fine', start_time: 0, end_time: 0.5 }, word];
    assert.throws(() => renderCaptions(words as WordSegment[], { format: 'srt' }), {
      code: 'ERR_INVALID_ARGUMENT',
    });
    for (const input of [words, { type: 'utterance', words }]) {
      await assert.rejects(stream([input], { format: 'vtt' }), { code: 'ERR_INVALID_ARGUMENT' });
    }
  }
});

test('ffmpeg reads both outputs as subtitles', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const format of ['srt', 'vtt'] as const) {
    const path = join(dir, `captions.${format}`);
    const text = renderCaptions(speech(TEXT, 9), { format });
    writeFileSync(path, text);
    const { stdout } = await promisify(execFile)('ffprobe', [
      '-v',
      'error',
      '-show_entries',
      'stream=codec_name',
      '-of',
      'csv=p=0',
      path,
    ]);
    assert.equal(stdout.trim(), format === 'srt' ? 'subrip' : 'webvtt');
    const { stdout: packets } = await promisify(execFile)('ffprobe', [
      '-v',
      'error',
      '-show_packets',
      '-of',
      'csv=p=0',
      path,
    ]);
    assert.equal(
      packets.trim().split('\n').length,
      format === 'srt' ? parseSrt(text).length : parseVtt(text).length,
    );
  }
});

test('live: hours of speech faster than the reading speed never leave cues behind the words', async () => {
  // 1800 utterances (about an hour): 8 words in 1.6 s (about 40 characters a second), 0.3 s apart.
  const utterances: SpeakerWord[][] = [];
  const startOf = new Map<string, number>();
  let t = 0.5;
  for (let u = 0; u < 1800; u++) {
    const words: SpeakerWord[] = [];
    for (let i = 0; i < 8; i++) {
      const word = `w${u}x${i}`;
      words.push({ word, start_time: +t.toFixed(3), end_time: +(t + 0.15).toFixed(3), speaker: null });
      startOf.set(word, Math.round(t * 1000));
      t += 0.2;
    }
    utterances.push(words);
    t += 0.3;
  }
  const events = utterances.map((words, index) => ({ type: 'utterance', id: 'x', index, text: '', words }));
  const cues = parseVtt(await stream(events, { format: 'vtt' }));
  checkTiming(cues);
  assert.equal(cues.flatMap((c) => c.lines.join(' ').split(' ')).length, 1800 * 8, 'every word once');
  let worst = 0;
  for (const c of cues) worst = Math.max(worst, c.start - startOf.get(c.lines[0]!.split(' ')[0]!)!);
  assert.ok(worst <= 1000, `a cue starts ${worst} ms after its first word`);
});

test('fractional duration options still give whole-millisecond timestamps', () => {
  const words = [{ word: 'hi', start_time: 0, end_time: 0.2 }];
  for (const format of ['srt', 'vtt'] as const) {
    const text = renderCaptions(words, { format, minDurationMs: 1000.5 });
    const stamp =
      format === 'srt'
        ? /^\d{2}:\d{2}:\d{2},\d{3} --> \d{2}:\d{2}:\d{2},\d{3}$/m
        : /^\d{2}:\d{2}:\d{2}\.\d{3} --> \d{2}:\d{2}:\d{2}\.\d{3}$/m;
    assert.match(text, stamp, text);
  }
});

test('white space inside a word (a blank line) cannot end a cue block early', () => {
  const words = [
    { word: 'x\n\ny', start_time: 0, end_time: 0.5 },
    { word: 'z\t', start_time: 0.5, end_time: 1 },
  ];
  assert.equal(renderCaptions(words, { format: 'srt' }), '1\n00:00:00,000 --> 00:00:01,000\nx y z\n\n');
  assert.doesNotMatch(renderCaptions(words, { format: 'vtt' }).slice('WEBVTT\n\n'.length), /\n\n./);
});

test('a speaker label or word with a blank line, a line break or "-->" cannot break a cue', () => {
  const hostile = ['A\n\nB', 'x --> y', 'C\r\n', 'D\u2028E'];
  const words: SpeakerWord[] = hostile.map((speaker, i) => ({
    start_time: i * 2,
    end_time: i * 2 + 0.5,
    word: i === 1 ? 'one\n\n2\n00:00:00,000 --> 00:00:01,000' : 'word',
    speaker,
  }));
  const srt = renderCaptions(words, { format: 'srt' });
  const vtt = renderCaptions(words, { format: 'vtt' });
  const srtCues = parseSrt(srt);
  const vttCues = parseVtt(vtt);
  assert.equal(srtCues.length, hostile.length, srt);
  assert.equal(vttCues.length, hostile.length, vtt);
  for (const c of [...srtCues, ...vttCues])
    for (const l of c.lines) assert.ok(l.trim() !== '', 'a blank line');
  // In the raw text, "-->" stands only in timing lines.
  for (const line of `${srt}${vtt}`.split('\n').filter((l) => l.includes('-->')))
    assert.match(line, /^\d{2}:\d{2}:\d{2}[.,]\d{3} --> \d{2}:\d{2}:\d{2}[.,]\d{3}$/);
});
