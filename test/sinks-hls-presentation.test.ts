// HlsPresentation, the pure core of the HLS output, on a virtual clock: the delay line (a segment
// goes out `delaySec` after it was recorded, not before), the sliding window and the files that
// leave it, WebVTT segments timed on the media's clock (X-TIMESTAMP-MAP), every cue in a segment
// however late it comes, and the end. Playlists are read by m3u8-parser.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  HlsPresentation,
  type HlsPresentationOptions,
  type Publication,
} from '../src/sinks/hls-presentation.ts';
import { MPEG_CLOCK } from '../src/sinks/ts-segmenter.ts';
import type { Cue } from '../src/transforms/to-captions.ts';
import { parsePlaylist } from './helpers/hls.ts';

const AUDIO_START = 126_000;
const cue = (text: string, startMs: number, endMs: number): Cue => ({
  startMs,
  endMs,
  lines: [text],
  speaker: null,
});

/** A presentation fed 2 s segments recorded in real time from wall time 1000 ms. */
function live(options: Partial<HlsPresentationOptions> = {}) {
  const p = new HlsPresentation(
    { delaySec: 3, windowSegments: 3, targetDurationSec: 2, language: 'en', ...options },
    'abcd1234',
  );
  p.audioStart(AUDIO_START);
  p.segmentStarted(AUDIO_START, 1000);
  let completed = 0;
  const files = new Map<string, string>();
  const removed: string[] = [];
  const apply = (publication: Publication | undefined) => {
    for (const f of publication?.write ?? []) files.set(f.name, f.text);
    for (const name of publication?.remove ?? []) {
      files.delete(name);
      removed.push(name);
    }
    return publication;
  };
  return {
    p,
    files,
    removed,
    apply,
    /** Segment n (2 s) completes at its end on the wall clock. */
    complete(n = 1) {
      for (let i = 0; i < n; i++, completed++) {
        const startPts = AUDIO_START + completed * 2 * MPEG_CLOCK;
        p.segmentCompleted(
          { uri: `abcd1234-${completed}.ts`, startPts, endPts: startPts + 2 * MPEG_CLOCK, bytes: 50_000 },
          1000 + (completed + 1) * 2000,
        );
      }
    },
    publish: (nowMs: number) => apply(p.publish(nowMs)),
    vtt: (n: number) => files.get(`abcd1234-${n}.vtt`),
  };
}

/** The cues of a WebVTT segment: [start, end, text] with times in ms. */
function cuesOf(vtt: string): [number, number, string][] {
  const ms = (t: string) => {
    const [h, m, s] = t.split(':');
    return Math.round((Number(h) * 3600 + Number(m) * 60 + Number(s)) * 1000);
  };
  return [...vtt.matchAll(/^(\d\d:\d\d:\d\d\.\d{3}) --> (\d\d:\d\d:\d\d\.\d{3})\n([^\n]+)/gm)].map((m) => [
    ms(m[1]!),
    ms(m[2]!),
    m[3]!,
  ]);
}

test('a segment goes out delaySec after it was recorded, with its WebVTT segment and the playlists', () => {
  const { p, files, complete, publish } = live();
  complete();
  assert.equal(publish(3000), undefined, 'not at once');
  assert.equal(p.nextDueMs(), 6000, 'its end (3000) plus the delay');
  assert.equal(publish(5999), undefined);
  const out = publish(6000)!;
  assert.deepEqual(
    out.write.map((f) => f.name),
    ['abcd1234-0.vtt', 'subtitles.m3u8', 'media.m3u8', 'master.m3u8'],
    'the segment before the playlists that list it',
  );
  assert.equal(out.published, 1);
  const media = parsePlaylist(files.get('media.m3u8')!);
  assert.deepEqual(
    media.segments.map((s) => [s.uri, s.duration]),
    [['abcd1234-0.ts', 2]],
  );
  assert.equal(media.targetDuration, 2);
  assert.equal(media.mediaSequence, 0);
  assert.equal(media.endList, undefined);
  // The wall clock of the segment's start, for players that show it (and latency measures).
  assert.equal(media.segments[0]!.programDateTime, 1000);
  const subtitles = parsePlaylist(files.get('subtitles.m3u8')!);
  assert.deepEqual(
    subtitles.segments.map((s) => [s.uri, s.duration]),
    [['abcd1234-0.vtt', 2]],
  );
  const master = parsePlaylist(files.get('master.m3u8')!);
  assert.equal(master.playlists![0]!.uri, 'media.m3u8');
  assert.equal(master.playlists![0]!.attributes.SUBTITLES, 'captions');
  assert.ok((master.playlists![0]!.attributes.BANDWIDTH as number) >= 200_000, '50 kB in 2 s, with room');
  const rendition = master.mediaGroups!.SUBTITLES.captions!.Captions!;
  assert.deepEqual(
    { uri: rendition.uri, language: rendition.language, default: rendition.default },
    { uri: 'subtitles.m3u8', language: 'en', default: true },
  );
  // Written once: a player reads the master playlist once.
  complete();
  assert.ok(!publish(20_000)!.write.some((f) => f.name === 'master.m3u8'));
});

