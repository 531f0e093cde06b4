// The speaker timeline picture: one lane a speaker, a bar per stretch a speaker held with its
// words on hover, a time axis; names and words escaped so no input can break the markup.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderSpeakerSvg } from '../src/transforms/speaker-svg.ts';

const word = (word: string, start: number, end: number, speaker: string | null) => ({
  word,
  start_time: start,
  end_time: end,
  speaker,
});

test('one lane a speaker, one bar per stretch, the words of a bar in its title', () => {
  const svg = renderSpeakerSvg(
    [
      word('hello', 0, 0.4, 'S1'),
      word('there', 0.5, 0.9, 'S1'),
      word('hi', 1.2, 1.5, 'S2'),
      word('again', 2, 2.4, 'S1'),
      word('later', 9, 9.5, 'S1'),
    ],
    { title: 'talk.wav' },
  );
  assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
  assert.ok(svg.trimEnd().endsWith('</svg>'));
  const bars = [...svg.matchAll(/<rect [^>]*><title>([^<]*)<\/title><\/rect>/g)].map((m) => m[1]);
  assert.deepEqual(
    bars.map((b) => b!.replace(/^.*?: /, '')),
    ['hello there', 'hi', 'again', 'later'],
    'a change of speaker or a long pause starts a new bar',
  );
  assert.match(svg, />S1<\/text>/);
  assert.match(svg, />S2<\/text>/);
  assert.match(svg, /2 speakers · 0:10/);
  // The bars of S2 are in the second lane (lower), S1's in the first.
  const y = (text: string) => Number(svg.match(new RegExp(`y="(\\d+)"[^>]*><title>[^<]*${text}`))![1]);
  assert.ok(y('hi') > y('hello there'));
  assert.equal(y('again'), y('hello there'));
});

test('names and words are escaped: markup in them stays text', () => {
  const svg = renderSpeakerSvg([word('<script>alert(1)</script>', 0, 1, '"><b>x</b>\u0007')], {
    title: 'a&b<c>.wav',
  });
  assert.ok(!svg.includes('<script>'));
  assert.ok(!svg.includes('<b>'));
  assert.ok(!svg.includes('\u0007'));
  assert.match(svg, /a&#38;b&#60;c&#62;\.wav/);
});

test('no words: an empty timeline, still a picture', () => {
  const svg = renderSpeakerSvg([]);
  assert.match(svg, /0 speakers/);
  assert.ok(svg.trimEnd().endsWith('</svg>'));
});

test('the time axis runs to the end of the recording, not of its last word', () => {
  const words = [word('hello', 0.5, 1, 'S1'), word('there', 16.2, 16.9, 'S1')];
  const ticks = (svg: string) =>
    [...svg.matchAll(/text-anchor="middle" fill="#555">([\d:]+)</g)].map((m) => m[1]);
  const svg = renderSpeakerSvg(words, { audioDurationSec: 19.18 });
  assert.match(svg, /1 speaker · 0:19/);
  assert.equal(ticks(svg).at(-1), '0:18', 'ticks every 2 s up to the end');
  // The last word's bar ends short of the axis' end, where the recording goes on.
  const axis = /<line x1="(\d+)" y1="(\d+)" x2="([\d.]+)"/.exec(svg)!;
  const bar = /<rect x="([\d.]+)" y="\d+" width="([\d.]+)"[^>]*><title>0:16/.exec(svg)!;
  assert.ok(
    Number(bar[1]) + Number(bar[2]) < Number(axis[3]) - 50,
    `bar ends ${Number(bar[1]) + Number(bar[2])}, axis ${axis[3]}`,
  );
  // Without the recording's length, the last word's end is all there is.
  assert.match(renderSpeakerSvg(words), /1 speaker · 0:17/);
});
