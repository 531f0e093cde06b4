// Without @discordjs/opus (an optional dependency), or when it fails to load (no binary, another
// Node ABI), Ogg and WebM Opus go through ffmpeg, and the process is told so once.

import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OPUS_FALLBACK_WARNING, setNativeOpusLoader } from '../src/audio/opus-decoder.ts';
import { type DecodeFormatEvent, decode } from '../src/transforms/decode.ts';
import { collectBytes } from './helpers/collect.ts';
import { sineFile } from './helpers/ffmpeg.ts';

after(() => setNativeOpusLoader());

/** Decode `input`, returning the PCM and the decoder `decode()` chose. */
async function decodeAll(input: Buffer): Promise<{ pcm: Buffer; decoder: string | undefined }> {
  const stream = decode({ sampleRate: 16_000, channels: 1 });
  let format: DecodeFormatEvent | undefined;
  stream.on('format', (f: DecodeFormatEvent) => {
    format = f;
  });
  const pcm = await collectBytes([input], stream);
  return { pcm, decoder: format?.decoder };
}

/** The process warnings with our code emitted while `fn` runs (and the ticks after it). */
async function warningsDuring(fn: () => Promise<void>): Promise<Error[]> {
  const seen: Error[] = [];
  const onWarning = (w: Error) => {
    if ((w as { code?: string }).code === OPUS_FALLBACK_WARNING) seen.push(w);
  };
  process.on('warning', onWarning);
  try {
    await fn();
    // process.emitWarning delivers on the next tick.
    await new Promise((resolve) => setImmediate(resolve));
  } finally {
    process.off('warning', onWarning);
  }
  return seen;
}

test('an Opus decoder that fails to load: Ogg and WebM Opus decode through ffmpeg, with one warning', async () => {
  const ogg = await sineFile({ seconds: 0.5, rate: 48_000, codec: 'libopus', format: 'ogg' });
  const webm = await sineFile({ seconds: 0.5, rate: 48_000, codec: 'libopus', format: 'webm' });
  setNativeOpusLoader(() => {
    throw Object.assign(new Error('The module was compiled against a different Node.js version'), {
      code: 'ERR_DLOPEN_FAILED',
    });
  });
  const results: Array<{ pcm: Buffer; decoder: string | undefined }> = [];
  const warnings = await warningsDuring(async () => {
    results.push(await decodeAll(ogg), await decodeAll(webm), await decodeAll(ogg));
  });
  for (const { pcm, decoder } of results) {
    assert.equal(decoder, 'ffmpeg');
    // About 0.5 s at 16 kHz mono PCM16.
    assert.ok(pcm.length > 14_000 && pcm.length < 18_000, `${pcm.length} bytes`);
  }
  assert.equal(warnings.length, 1, 'warned once, not once per file');
  assert.equal(warnings[0]!.name, 'SpeechpipeWarning');
  assert.match(warnings[0]!.message, /Opus is decoded by ffmpeg: .*different Node\.js version/);
});

test('an absent Opus decoder (the optional dependency not installed) falls back the same way', async () => {
  const ogg = await sineFile({ seconds: 0.2, rate: 48_000, codec: 'libopus', format: 'ogg' });
  setNativeOpusLoader(() => {
    throw Object.assign(new Error("Cannot find module '@discordjs/opus'"), { code: 'MODULE_NOT_FOUND' });
  });
  const warnings = await warningsDuring(async () => {
    assert.equal((await decodeAll(ogg)).decoder, 'ffmpeg');
  });
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!.message, /Cannot find module/);
});

test('with the native decoder loaded, Opus decodes in-process and nothing is said', async (t) => {
  setNativeOpusLoader();
  const ogg = await sineFile({ seconds: 0.2, rate: 48_000, codec: 'libopus', format: 'ogg' });
  let decoder: string | undefined;
  const warnings = await warningsDuring(async () => {
    decoder = (await decodeAll(ogg)).decoder;
  });
  if (decoder === 'ffmpeg') {
    // This machine has no working build of the optional dependency: the fallback said so.
    assert.equal(warnings.length, 1);
    t.skip('@discordjs/opus does not load here');
    return;
  }
  assert.equal(decoder, 'ogg-opus');
  assert.equal(warnings.length, 0);
});
