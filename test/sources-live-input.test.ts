// liveInput(): what ffmpeg opens (a file, a device format such as lavfi) or standard input, as
// 16 kHz mono PCM16; destroy and abort stop ffmpeg before the stream closes.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import type { MediaError } from '../src/audio/media-error.ts';
import { liveInput } from '../src/sources/live-input.ts';
import { alive, ffmpegChildren, sineFile } from './helpers/ffmpeg.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-live-input-'));
after(() => rm(root, { recursive: true, force: true }));

async function drain(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

test('a file ffmpeg opens, and the same bytes on standard input, give the same PCM', async () => {
  const wav = await sineFile({ seconds: 1.5, rate: 44100, channels: 2, codec: 'pcm_s16le' });
  const path = join(root, 'tone.wav');
  await writeFile(path, wav);
  const opened = await drain(liveInput(path));
  assert.equal(opened.length, 1.5 * 16000 * 2);
  const piped = await drain(
    liveInput('-', { stdin: Readable.from([wav.subarray(0, 1000), wav.subarray(1000)]) }),
  );
  assert.equal(piped.length, opened.length);
});

test('standard input takes no device format and is not paced', () => {
  for (const options of [{ realtime: true }, { inputArgs: ['-f', 'lavfi'] }]) {
    assert.throws(() => liveInput('-', { ...options, stdin: Readable.from([]) }), {
      code: 'ERR_INVALID_ARGUMENT',
    });
  }
});

test('destroying an endless input stops its ffmpeg before the stream closes', async () => {
  const stream = liveInput('sine=frequency=300:sample_rate=16000', { inputArgs: ['-f', 'lavfi'] });
  const [first] = (await once(stream, 'data')) as [Buffer];
  assert.ok(first.length > 0);
  const children = ffmpegChildren(process.pid);
  assert.equal(children.length, 1, 'one ffmpeg runs');
  stream.destroy();
  await once(stream, 'close');
  assert.deepEqual(children.filter(alive), []);
});

test('abort fails the stream with the signal’s reason and stops ffmpeg', async () => {
  const controller = new AbortController();
  const stream = liveInput('sine=frequency=300:sample_rate=16000', {
    inputArgs: ['-f', 'lavfi'],
    realtime: true,
    signal: controller.signal,
  });
  await once(stream, 'data');
  const children = ffmpegChildren(process.pid);
  const reason = new Error('operator stopped the relay');
  const closed = new Promise((resolve) => stream.once('close', resolve));
  controller.abort(reason);
  await assert.rejects(drain(stream), (err) => err === reason);
  await closed;
  assert.deepEqual(children.filter(alive), []);
});

test('input ffmpeg skipped is a warning; a missing file is ffmpeg’s error', async () => {
  const flac = await sineFile({ seconds: 3, rate: 44100, codec: 'flac', format: 'flac' });
  const path = join(root, 'cut.flac');
  await writeFile(path, flac.subarray(0, Math.floor(flac.length * 0.6) + 1));
  const stream = liveInput(path);
  const warnings: MediaError[] = [];
  stream.on('warning', (w: MediaError) => warnings.push(w));
  const pcm = await drain(stream);
  assert.ok(pcm.length > 0);
  assert.equal(warnings.length, 1);
  assert.equal(warnings[0]!.code, 'ERR_MEDIA_FORMAT');
  await assert.rejects(drain(liveInput(join(root, 'missing.wav'))), { code: 'ERR_FFMPEG_FAILED' });
});

test('standard input as declared raw PCM: 8 kHz stereo s16le becomes 16 kHz mono, chunked anywhere', async () => {
  const frames = 8000 * 1.5;
  const raw = Buffer.alloc(frames * 4);
  for (let i = 0; i < frames; i++) {
    const v = Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / 8000));
    raw.writeInt16LE(v, i * 4);
    raw.writeInt16LE(v, i * 4 + 2);
  }
  const pcm = await drain(
    liveInput('-', {
      stdin: Readable.from([raw.subarray(0, 1001), raw.subarray(1001)]),
      stdinFormat: { encoding: 's16le', sampleRate: 8000, channels: 2 },
    }),
  );
  assert.equal(pcm.length, 1.5 * 16000 * 2);
  let peak = 0;
  for (let i = 0; i < pcm.length; i += 2) peak = Math.max(peak, Math.abs(pcm.readInt16LE(i)));
  assert.ok(peak > 6000, `the tone came through (peak ${peak})`);
});

test('a URL whose server accepts and never sends fails after ioTimeoutMs instead of waiting for ever', {
  timeout: 30_000,
}, async (t) => {
  // Accepts the connection, reads the request, answers nothing (or only the headers).
  const sockets = new Set<Socket>();
  let headersOnly = false;
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('data', () => {});
    socket.on('error', () => {});
    if (headersOnly) socket.write('HTTP/1.1 200 OK\r\ncontent-type: audio/wav\r\n\r\n');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/live`;
  for (const stage of ['no answer', 'headers, then nothing']) {
    headersOnly = stage !== 'no answer';
    const stream = liveInput(url, { ioTimeoutMs: 300 });
    const closed = new Promise((resolve) => stream.once('close', resolve));
    await assert.rejects(drain(stream), { code: 'ERR_FFMPEG_FAILED' }, stage);
    await closed;
    assert.deepEqual(ffmpegChildren(process.pid), [], `${stage}: ffmpeg is gone`);
  }
  assert.throws(() => liveInput(url, { ioTimeoutMs: -1 }), { code: 'ERR_INVALID_ARGUMENT' });
});

test('a URL whose server stops sending mid-stream fails after ioTimeoutMs: an error, not a warning and an end', {
  timeout: 30_000,
}, async (t) => {
  // ffmpeg ends a read that timed out as if the input had ended (exit 0), saying
  // `<url>: Connection timed out`: that is the input failing, not input it skipped.
  const wav = await sineFile({ seconds: 2, rate: 16000, codec: 'pcm_s16le' });
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: audio/wav\r\n\r\n');
      socket.write(wav.subarray(0, wav.length / 2)); // a second of audio, then nothing
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    server.close();
  });
  const stream = liveInput(`http://127.0.0.1:${(server.address() as AddressInfo).port}/live.wav`, {
    ioTimeoutMs: 300,
  });
  const warnings: Error[] = [];
  stream.on('warning', (w: Error) => warnings.push(w));
  let bytes = 0;
  stream.on('data', (chunk: Buffer) => (bytes += chunk.length));
  const closed = new Promise((resolve) => stream.once('close', resolve));
  await assert.rejects(
    new Promise((resolve, reject) => stream.once('end', resolve).once('error', reject)),
    (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ERR_FFMPEG_FAILED');
      assert.match(err.message, /timed out/i);
      return true;
    },
  );
  await closed;
  assert.ok(bytes > 0, 'the audio before the stall came through');
  assert.deepEqual(warnings, []);
  assert.deepEqual(ffmpegChildren(process.pid), [], 'ffmpeg is gone');
});
