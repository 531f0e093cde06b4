// The emulator's PocketSphinx engine: the decoder's output parsed, the process pool (at most N
// processes, a queue visible in stats, cancellation, a process that dies), and the engine in the
// emulator: live records as the contract has them, a stream sent faster than it is recognized
// answered late but with the same words, languages without a model, and the CLI's --engine.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { findPocketSphinx, parseHypseg, SAMPLE_RATE } from '../src/emulator/engine/pocketsphinx.ts';
import {
  MAX_LIVE_BACKLOG_SEC,
  MAX_UTTERANCE_SEC,
  quietestSample,
} from '../src/emulator/engine/recognized.ts';
import { RecognitionCancelled, RecognizerPool } from '../src/emulator/engine/recognizer.ts';
import { detectRegions } from '../src/emulator/engine/regions.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { type AsrRecord, encodeWav, SpeechServiceError } from '../src/index.ts';
import { validateAsrRecord } from '../src/protocol/records.ts';
import { CLI_CWD, runCli } from './helpers/cli.ts';
import { until } from './helpers/emulator-fixtures.ts';
import { startService } from './helpers/service.ts';
import { speechPcm } from './helpers/speech.ts';
import { wordErrorRate } from './helpers/wer.ts';

const install = findPocketSphinx();
const NOT_INSTALLED =
  'PocketSphinx is not installed (scripts/setup.sh: apt-get install pocketsphinx pocketsphinx-en-us)';
const dir = await mkdtemp(join(tmpdir(), 'speechpipe-recognizer-test-'));
after(() => rm(dir, { recursive: true, force: true }));

const words = (records: { words: { word: string }[] }[]) =>
  records.flatMap((r) => r.words.map((w) => w.word));

/** Sentences spoken by espeak-ng's US voice (PocketSphinx's model is US English), with pauses. */
async function spoken(sentences: string[], pauseMs: number): Promise<Buffer> {
  return Buffer.concat(await Promise.all(sentences.map((s) => speechPcm(s, { voice: 'en-us', pauseMs }))));
}

describe('the decoder output', () => {
  test('a -hypseg line: fillers dropped, alternative pronunciations named by their word, times from frames', () => {
    const line =
      'u7 S 0 T -10 A -9 L -1 0 -4 0 <s> 6 -6 -5 [SPEECH] 29 -17 -2 and(2) 69 -4 -1 i 77 -7 -2 know 98 -6 -2 <sil> 124 -1 -4 my 163 -1 -9 </s> 247';
    const { uttId, words: got } = parseHypseg(line, 2);
    assert.equal(uttId, 'u7');
    assert.deepEqual(got, [
      { word: 'and', start: 2.29, end: 2.69 },
      { word: 'i', start: 2.69, end: 2.77 },
      { word: 'know', start: 2.77, end: 2.98 },
      { word: 'my', start: 3.24, end: 3.63 },
    ]);
  });

  test('an utterance PocketSphinx found nothing in has no words', () => {
    assert.deepEqual(parseHypseg('a1 S 0 T 0 A 0 L 0 0', 0).words, []);
  });

  test('a long utterance is cut at its quietest 20 ms', () => {
    const pcm = Buffer.alloc(SAMPLE_RATE * 2); // 1 s
    for (let i = 0; i < SAMPLE_RATE; i++)
      pcm.writeInt16LE(i >= 9600 && i < 9920 ? 3 : 8000 * Math.sin(i / 5), i * 2);
    assert.equal(quietestSample(pcm, 1000), 1000 + 9600 + 160);
  });
});

