// decode() on every real recording in the shared media directory: each decodes to the duration
// ffmpeg's own decode of the same file gives, within 10 ms. Skips visibly when media is absent.

import assert from 'node:assert/strict';
import { createReadStream, existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { type DecodeFormatEvent, decode } from '../src/transforms/decode.ts';
import { ffmpeg } from './helpers/ffmpeg.ts';

const mediaDir = resolve(
  process.env.SPEECHPIPE_MEDIA ?? new URL('../../shared/media', import.meta.url).pathname,
);
const AUDIO = /\.(wav|alaw|mulaw|flac|m4a|mp3|ogg|opus|webm)$/i;

function mediaFiles(): string[] {
  if (!existsSync(mediaDir)) return [];
  const out: string[] = [];
  for (const entry of readdirSync(mediaDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    for (const file of readdirSync(join(mediaDir, entry.name)))
      if (AUDIO.test(file)) out.push(join(entry.name, file));
  }
  return out.sort();
}

const files = mediaFiles();

test('media directory holds every format the issue names', (t) => {
  if (files.length === 0) return t.skip(`no media at ${mediaDir}`);
  for (const ext of ['wav', 'alaw', 'mulaw', 'flac', 'm4a', 'mp3', 'ogg', 'webm', 'opus']) {
    assert.ok(
      files.some((f) => f.endsWith(`.${ext}`)),
      `no .${ext} file`,
    );
  }
});

if (files.length === 0) {
  test('every media file decodes to ffmpeg duration', (t) => t.skip(`no media at ${mediaDir}`));
}

for (const file of files) {
  test(`${file} decodes to ffmpeg's duration within 10 ms`, async (t) => {
    const path = join(mediaDir, file);
    const d = decode();
    let format: DecodeFormatEvent | undefined;
    d.on('format', (f: DecodeFormatEvent) => {
      format = f;
    });
    let bytes = 0;
    await pipeline(
      createReadStream(path),
      d,
      new Writable({
        write(chunk: Buffer, _e, cb) {
          bytes += chunk.length;
          cb();
        },
      }),
    );
    const reference = await ffmpeg(['-i', path, '-f', 's16le', '-ar', '16000', '-ac', '1', 'pipe:1']);
    const ours = bytes / 32;
    const theirs = reference.length / 32;
    t.diagnostic(`${format?.decoder}: ${ours.toFixed(2)} ms, ffmpeg ${theirs.toFixed(2)} ms`);
    assert.ok(theirs > 500, 'the reference decode produced audio');
    assert.ok(Math.abs(ours - theirs) <= 10, `${ours} ms vs ffmpeg ${theirs} ms`);
    // The native paths are used where they can be.
    if (/\.(wav|alaw|mulaw)$/.test(file)) assert.equal(format?.decoder, 'wav');
    if (/\.(ogg|opus)$/.test(file)) assert.equal(format?.decoder, 'ogg-opus');
    if (/\.webm$/.test(file)) assert.equal(format?.decoder, 'webm-opus');
  });
}
