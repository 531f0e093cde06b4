// TsSegmenter: MPEG-TS made by ffmpeg (lavfi video and audio) cut into HLS segments by the pure
// core: each segment starts with PAT, PMT and a keyframe (or an audio packet without video), at
// the keyframes ffprobe finds, lasts at least the target, loses no byte of media, and reads as a
// stream by itself; any split of the input into chunks gives the same segments; a PTS that wraps
// (every 26.5 hours) keeps counting up.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import fc from 'fast-check';
import { MPEG_CLOCK, type SegmenterEvent, TsSegmenter, targetDurationOf } from '../src/sinks/ts-segmenter.ts';
import { transportStreamOf } from './helpers/ffmpeg.ts';

const run = promisify(execFile);

/** 5 s of MPEG-TS: H.264 with a keyframe every second (or none: audio only), AAC, as ffmpeg muxes it. */
const transportStream = (options: { video?: boolean; offsetSec?: number } = {}) =>
  transportStreamOf({
    seconds: 5,
    video: options.video !== false,
    args: [
      ...(options.video === false
        ? []
        : ['-c:v', 'libx264', '-preset', 'ultrafast', '-g', '25', '-pix_fmt', 'yuv420p']),
      '-c:a',
      'aac',
      ...(options.offsetSec ? ['-output_ts_offset', String(options.offsetSec)] : []),
    ],
  });

/** `seconds` of lavfi's test pattern and tone, encoded with `args`, as MPEG-TS. */
const encoded = (seconds: number, args: string[]) => transportStreamOf({ seconds, args });

/** H.264 with a keyframe every `gop` frames (25 a second) and `bframes` B-frames, and AAC. */
const gops = (seconds: number, gop: number, bframes: number) =>
  encoded(seconds, [
    ...['-c:v', 'libx264', '-preset', 'veryfast', '-bf', String(bframes), '-g', String(gop)],
    ...['-sc_threshold', '0', '-pix_fmt', 'yuv420p', '-c:a', 'aac'],
  ]);

const withVideo = transportStream();
const audioOnly = transportStream({ video: false });

interface Segment {
  startPts: number;
  endPts: number;
  bytes: Buffer;
}

function segmentsOf(events: SegmenterEvent[]): { segments: Segment[]; events: SegmenterEvent[] } {
  const segments: Segment[] = [];
  let open: { startPts: number; parts: Buffer[] } | undefined;
  for (const event of events) {
    if (event.type === 'segment-start') open = { startPts: event.pts, parts: [] };
    else if (event.type === 'data') open!.parts.push(event.bytes);
    else if (event.type === 'segment-end') {
      segments.push({ startPts: open!.startPts, endPts: event.pts, bytes: Buffer.concat(open!.parts) });
      open = undefined;
    }
  }
  assert.equal(open, undefined, 'every segment ended');
  return { segments, events };
}

function cut(ts: Buffer, chunks: number[] = [ts.length], targetDurationSec = 2) {
  const segmenter = new TsSegmenter({ targetDurationSec });
  const events: SegmenterEvent[] = [];
  let offset = 0;
  for (const size of chunks) {
    events.push(...segmenter.push(ts.subarray(offset, offset + size)));
    offset += size;
  }
  if (offset < ts.length) events.push(...segmenter.push(ts.subarray(offset)));
  events.push(...segmenter.end());
  return segmentsOf(events);
}

const pid = (packet: Buffer) => ((packet[1]! & 0x1f) << 8) | packet[2]!;