describe('the recognizer processes', { skip: install ? false : NOT_INSTALLED }, () => {
  const sentences = [
    'What is the weather like today?',
    'Turn on the lamp in the kitchen.',
    'Ask what you can do for your country.',
  ];
  let file = '';
  let seconds: [number, number][] = [];
  /** Each region's words decoded alone. */
  let alone: Awaited<ReturnType<RecognizerPool['recognize']>>[] = [];

  test('decode one utterance of a file, the words timed within it', async (t) => {
    const pcm = await spoken(sentences, 600);
    file = join(dir, 'three.raw');
    await writeFile(file, pcm);
    seconds = detectRegions(pcm, SAMPLE_RATE).map((r) => [Math.max(0, r.start - 0.3), r.end + 0.3]);
    assert.equal(seconds.length, 3);
    const pool = new RecognizerPool(install!, 1);
    t.after(() => pool.close());
    const [from, to] = seconds[0]!;
    const got = await pool.recognize({ path: file, startSec: from, endSec: to }, {}, 'fast');
    t.diagnostic(got.map((w) => w.word).join(' '));
    assert.ok(wordErrorRate(sentences[0]!, got.map((w) => w.word).join(' ')) <= 0.6, 'the sentence is heard');
    for (const w of got)
      assert.ok(w.start >= from && w.end <= to + 0.01 && w.start <= w.end, JSON.stringify(w));
  });

  test('at most N processes decode; the rest waits in a queue shown in stats, and each gets its own words', async (t) => {
    const pool = new RecognizerPool(install!, 1);
    t.after(() => pool.close());
    alone = [];
    for (const [from, to] of seconds)
      alone.push(await pool.recognize({ path: file, startSec: from, endSec: to }, {}, 'fast'));
    const owners = seconds.map(() => ({}));
    const all = Promise.all(
      seconds.map(([from, to], i) =>
        pool.recognize({ path: file, startSec: from, endSec: to }, owners[i]!, 'batch'),
      ),
    );
    const stats = pool.stats();
    assert.equal(stats.busy, 1);
    assert.equal(stats.queued, 2);
    assert.ok(stats.running <= 1 && stats.maxQueued >= 2);
    assert.deepEqual(await all, alone);
    assert.equal(pool.stats().queued, 0);
  });

  test('cancel: waiting work is dropped and a process decoding for the owner is stopped', async (t) => {
    const pool = new RecognizerPool(install!, 1);
    t.after(() => pool.close());
    const gone = {};
    const other = {};
    const [from, to] = seconds[2]!;
    const running = pool.recognize({ path: file, startSec: 0, endSec: to }, gone, 'live');
    const waiting = pool.recognize({ path: file, startSec: from, endSec: to }, gone, 'live');
    const others = pool.recognize({ path: file, startSec: from, endSec: to }, other, 'live');
    pool.cancel(gone);
    await assert.rejects(running, RecognitionCancelled);
    await assert.rejects(waiting, RecognitionCancelled);
    assert.deepEqual(await others, alone[2]);
    assert.equal(pool.stats().failures, 0);
  });

  test('a process that dies while decoding: the utterance is decoded again by a fresh one', async (t) => {
    const pool = new RecognizerPool(install!, 1);
    t.after(() => pool.close());
    const [from, to] = seconds[2]!;
    const pending = pool.recognize({ path: file, startSec: from, endSec: to }, {}, 'fast');
    await until(() => decoderPids().length === 1, 'a decoder process');
    process.kill(decoderPids()[0]!, 'SIGKILL');
    assert.deepEqual(await pending, alone[2]);
    assert.equal(pool.stats().failures, 1);
  });

  test('close: waiting work is refused and every process ends', async () => {
    const pool = new RecognizerPool(install!, 2);
    const [from, to] = seconds[0]!;
    const work = Promise.allSettled(
      [1, 2, 3].map(() => pool.recognize({ path: file, startSec: from, endSec: to }, {}, 'batch')),
    );
    await pool.close();
    for (const w of await work)
      assert.ok(w.status === 'rejected' && w.reason instanceof RecognitionCancelled);
    assert.equal(decoderPids().length, 0);
    await assert.rejects(
      pool.recognize({ path: file, startSec: from, endSec: to }, {}, 'batch'),
      RecognitionCancelled,
    );
  });
});