test('the window slides: at most windowSegments listed, files removed a window after they left', () => {
  const { p, files, removed, complete, publish } = live();
  const listed = new Set<string>();
  for (let n = 0; n < 12; n++) {
    complete();
    publish(p.nextDueMs()!);
    const media = parsePlaylist(files.get('media.m3u8')!);
    const subtitles = parsePlaylist(files.get('subtitles.m3u8')!);
    assert.ok(media.segments.length <= 3);
    assert.equal(media.mediaSequence, Math.max(0, n - 2));
    assert.equal(subtitles.mediaSequence, media.mediaSequence, 'the renditions in step');
    for (const s of media.segments) listed.add(s.uri);
    // Nothing listed now or a window ago is removed.
    for (const name of removed) {
      const k = Number(/-(\d+)\./.exec(name)![1]);
      assert.ok(k <= n - 6, `segment ${k} removed at ${n}`);
    }
  }
  assert.equal(listed.size, 12);
  // Six kept (three listed, three a window behind): the rest are gone, media and captions alike.
  assert.equal(removed.length, 12);
  assert.deepEqual([...p.files()].length, 12);
});

test('WebVTT segments: timed on the media clock, a cue in every segment it overlaps', () => {
  const { p, complete, publish, vtt } = live();
  p.addCues([cue('First.', 1000, 1900), cue('Across.', 3500, 4500)]);
  complete(3);
  publish(100_000);
  assert.match(vtt(0)!, /^WEBVTT\nX-TIMESTAMP-MAP=MPEGTS:126000,LOCAL:00:00:00\.000\n\n/);
  assert.deepEqual(cuesOf(vtt(0)!), [[1000, 1900, 'First.']]);
  assert.deepEqual(cuesOf(vtt(1)!), [[3500, 4500, 'Across.']]);
  assert.deepEqual(
    cuesOf(vtt(2)!),
    [[3500, 4500, 'Across.']],
    'repeated where it goes on (players merge it)',
  );
});

test('a cue too late for its segment goes into the next one out, from its start', () => {
  const { p, complete, publish, vtt } = live();
  complete();
  publish(p.nextDueMs()!);
  // The speech was at 1.0-1.9 s, in segment 0, already out.
  p.addCues([cue('Late.', 1000, 1900)]);
  complete();
  publish(p.nextDueMs()!);
  assert.deepEqual(cuesOf(vtt(0)!), []);
  assert.deepEqual(cuesOf(vtt(1)!), [[2000, 2900, 'Late.']], 'shown from segment 1, for as long');
});

test('the end: the last segment waits for the captions, takes every cue left, and the playlists end', () => {
  const { p, files, complete, publish, vtt } = live();
  complete(2);
  p.mediaEnded();
  assert.equal(publish(100_000)?.published, 1, 'all but the last');
  assert.equal(p.nextDueMs(), undefined, 'the last one waits for the captions');
  assert.equal(publish(200_000), undefined);
  // Words of the media's last moments, and a cue the service placed past its end.
  p.addCues([cue('Last words.', 3000, 3800), cue('After the end.', 4500, 5000)]);
  p.captionsEnded();
  assert.equal(p.nextDueMs(), 0);
  const out = publish(200_001)!;
  assert.equal(out.published, 1);
  assert.deepEqual(cuesOf(vtt(1)!), [
    [3000, 3800, 'Last words.'],
    [3999, 4499, 'After the end.'],
  ]);
  assert.equal(parsePlaylist(files.get('media.m3u8')!).endList, true);
  assert.equal(parsePlaylist(files.get('subtitles.m3u8')!).endList, true);
  assert.equal(p.ended, true);
  assert.equal(publish(300_000), undefined);
});

test('an input faster than real time goes out at its own pace, a delay after each segment', () => {
  const p = new HlsPresentation({ delaySec: 1, windowSegments: 3, targetDurationSec: 2 }, 'abcd1234');
  p.segmentStarted(0, 1000);
  // Five segments of 2 s, all complete within 100 ms.
  for (let i = 0; i < 5; i++)
    p.segmentCompleted(
      { uri: `abcd1234-${i}.ts`, startPts: i * 2 * MPEG_CLOCK, endPts: (i + 1) * 2 * MPEG_CLOCK, bytes: 1 },
      1000 + i * 20,
    );
  const dues: number[] = [];
  for (let due = p.nextDueMs(); due !== undefined; due = p.nextDueMs()) {
    dues.push(due);
    p.publish(due);
  }
  assert.deepEqual(dues, [4000, 6000, 8000, 10_000, 12_000]);
});