/** ffprobe's view of a TS: its keyframes' PTS (video) and its streams. */
async function probe(ts: Buffer): Promise<{ keyframes: number[]; streams: string[]; firstAudioPts: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-ts-'));
  try {
    const file = join(dir, 'in.ts');
    await writeFile(file, ts);
    const { stdout } = await run('ffprobe', [
      '-v',
      'error',
      '-show_entries',
      'packet=stream_index,pts,flags:stream=codec_name',
      '-of',
      'json',
      file,
    ]);
    const info = JSON.parse(stdout) as {
      packets: { stream_index: number; pts: number; flags: string }[];
      streams: { codec_name: string }[];
    };
    const streams = info.streams.map((s) => s.codec_name);
    const video = streams.indexOf('h264');
    const audio = streams.indexOf('aac');
    return {
      streams,
      keyframes: info.packets
        .filter((p) => p.stream_index === video && p.flags.startsWith('K'))
        .map((p) => p.pts),
      firstAudioPts: info.packets.find((p) => p.stream_index === audio)!.pts,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test('segments start at keyframes with PAT and PMT, last the target at least, and lose no media', async () => {
  const ts = await withVideo;
  const { segments, events } = cut(ts);
  const said = await probe(ts);
  assert.deepEqual(
    events.filter((e) => e.type === 'streams').map((e) => [e.video?.codec, e.audio?.codec]),
    [['h264', 'aac']],
  );
  const audioStart = events.find((e) => e.type === 'audio-start');
  assert.deepEqual(audioStart, { type: 'audio-start', pts: said.firstAudioPts });
  // Keyframes every second, a 2 s target: a cut at every other keyframe.
  assert.deepEqual(
    segments.map((s) => s.startPts),
    said.keyframes.filter((_, i) => i % 2 === 0),
  );
  for (const [i, s] of segments.entries()) {
    assert.equal(s.bytes.length % 188, 0);
    assert.equal(pid(s.bytes.subarray(0, 188)), 0, `segment ${i} opens with the PAT`);
    assert.equal(pid(s.bytes.subarray(188, 376)), 0x1000, `then the PMT (ffmpeg puts it at 0x1000)`);
    if (i + 1 < segments.length) {
      assert.equal(s.endPts, segments[i + 1]!.startPts, 'each ends where the next starts');
      assert.ok(s.endPts - s.startPts >= 2 * MPEG_CLOCK);
    }
  }
  // The last segment's end is its last audio packet's start plus the length of the one before
  // (a packet holds several AAC frames): within a packet of the truth.
  const total = (segments.at(-1)!.endPts - segments[0]!.startPts) / MPEG_CLOCK;
  assert.ok(Math.abs(total - 5) < 0.2, `${total} s of 5`);
  // Every packet of the input from the first keyframe on is in a segment, in order (the tables
  // each segment opens with are added).
  const packets = (b: Buffer) =>
    Array.from({ length: b.length / 188 }, (_, i) => b.subarray(i * 188, i * 188 + 188));
  const out = segments.flatMap((s, i) => packets(s.bytes).slice(i === 0 ? 0 : 2));
  const input = packets(ts);
  const first = input.findIndex((p) => p.equals(out[2]!));
  assert.ok(first > 0);
  assert.ok(
    input.slice(first).every((p, i) => p.equals(out[i + 2]!)),
    'the packets after the first keyframe, all and in order',
  );
  // A segment is a stream of its own: ffprobe reads its video and audio.
  assert.deepEqual((await probe(segments[1]!.bytes)).streams, ['h264', 'aac']);
});

test('any split of the input into chunks gives the same segments', async () => {
  const ts = await withVideo;
  const whole = cut(ts).segments;
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 5000 }), { minLength: 1, maxLength: 400 }), (sizes) => {
      const split = cut(ts, sizes).segments;
      assert.deepEqual(
        split.map((s) => [s.startPts, s.endPts]),
        whole.map((s) => [s.startPts, s.endPts]),
      );
      assert.ok(split.every((s, i) => s.bytes.equals(whole[i]!.bytes)));
    }),
    { numRuns: 30 },
  );
});

test('audio only: cut at audio packets once the target is reached', async () => {
  const ts = await audioOnly;
  const { segments, events } = cut(ts, undefined, 1);
  assert.equal(events.find((e) => e.type === 'streams' && e.video === undefined)?.type, 'streams');
  assert.ok(segments.length >= 4, `${segments.length} segments`);
  for (const s of segments.slice(0, -1)) {
    const sec = (s.endPts - s.startPts) / MPEG_CLOCK;
    assert.ok(sec >= 1 && sec < 1.5, `${sec} s`);
  }
  assert.deepEqual((await probe(segments[1]!.bytes)).streams, ['aac']);
});

test('a PTS that wraps past 2^33 keeps counting up', async () => {
  // Starts 2 s before the 33-bit clock wraps.
  const ts = await transportStream({ offsetSec: 2 ** 33 / MPEG_CLOCK - 2 });
  const { segments } = cut(ts);
  assert.ok(segments.length >= 2);
  assert.ok(segments[0]!.startPts < 2 ** 33 && segments.at(-1)!.endPts > 2 ** 33, 'across the wrap');
  for (let i = 1; i < segments.length; i++) assert.ok(segments[i]!.startPts > segments[i - 1]!.startPts);
  const total = (segments.at(-1)!.endPts - segments[0]!.startPts) / MPEG_CLOCK;
  assert.ok(Math.abs(total - 5) < 0.2, `${total} s of 5`);
});

test('bytes that are not a transport stream: no segment, no throw', () => {
  const segmenter = new TsSegmenter();
  assert.deepEqual(segmenter.push(Buffer.alloc(10_000, 7)), []);
  assert.deepEqual(segmenter.end(), []);
  assert.throws(() => new TsSegmenter({ targetDurationSec: 0 }), { code: 'ERR_INVALID_ARGUMENT' });
});