/** This process's pocketsphinx_batch children. */
function decoderPids(): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && comm.startsWith('pocketsphinx')) out.push(Number(entry));
    } catch {
      // gone
    }
  }
  return out;
}

describe('the engine in the emulator', { skip: install ? false : NOT_INSTALLED }, () => {
  test('live records as the contract has them: provisional only while speech is open, a speech-final per region, one final', async (t) => {
    const { emulator, client } = await startService({ engine: 'pocketsphinx' });
    assert.equal(emulator.engine, 'pocketsphinx');
    const pcm = await spoken(
      ['What is the weather like today?', 'Ask what you can do for your country.'],
      800,
    );
    const regions = detectRegions(pcm, SAMPLE_RATE);
    const session = client.live.stt({ transport: 'socketio', language: 'en' });
    const records: AsrRecord[] = [];
    session.on('record', (r: AsrRecord) => records.push(r));
    for (let at = 0; at < pcm.length; at += 3200) {
      const final = at + 3200 >= pcm.length;
      await session.send(pcm.subarray(at, at + 3200), { final });
      if (!final) await new Promise((r) => setTimeout(r, 20)); // about real time: partials have a chance
    }
    await session.done;
    t.diagnostic(
      records
        .map((r) => `${r.is_final ? 'F' : r.is_speech_final ? 'S' : 'p'}: ${r.transcription}`)
        .join('\n'),
    );
    for (const r of records) assert.ok(validateAsrRecord(r).ok, JSON.stringify(r));
    assert.equal(records.filter((r) => r.is_final).length, 1);
    const final = records.at(-1)!;
    assert.equal(final.is_final, true);
    // The trailing pause closed the last region: a speech-final record each, the final one empty.
    const finals = records.filter((r) => r.is_speech_final && !r.is_final);
    assert.equal(finals.length, regions.length, 'a speech-final record per region');
    assert.deepEqual(final.words, []);
    const committed = finals.flatMap((r) => r.words);
    for (let i = 1; i < committed.length; i++)
      assert.ok(committed[i]!.start_time >= committed[i - 1]!.end_time - 0.001);
    for (const [i, r] of finals.entries()) {
      assert.ok(
        r.words.every(
          (w) => w.start_time >= regions[i]!.start - 0.31 && w.end_time <= regions[i]!.end + 0.31,
        ),
      );
    }
    assert.ok(
      wordErrorRate('What is the weather like today', finals[0]!.transcription) <= 0.6,
      'the speech is heard',
    );
    // The same words as the same audio sent whole (fast transcription): live decoding is exact.
    const whole = await client.fast.transcribeFinal(encodeWav(pcm, SAMPLE_RATE), { language: 'en' });
    assert.deepEqual(committed, whole.words);
    // A provisional record belongs to a region still open: its speech-final follows.
    for (const [i, r] of records.entries())
      if (!r.is_speech_final) assert.ok(records[i + 1] && !records[i + 1]!.is_final);
    const stats = emulator.stats().recognizer;
    assert.equal(stats.engine, 'pocketsphinx');
    assert.ok(stats.utterances >= regions.length && stats.cpuSec > 0);
  });

  test('a stream sent faster than it is recognized is answered late, with the words of the same audio sent whole', async (t) => {
    const { emulator, client } = await startService({ engine: 'pocketsphinx', recognizerProcesses: 1 });
    const sentence = await spoken(
      ['Ask not what your country can do for you, ask what you can do for your country.'],
      500,
    );
    const pcm = Buffer.concat(Array.from({ length: 4 }, () => sentence));
    const audioSec = pcm.length / 2 / SAMPLE_RATE;
    assert.ok(audioSec > MAX_LIVE_BACKLOG_SEC + 4, `${audioSec} s of speech, to pass the backlog bound`);
    let worstQueued = 0;
    const watch = setInterval(() => {
      worstQueued = Math.max(worstQueued, emulator.stats().recognizer.queuedAudioSec);
    }, 10);
    t.after(() => clearInterval(watch));
    // Socket.IO frames are acknowledged as soon as they are taken: only the backlog holds them.
    const session = client.live.stt({ transport: 'socketio', language: 'en' });
    const records: AsrRecord[] = [];
    session.on('record', (r: AsrRecord) => records.push(r));
    const started = performance.now();
    for (let at = 0; at < pcm.length; at += 32_000)
      await session.send(pcm.subarray(at, at + 32_000), { final: at + 32_000 >= pcm.length });
    const final = await session.done;
    clearInterval(watch);
    t.diagnostic(
      `${audioSec.toFixed(1)} s of audio in ${((performance.now() - started) / 1000).toFixed(1)} s; queued at most ${worstQueued.toFixed(1)} s`,
    );
    assert.equal(final.is_final, true);
    // Bounded: frames wait while the backlog is over its bound, so at most one more region joins it.
    assert.ok(worstQueued <= MAX_LIVE_BACKLOG_SEC + MAX_UTTERANCE_SEC, `${worstQueued} s queued`);
    assert.ok(
      worstQueued >= MAX_LIVE_BACKLOG_SEC / 2,
      `${worstQueued} s queued: the stream was sent faster than recognized`,
    );
    const whole = await client.fast.transcribeFinal(encodeWav(pcm, SAMPLE_RATE), { language: 'en' });
    assert.deepEqual(words(records.filter((r) => r.is_speech_final)), words([whole]));
    assert.equal(emulator.stats().sessions.finished, 1);
  });

  test('ar and codeswitch keep generated words, said once; en and auto are recognized', async (t) => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => {
      if ((w as { code?: string }).code === 'SPEECHPIPE_NO_RECOGNIZER_MODEL') warnings.push(w);
    };
    process.on('warning', onWarning);
    t.after(() => process.off('warning', onWarning));
    const recognized = await startService({ engine: 'pocketsphinx' });
    const generated = await startService({ engine: 'generated' });
    const wav = encodeWav(await spoken(['What is the weather like today?'], 400), SAMPLE_RATE);
    for (const language of ['ar', 'codeswitch'] as const) {
      const got = await recognized.client.fast.transcribeFinal(wav, { language });
      const expected = await generated.client.fast.transcribeFinal(wav, { language });
      assert.deepEqual(got.words, expected.words, language);
    }
    await new Promise((r) => setImmediate(r));
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]!.message, /English model only/);
    for (const language of ['en', 'auto'] as const) {
      const got = await recognized.client.fast.transcribeFinal(wav, { language });
      assert.ok(
        wordErrorRate('What is the weather like today', got.transcription) <= 0.6,
        `${language}: ${got.transcription}`,
      );
    }
  });

  test('a recognizer that fails twice on an utterance fails the operation (500 ASR_TRANSCRIPTION_FAILED), never answers without its words', async (t) => {
    const { emulator, client } = await startService({ engine: 'pocketsphinx', recognizerProcesses: 1 });
    const pcm = await spoken(
      ['Ask not what your country can do for you, ask what you can do for your country.'],
      600,
    );
    // Every decoder this process starts is killed while the failures are wanted.
    const killer = setInterval(() => {
      for (const pid of decoderPids()) process.kill(pid, 'SIGKILL');
    }, 5);
    t.after(() => clearInterval(killer));
    const fast = await client.fast
      .transcribeFinal(encodeWav(pcm, SAMPLE_RATE), { language: 'en' })
      .catch((e: unknown) => e);
    assert.ok(fast instanceof SpeechServiceError, String(fast));
    assert.equal(fast.code, 'ASR_TRANSCRIPTION_FAILED');
    const before = emulator.stats().recognizer.failures;
    const session = client.live.stt({ transport: 'http', language: 'en' });
    session.done.catch(() => {});
    await session.send(pcm); // a region closes: its decoding fails twice
    await until(() => emulator.stats().recognizer.failures >= before + 2, 'the live decode failing twice');
    clearInterval(killer);
    await until(() => emulator.stats().recognizer.busy === 0, 'the decoding given up');
    const err = await session.send(pcm.subarray(0, 3200)).catch((e: unknown) => e);
    assert.ok(err instanceof SpeechServiceError && err.code === 'ASR_TRANSCRIPTION_FAILED', String(err));
    await until(() => emulator.stats().sessions.failed === 1, 'the stream failed');
  });

  test('an aborted stream leaves the recognizer nothing to do', async () => {
    const { emulator, client } = await startService({ engine: 'pocketsphinx', recognizerProcesses: 1 });
    const pcm = await spoken(
      ['One two three four five.', 'Six seven eight nine ten.', 'Eleven twelve.'],
      400,
    );
    const session = client.live.stt({ transport: 'socketio', language: 'en' });
    session.done.catch(() => {});
    await session.send(pcm);
    session.abort(new Error('stopped'));
    await until(() => emulator.stats().sessions.active === 0, 'the stream ended');
    await until(() => {
      const s = emulator.stats().recognizer;
      return s.busy === 0 && s.queued === 0;
    }, 'the recognizer idle');
  });
});

