// Word error rate as the end-to-end oracle of the audio path: a recording in several formats
// and rates goes through the whole pipeline (file → decode → resample → frames → a live
// session; batch; fast) to the emulator's PocketSphinx engine, and its WER must equal that of
// the same recognizer on a 16 kHz mono WAV ffmpeg made of the same file, and not be worse than
// PocketSphinx alone (pocketsphinx_continuous on that WAV). Audio that reaches the service
// byte-swapped or at the wrong rate makes the WER collapse: the oracle catches a broken path.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { findPocketSphinx } from '../src/emulator/engine/pocketsphinx.ts';
import { startService } from './helpers/service.ts';
import {
  englishReferences,
  ffmpegWav16k,
  MEDIA_DIR,
  pipelineTranscript,
  pocketSphinxDirect,
  wordErrorRate,
} from './helpers/wer.ts';

const run = promisify(execFile);
const installed = findPocketSphinx() !== null;
const NOT_INSTALLED =
  'PocketSphinx is not installed (scripts/setup.sh: apt-get install pocketsphinx pocketsphinx-en-us)';

/**
 * How far the pipeline's WER may be from the recognizer's on ffmpeg's conversion of the same
 * file: PocketSphinx answers a resampler's last-bit differences with a word or two of another
 * choice on a short clip (up to 3 of the espeak-ng clip's 21 words), where a broken path loses
 * nearly all.
 */
const MARGIN = 0.16;
/** A broken path: at least this WER (no more than a word or two right by chance). */
const COLLAPSED = 0.8;

// The first two sentences of JFK's inaugural address (7.9 s), or espeak-ng's speech when the
// shared media are absent: short, for the suite's CPU.
const jfk = englishReferences().find((r) => r.file === 'en/jfk.wav');
const SOURCE = jfk
  ? {
      file: join(MEDIA_DIR, jfk.file),
      seconds: 7.9,
      text: 'And so my fellow Americans, ask not what your country can do for you',
    }
  : undefined;
const SPOKEN =
  'Turn on the lamp in the kitchen. What is the weather like today? Ask what you can do for your country.';

const FORMATS: { name: string; file: string; args: string[] }[] = [
  {
    name: 'MP3, 44.1 kHz stereo',
    file: 'clip.mp3',
    args: ['-ar', '44100', '-ac', '2', '-c:a', 'libmp3lame', '-b:a', '96k'],
  },
  { name: 'FLAC, 48 kHz', file: 'clip.flac', args: ['-ar', '48000', '-ac', '1', '-c:a', 'flac'] },
  {
    name: 'M4A (AAC), 22.05 kHz',
    file: 'clip.m4a',
    args: ['-ar', '22050', '-ac', '1', '-c:a', 'aac', '-b:a', '64k'],
  },
  {
    name: 'Ogg Opus, 48 kHz stereo',
    file: 'clip.opus',
    args: ['-ar', '48000', '-ac', '2', '-c:a', 'libopus', '-b:a', '48k'],
  },
  { name: 'A-law WAV, 16 kHz', file: 'clip.wav', args: ['-ar', '16000', '-ac', '1', '-c:a', 'pcm_alaw'] },
];

let dir = '';
let reference = '';
/** The clip as 16 kHz mono PCM16 (headerless), for the negative controls. */
let pcm16k = Buffer.alloc(0);
const service = installed ? await startService({ engine: 'pocketsphinx' }) : undefined;

before(async () => {
  if (!installed) return;
  dir = await mkdtemp(join(tmpdir(), 'speechpipe-wer-'));
  const master = join(dir, 'master.wav');
  if (SOURCE) {
    await ffmpeg(['-i', SOURCE.file, '-t', String(SOURCE.seconds), '-ar', '16000', '-ac', '1', master]);
    reference = SOURCE.text;
  } else {
    const spoken = join(dir, 'spoken.wav');
    await run('espeak-ng', ['-v', 'en-us', '-w', spoken, SPOKEN]);
    await ffmpeg(['-i', spoken, '-ar', '16000', '-ac', '1', master]);
    reference = SPOKEN;
  }
  for (const f of FORMATS) await ffmpeg(['-i', master, ...f.args, join(dir, f.file)]);
  await ffmpeg(['-i', master, '-f', 's16le', '-c:a', 'pcm_s16le', join(dir, 'clip.raw')]);
  pcm16k = await readFile(join(dir, 'clip.raw'));
});
after(() => (dir ? rm(dir, { recursive: true, force: true }) : undefined));