test('every cue lands in a published segment, whenever it comes', () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.record({
          startMs: fc.integer({ min: 0, max: 19_000 }),
          lengthMs: fc.integer({ min: 1, max: 5000 }),
          // How many segments have completed (and gone out) when the cue comes.
          arrivesAfter: fc.integer({ min: 0, max: 10 }),
        }),
        { maxLength: 30 },
      ),
      (cues) => {
        const { p, files, complete, publish } = live({ windowSegments: 20 });
        const texts = new Set<string>();
        for (let n = 0; n <= 10; n++) {
          cues.forEach((c, i) => {
            if (c.arrivesAfter === n) p.addCues([cue(`cue${i}`, c.startMs, c.startMs + c.lengthMs)]);
          });
          if (n === 10) break;
          complete();
          // The media's end is known with its last segment.
          if (n === 9) p.mediaEnded();
          const due = p.nextDueMs();
          if (due !== undefined) publish(due);
        }
        p.captionsEnded();
        publish(1e9);
        for (const [name, text] of files)
          if (name.endsWith('.vtt')) for (const c of cuesOf(text)) texts.add(c[2]);
        assert.equal(texts.size, cues.length);
        // A cue that came in time keeps its own times.
        cues.forEach((c, i) => {
          if (c.arrivesAfter !== 0) return;
          const found = [...files.values()].some((text) =>
            cuesOf(text).some(
              ([s, e, t]) => t === `cue${i}` && s === c.startMs && e === c.startMs + c.lengthMs,
            ),
          );
          assert.ok(found || c.startMs >= 20_000, `cue${i} at its own time`);
        });
      },
    ),
    { numRuns: 200 },
  );
});

test('bad options are typed errors', () => {
  const make = (o: Partial<HlsPresentationOptions>) => () =>
    new HlsPresentation({ delaySec: 3, windowSegments: 3, targetDurationSec: 2, ...o }, 'abcd1234');
  assert.throws(make({ delaySec: -1 }), { code: 'ERR_INVALID_ARGUMENT' });
  assert.throws(make({ delaySec: Number.NaN }), { code: 'ERR_INVALID_ARGUMENT' });
  assert.throws(make({ windowSegments: 1 }), { code: 'ERR_INVALID_ARGUMENT' });
  assert.throws(make({ targetDurationSec: 0 }), { code: 'ERR_INVALID_ARGUMENT' });
});

test('the target duration is the same in every playlist, a longer segment than any before included; independent segments are claimed for audio alone', () => {
  for (const video of [false, true]) {
    const { p, files, apply } = live({ targetDurationSec: 1.5 });
    p.streams(video);
    // 1.5 s, then 2.4 s (the segmenter's ceiling for a target of 2 is 2.5 s), then 2 s.
    let start = AUDIO_START;
    const seen: number[] = [];
    for (const [i, sec] of [1.5, 2.4, 2].entries()) {
      const end = start + sec * MPEG_CLOCK;
      p.segmentCompleted(
        { uri: `abcd1234-${i}.ts`, startPts: start, endPts: end, bytes: 40_000 },
        1000 + i * 3000,
      );
      start = end;
      apply(p.publish(100_000 + i * 10_000));
      for (const name of ['media.m3u8', 'subtitles.m3u8'])
        seen.push(parsePlaylist(files.get(name)!).targetDuration!);
    }
    assert.deepEqual(seen, [2, 2, 2, 2, 2, 2]);
    const durations = parsePlaylist(files.get('media.m3u8')!).segments!.map((s) => Math.round(s.duration));
    assert.ok(
      durations.every((d) => d <= 2),
      JSON.stringify(durations),
    );
    assert.equal(
      files.get('master.m3u8')!.includes('#EXT-X-INDEPENDENT-SEGMENTS'),
      !video,
      `video: ${video}`,
    );
  }
});

test('the master playlist names the codecs when the segmenter could, and lists no CODECS when not', () => {
  for (const codecs of ['avc1.64001f,mp4a.40.2', undefined]) {
    const { p, files, complete, publish } = live();
    p.streams(true);
    p.codecs(codecs);
    complete();
    publish(100_000);
    const master = parsePlaylist(files.get('master.m3u8')!);
    assert.equal(master.playlists![0]!.attributes.CODECS, codecs);
  }
});