describe('speechpipe emulator --engine', () => {
  test('pocketsphinx without PocketSphinx installed is bad usage, saying how to install it', async () => {
    // A PATH with node alone: no pocketsphinx_batch on it.
    const run = await runCli(['emulator', '--engine', 'pocketsphinx'], {
      PATH: join(process.execPath, '..'),
    });
    assert.equal(run.code, 2, run.stderr);
    assert.match(
      run.stderr,
      /PocketSphinx is not installed.*apt-get install pocketsphinx pocketsphinx-en-us/,
    );
  });

  test('an unknown engine is bad usage', async () => {
    const run = await runCli(['emulator', '--engine', 'whisper']);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--engine must be generated, pocketsphinx or auto/);
  });

  test('auto announces the engine it took', async () => {
    // Standard input at its end at once: the emulator announces itself, then stops.
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(
        process.execPath,
        ['src/cli/main.ts', 'emulator', '--engine', 'auto', '--stop-on-stdin-end'],
        {
          cwd: CLI_CWD,
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => {
        stdout += d;
      });
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
      });
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(JSON.parse(run.stdout).engine, install ? 'pocketsphinx' : 'generated');
    assert.match(run.stderr, install ? /recognised by PocketSphinx/ : /not recognised/);
  });

  test('the built-in emulator of transcribe takes SPEECHPIPE_EMULATOR_ENGINE and says whose words it gives', async (t) => {
    const wav = join(dir, 'weather.wav');
    await writeFile(wav, encodeWav(await spoken(['What is the weather like today?'], 400), SAMPLE_RATE));
    const bad = await runCli(['transcribe', wav, '--out', join(dir, 'bad')], {
      SPEECHPIPE_EMULATOR_ENGINE: 'whisper',
    });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /SPEECHPIPE_EMULATOR_ENGINE must be generated, pocketsphinx or auto/);
    if (!install) return t.skip(NOT_INSTALLED);
    const out = join(dir, 'out');
    const run = await runCli(['transcribe', wav, '--out', out, '--format', 'txt', '--language', 'en'], {
      SPEECHPIPE_EMULATOR_ENGINE: 'pocketsphinx',
    });
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /built-in emulator .*recognised by PocketSphinx/);
    const text = readFileSync(join(out, 'weather.wav.txt'), 'utf8');
    assert.ok(wordErrorRate('What is the weather like today', text) <= 0.6, text);
  });

  test('startEmulator refuses an unknown engine', async () => {
    await assert.rejects(startEmulator({ engine: 'whisper' as 'auto' }), RangeError);
  });
});