test('keyframes further apart than the target allows: segments are cut without one, none outlasts the target duration (RFC 8216 4.3.3.1)', async () => {
  // A keyframe every 3.6 s (as an encoder's default interval would be), B-frames reordering the
  // timestamps; target 2 s: the playlists say 2, so every segment must round to 2 s or less.
  const ts = await gops(11, 90, 2);
  assert.equal(targetDurationOf(2), 2);
  const { segments, events } = cut(ts, [ts.length], 2);
  const said = await probe(ts);
  const starts = events.flatMap((e) => (e.type === 'segment-start' ? [e] : []));
  assert.ok(segments.length >= 5, `${segments.length} segments`);
  for (const s of segments) {
    const sec = (s.endPts - s.startPts) / MPEG_CLOCK;
    assert.ok(Math.round(sec) <= 2 && sec < 2.5, `a segment of ${sec} s`);
  }
  // The ones at keyframes say so, and are at ffprobe's keyframes; the others are not.
  const keyframes = new Set(said.keyframes);
  assert.ok(
    starts.some((s) => !s.keyframe),
    'no segment was cut without a keyframe',
  );
  assert.equal(starts[0]!.keyframe, true, 'the first segment starts at a keyframe');
  for (const s of starts) assert.equal(keyframes.has(s.pts), s.keyframe, `segment at ${s.pts}`);
  // Back on the keyframes after each cut without one: every keyframe starts a segment.
  const startAt = new Set(starts.map((s) => s.pts));
  for (const k of said.keyframes) assert.ok(startAt.has(k), `the keyframe at ${k} starts no segment`);
  // Back to back: the segments cover the media without a gap.
  for (let i = 1; i < segments.length; i++) assert.equal(segments[i]!.startPts, segments[i - 1]!.endPts);
});

test('keyframes 2.4 s apart with B-frames (within the ceiling of the target): once their interval is known, every segment starts at one', async () => {
  const ts = await gops(20, 60, 3);
  const starts = cut(ts).events.flatMap((e) => (e.type === 'segment-start' ? [e] : []));
  const second = (await probe(ts)).keyframes[1]!;
  assert.ok(starts.length >= 8);
  assert.deepEqual(
    starts.filter((s) => s.pts >= second && !s.keyframe).map((s) => s.pts),
    [],
    'a segment after the second keyframe started without one',
  );
});

test('audio going on after the pictures end: cut at audio, no segment outlasts the target', async () => {
  const ts = await encoded(13, [
    ...['-filter_complex', '[0:v]trim=duration=10[v]', '-map', '[v]', '-map', '1:a'],
    ...['-c:v', 'libx264', '-preset', 'veryfast', '-g', '50', '-pix_fmt', 'yuv420p', '-c:a', 'aac'],
  ]);
  const { segments, events } = cut(ts);
  const starts = events.flatMap((e) => (e.type === 'segment-start' ? [e] : []));
  for (const s of segments) {
    const sec = (s.endPts - s.startPts) / MPEG_CLOCK;
    assert.ok(sec < 2.5, `a segment of ${sec} s`);
  }
  // The last 3 s have no picture: at least one segment starts at audio after the video's end.
  const videoEnd = starts.findLast((s) => s.keyframe)!.pts + 2 * MPEG_CLOCK;
  assert.ok(
    starts.some((s) => !s.keyframe && s.pts >= videoEnd),
    'no cut at audio after the pictures',
  );
});

test('keyframes within the target: every segment starts at one', async () => {
  const { events } = cut(await withVideo);
  const starts = events.filter((e) => e.type === 'segment-start');
  assert.ok(starts.length >= 2);
  assert.ok(starts.every((s) => s.keyframe));
  const audio = cut(await audioOnly).events.filter((e) => e.type === 'segment-start');
  assert.ok(audio.length >= 2 && audio.every((s) => s.keyframe));
});

test('the codecs are named from the first keyframe SPS and audio frame (RFC 6381), once, or not at all when one cannot be', async () => {
  const codecsOf = async (args: string[]) => {
    const ts = await encoded(2, args);
    return cut(ts).events.flatMap((e) => (e.type === 'codecs' ? [e.codecs] : []));
  };
  // High profile (100 = 0x64), no constraint flags, level 3.1 (31 = 0x1f); AAC-LC (2).
  const h264 = ['-c:v', 'libx264', '-preset', 'veryfast', '-pix_fmt', 'yuv420p'];
  assert.deepEqual(await codecsOf([...h264, '-profile:v', 'high', '-level', '3.1', '-c:a', 'aac']), [
    'avc1.64001f,mp4a.40.2',
  ]);
  // Constrained baseline (66 = 0x42, constraint_set1: 0x40... as x264 writes it), level 2.1.
  const [baseline] = await codecsOf([
    ...h264,
    '-profile:v',
    'baseline',
    '-level',
    '2.1',
    '-c:a',
    'libmp3lame',
  ]);
  assert.match(baseline!, /^avc1\.42[0-9a-f]{2}15,mp4a\.40\.34$/);
  assert.deepEqual(await codecsOf(['-vn', '-c:a', 'ac3']), ['ac-3']);
  // MPEG audio Layer II (ffmpeg's MPEG-TS default, DVB) has the stream type of MP3: not named.
  assert.deepEqual(await codecsOf(['-vn', '-c:a', 'mp2']), [undefined]);
  // HEVC has a longer name this segmenter does not read: no CODECS rather than a wrong one.
  assert.deepEqual(await codecsOf(['-c:v', 'libx265', '-x265-params', 'log-level=error', '-c:a', 'aac']), [
    undefined,
  ]);
});
