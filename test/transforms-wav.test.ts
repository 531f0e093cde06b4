// toWav() (streaming header) and wavFile() (sizes patched on finish): both read back by
// parseWavHeader, ffprobe and ffmpeg with the samples intact.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createReadStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { MediaError } from '../src/audio/media-error.ts';
import { parseWavHeader } from '../src/protocol/riff.ts';
import { wavFile } from '../src/sinks/wav-file.ts';
import { toWav } from '../src/transforms/to-wav.ts';
import { chunksOf } from './helpers/chunks.ts';
import { collectBytes } from './helpers/collect.ts';
import { ffmpegPcm16 } from './helpers/ffmpeg.ts';

const run = promisify(execFile);

function pcm(frames: number, channels: number): Buffer {
  const b = Buffer.alloc(frames * channels * 2);
  for (let i = 0; i < frames * channels; i++) b.writeInt16LE(Math.round(9000 * Math.sin(i * 0.05)), i * 2);
  return b;
}

async function ffprobe(path: string): Promise<{ sample_rate: string; channels: number; duration: string }> {
  const { stdout } = await run('ffprobe', [
    '-v',
    'error',
    '-show_entries',
    'stream=sample_rate,channels,duration',
    '-of',
    'json',
    path,
  ]);
  return JSON.parse(stdout).streams[0];
}

function wavBytes(input: Buffer, options: { sampleRate?: number; channels?: number }): Promise<Buffer> {
  return collectBytes(chunksOf(input, 1001), toWav(options));
}

test('toWav: a streaming header (sizes 0xFFFFFFFF) that parseWavHeader, ffprobe and ffmpeg accept', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const input = pcm(24000, 2);
  const wav = await wavBytes(input, { sampleRate: 24000, channels: 2 });
  assert.equal(wav.readUInt32LE(4), 0xffffffff);
  assert.equal(wav.readUInt32LE(40), 0xffffffff);
  const info = parseWavHeader(wav)!;
  assert.deepEqual(
    [info.sampleRate, info.channels, info.bitsPerSample, info.dataBytes],
    [24000, 2, 16, undefined],
  );
  assert.ok(wav.subarray(info.dataOffset).equals(input));
  const path = join(dir, 'stream.wav');
  (await import('node:fs')).writeFileSync(path, wav);
  const probe = await ffprobe(path);
  assert.equal(probe.sample_rate, '24000');
  assert.equal(probe.channels, 2);
  assert.ok((await ffmpegPcm16(wav)).equals(input), 'ffmpeg reads the samples back');
});

test('toWav: defaults to 16 kHz mono; empty input is a header alone; a partial frame is an error', async () => {
  const empty = await wavBytes(Buffer.alloc(0), {});
  assert.equal(empty.length, 44);
  assert.equal(parseWavHeader(empty)!.sampleRate, 16000);
  await assert.rejects(
    wavBytes(Buffer.alloc(6), { channels: 2 }),
    (e: MediaError) => e.code === 'ERR_MEDIA_TRUNCATED',
  );
});

test('wavFile: sizes patched on finish; parseWavHeader and ffprobe give the exact duration', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'out.wav');
  const input = pcm(16000 * 3 + 5, 1);
  await pipeline(Readable.from(chunksOf(input, 777)), wavFile(path));
  const file = readFileSync(path);
  const info = parseWavHeader(file)!;
  assert.equal(info.dataBytes, input.length);
  assert.equal(file.readUInt32LE(4), 36 + input.length);
  assert.ok(file.subarray(44).equals(input));
  const probe = await ffprobe(path);
  assert.equal(Number(probe.duration).toFixed(4), ((16000 * 3 + 5) / 16000).toFixed(4));
});

test('wavFile: a partial sample frame at the end fails the stream and leaves a readable file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'cut.wav');
  await assert.rejects(
    pipeline(Readable.from([pcm(100, 2), Buffer.alloc(2)]), wavFile(path, { channels: 2, sampleRate: 8000 })),
    MediaError,
  );
  const info = parseWavHeader(readFileSync(path))!;
  assert.equal(info.channels, 2);
  assert.equal(info.dataBytes, undefined, 'the streaming header stays: nothing claims the cut frame');
});

test('wavFile: a FIFO (not seekable) gets the streaming header and every sample, written in order', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const fifo = join(dir, 'out.fifo');
  await run('mkfifo', [fifo]);
  const input = pcm(8000 * 2 + 3, 2);
  const read = new Promise<Buffer>((resolve, reject) => {
    const parts: Buffer[] = [];
    createReadStream(fifo)
      .on('data', (c) => parts.push(c as Buffer))
      .on('end', () => resolve(Buffer.concat(parts)))
      .on('error', reject);
  });
  const [, wav] = await Promise.all([
    pipeline(Readable.from(chunksOf(input, 999)), wavFile(fifo, { sampleRate: 8000, channels: 2 })),
    read,
  ]);
  assert.equal(wav.readUInt32LE(4), 0xffffffff, 'streaming sizes: nothing could be patched');
  const info = parseWavHeader(wav)!;
  assert.deepEqual([info.sampleRate, info.channels, info.dataBytes], [8000, 2, undefined]);
  assert.ok(wav.subarray(info.dataOffset).equals(input));
});

test("wavFile: flags 'a' (appending cannot write at an offset) keeps the streaming header, nothing appended", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'speechpipe-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'append.wav');
  const input = pcm(1600, 1);
  await pipeline(Readable.from([input]), wavFile(path, { flags: 'a' }));
  const file = readFileSync(path);
  assert.equal(file.length, 44 + input.length);
  assert.equal(file.readUInt32LE(4), 0xffffffff);
  assert.ok(file.subarray(44).equals(input));
});

test('wav-file.ts keeps to its layer: a sink imports transforms, client and protocol, not audio', () => {
  const source = readFileSync(new URL('../src/sinks/wav-file.ts', import.meta.url), 'utf8');
  const ours = [...source.matchAll(/from '(\.\.?\/[^']+)'/g)].map((m) => m[1]!);
  assert.ok(ours.length > 0);
  for (const path of ours) assert.match(path, /^\.\.\/(transforms|client|protocol)\//, path);
});