async function ffmpeg(args: string[]): Promise<void> {
  await run('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-nostdin', '-y', ...args]);
}

const measured = new Map<string, Promise<{ direct: number; engine: number }>>();

/** WERs of the recognizer alone and of the engine, both on ffmpeg's 16 kHz mono WAV of `file`. */
function baselines(file: string): Promise<{ direct: number; engine: number }> {
  let got = measured.get(file);
  if (!got) {
    got = (async () => {
      const wav = `${file}.16k.wav`;
      await ffmpegWav16k(file, wav);
      const direct = wordErrorRate(reference, await pocketSphinxDirect(wav));
      const engine = wordErrorRate(reference, await pipelineTranscript(service!.client, wav, 'fast'));
      return { direct, engine };
    })();
    measured.set(file, got);
  }
  return got;
}

for (const format of FORMATS) {
  test(`${format.name}: live, the pipeline's WER equals the recognizer's on ffmpeg's 16 kHz audio`, async (t) => {
    if (!installed) return t.skip(NOT_INSTALLED);
    if (!SOURCE) t.diagnostic(`no media at ${MEDIA_DIR}: espeak-ng speech instead of JFK`);
    const file = join(dir, format.file);
    const { direct, engine } = await baselines(file);
    const live = wordErrorRate(reference, await pipelineTranscript(service!.client, file, 'live'));
    t.diagnostic(
      `WER: PocketSphinx alone ${direct.toFixed(2)}, engine on ffmpeg's WAV ${engine.toFixed(2)}, pipeline ${live.toFixed(2)}`,
    );
    assert.ok(Math.abs(live - engine) <= MARGIN, `pipeline ${live} against ${engine} on the same audio`);
    assert.ok(live <= direct + MARGIN, `pipeline ${live} worse than PocketSphinx alone (${direct})`);
    assert.ok(live < COLLAPSED);
  });
}

test('batch and fast: the same WER as the recognizer on the same audio', async (t) => {
  if (!installed) return t.skip(NOT_INSTALLED);
  const file = join(dir, FORMATS[0]!.file);
  const { engine } = await baselines(file);
  for (const mode of ['batch', 'fast'] as const) {
    const got = wordErrorRate(reference, await pipelineTranscript(service!.client, file, mode));
    t.diagnostic(`${mode}: WER ${got.toFixed(2)} (engine on ffmpeg's WAV ${engine.toFixed(2)})`);
    assert.ok(Math.abs(got - engine) <= MARGIN, `${mode} ${got} against ${engine}`);
  }
});

test('negative controls: audio byte-swapped, or declared at the wrong rate, makes the WER collapse', async (t) => {
  if (!installed) return t.skip(NOT_INSTALLED);
  const swapped = Buffer.from(pcm16k);
  swapped.swap16();
  const raw = join(dir, 'swapped.raw');
  await writeFile(raw, swapped);
  const rawOk = join(dir, 'clip.raw');
  const controls = [
    { name: 'byte-swapped', file: raw, input: { encoding: 's16le', sampleRate: 16_000, channels: 1 } },
    {
      name: '16 kHz declared as 8 kHz',
      file: rawOk,
      input: { encoding: 's16le', sampleRate: 8_000, channels: 1 },
    },
  ] as const;
  // The right declaration of the same bytes is heard: the control is the broken path alone.
  const right = wordErrorRate(
    reference,
    await pipelineTranscript(service!.client, rawOk, 'live', {
      input: { encoding: 's16le', sampleRate: 16_000, channels: 1 },
    }),
  );
  t.diagnostic(`declared right: WER ${right.toFixed(2)}`);
  assert.ok(right < COLLAPSED - 0.2);
  for (const control of controls) {
    const got = wordErrorRate(
      reference,
      await pipelineTranscript(service!.client, control.file, 'live', { input: control.input }),
    );
    t.diagnostic(`${control.name}: WER ${got.toFixed(2)}`);
    assert.ok(got >= COLLAPSED, `${control.name}: WER ${got} did not collapse`);
  }
});
