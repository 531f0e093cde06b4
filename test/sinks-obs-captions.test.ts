// obsCaptions() and `caption --obs` against a real broadcast chain started here: OBS Studio
// headless (xvfb-run), streaming over RTMP to nginx-rtmp, which records it. The captions are read
// back out of the received H.264 (A/53 caption SEI, CEA-608 decoded): the words must be there.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { inspect } from 'node:util';
import type { CaptionOutputError } from '../src/sinks/caption-delivery.ts';
import { type ObsCaptions, obsCaptionEncoding, obsCaptions } from '../src/sinks/obs-captions.ts';
import type { UtteranceEvent } from '../src/transforms/assemble-transcript.ts';
import { runCli } from './helpers/cli.ts';
import { captionsOfFlv, newLines, type StreamCaption } from './helpers/flv.ts';
import {
  hangingLink,
  type ObsStudio,
  obsMissing,
  type RtmpReceiver,
  startObs,
  startRtmpReceiver,
  startStreaming,
  stopStreaming,
} from './helpers/obs.ts';
import { freePort } from './helpers/ports.ts';
import { speechWav } from './helpers/speech.ts';
import { collectDeliveries, utterance, vttWords } from './helpers/utterances.ts';

const missing = obsMissing();
if (missing) process.stderr.write(`sinks-obs-captions: OBS TESTS SKIPPED: ${missing}\n`);

const root = await mkdtemp(join(tmpdir(), 'speechpipe-obs-'));
let rtmp: RtmpReceiver | undefined;
let studio: ObsStudio | undefined;
before(async () => {
  if (missing) return;
  rtmp = await startRtmpReceiver(join(root, 'nginx'));
  studio = await startObs(join(root, 'home'), rtmp.url);
});
after(async () => {
  // Each is stopped whatever the other did, and only then is the directory removed (retried:
  // a process's last write can still land in it as it goes), so that no failure here leaves
  // OBS, Xvfb or nginx running.
  const stopped = await Promise.allSettled([studio?.stop(), rtmp?.stop()]);
  if (!process.env.KEEP_OBS) await rm(root, { recursive: true, force: true, maxRetries: 5 });
  for (const s of stopped) if (s.status === 'rejected') throw s.reason;
});

async function endAndWait(sink: ObsCaptions, events: UtteranceEvent[]): Promise<void> {
  for (const e of events) sink.write(e);
  sink.end();
  await once(sink, 'finish');
}

/** The captions of the newest recording once `done` holds for them (OBS sends the last one a frame later). */
async function broadcastCaptions(done: (captions: StreamCaption[]) => boolean): Promise<StreamCaption[]> {
  const began = Date.now();
  for (;;) {
    const files = await rtmp!.recordings();
    const captions = files.length === 0 ? [] : (await captionsOfFlv(files.at(-1)!)).captions;
    if (done(captions) || Date.now() - began > 20_000) return captions;
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('OBS not there: said once, lines wait; at the end they are counted unsent (no OBS needed)', async () => {
  const port = await freePort();
  const sink = await obsCaptions({
    url: `ws://127.0.0.1:${port}`,
    endTimeoutMs: 200,
    reconnect: { baseMs: 50, maxMs: 100 },
  });
  const { warnings, delivered } = collectDeliveries(sink);
  sink.write(utterance('Nobody listens on this port.', 0));
  while (warnings.length === 0) await once(sink, 'warning');
  assert.equal(warnings[0]!.code, 'ERR_OBS_UNREACHABLE');
  assert.match(
    warnings[0]!.message,
    /cannot reach OBS at ws:\/\/127\.0\.0\.1:\d+\/: .*ECONNREFUSED.*; retrying/,
  );
  assert.equal(sink.stats().pending, 1);
  await endAndWait(sink, []);
  assert.equal(delivered.length, 0);
  assert.equal(sink.stats().undelivered.unsent, 1);
  assert.equal(sink.stats().pending, 0);
  assert.equal(warnings.length, 1, 'said once, however many attempts');
});

test('caption --obs: bad usage is exit 2 before anything starts (no OBS needed)', async () => {
  for (const [args, message] of [
    [['--obs', 'http://127.0.0.1:4455'], /--obs must be obs-websocket's address/],
    [['--obs-password-file', join(root, 'pw')], /--obs-password-file goes with --obs/],
    [['--obs', 'ws://127.0.0.1:4455', '--language', 'ar'], /no Arabic characters/],
    [
      ['--obs', 'ws://127.0.0.1:4455', '--obs-password-file', join(root, 'no-such-file')],
      /cannot read --obs-password-file: ENOENT/,
    ],
  ] as const) {
    const run = await runCli(['caption', 'sine=frequency=300', '--input-format', 'lavfi', ...args]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, message);
  }
});

test('a wrong or missing password: ERR_OBS_AUTH, and the password is in no message', async (t) => {
  if (missing) return t.skip(missing);
  const wrong = 'not-the-password-4f9a';
  const err = await obsCaptions({ url: studio!.url, password: wrong }).then(
    () => assert.fail('connected with a wrong password'),
    (e: CaptionOutputError) => e,
  );
  assert.equal(err.code, 'ERR_OBS_AUTH');
  assert.match(err.message, /refused the password/);
  assert.ok(!inspect(err).includes(wrong) && !inspect(err).includes(studio!.password));
  const none = await obsCaptions({ url: studio!.url }).then(
    () => assert.fail('connected without a password'),
    (e: CaptionOutputError) => e,
  );
  assert.equal(none.code, 'ERR_OBS_AUTH');
  assert.match(none.message, /asks for a password/);
});

test('OBS not streaming: nothing is sent, it is said once, and every line is counted', async (t) => {
  if (missing) return t.skip(missing);
  const operator = await studio!.operator();
  // The premise: OBS refuses captions while it does not stream.
  await assert.rejects(operator.call('SendStreamCaption', { captionText: 'premise' }), { code: 501 });
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const timersBefore = timers();
  const sink = await obsCaptions({ url: studio!.url, password: studio!.password });
  const { warnings, delivered } = collectDeliveries(sink);
  await endAndWait(sink, [
    utterance('Nobody is watching this yet.', 0),
    utterance('Nor this second one, which runs long enough for two lines.', 3),
  ]);
  const stats = sink.stats();
  assert.equal(delivered.length, 0);
  assert.equal(stats.captions, 0);
  assert.ok(stats.made >= 3);
  assert.equal(stats.undelivered['not-streaming'], stats.made);
  assert.equal(stats.pending, 0);
  assert.deepEqual(
    warnings.map((w) => w.code),
    ['ERR_OBS_NOT_STREAMING'],
  );
  await once(sink, 'close');
  assert.equal(timers(), timersBefore, 'ended, it leaves no timer behind (the end would hold the process)');
});

test('streaming: every word arrives in the broadcast as CEA-608, in rolling lines of at most 32 characters', async (t) => {
  if (missing) return t.skip(missing);
  const operator = await studio!.operator();
  await startStreaming(operator);
  const sink = await obsCaptions({ url: studio!.url, password: studio!.password });
  const { warnings, delivered } = collectDeliveries(sink);
  // A burst (several lines at once: each caption carries two new ones), then one line alone,
  // which rolls up under the line before it.
  const burst = [
    utterance('Good evening and welcome to the late news from the river city.', 0, 'SPEAKER_00'),
    utterance('Storms crossed the valley this afternoon, closing one café.', 4, 'SPEAKER_01'),
    utterance(
      'Officials called it Supercalifragilisticexpialidociously-unprecedented weather.',
      8,
      'SPEAKER_01',
    ),
  ];
  for (const e of burst) sink.write(e);
  while (sink.stats().pending > 0) await once(sink, 'delivered');
  // Two lines OBS's encoder would write with its doubled End Of Caption split across two
  // messages (a decoder then flips back to the caption before): the second goes alone.
  for (const text of ['great seven good ten', 'report two old before first new']) {
    sink.write(utterance(text, 11, 'SPEAKER_01'));
    while (sink.stats().pending > 0) await once(sink, 'delivered');
  }
  await endAndWait(sink, [utterance('Straße über Ålesund مرحبا ends.', 14, 'SPEAKER_00')]);
  const stats = sink.stats();
  assert.equal(stats.delivered, stats.made, JSON.stringify(stats));
  assert.equal(stats.pending, 0);
  assert.equal(stats.unshownCharacters, 5, 'the Arabic word cannot be shown in 608');
  assert.deepEqual(
    warnings.map((w) => w.code),
    ['ERR_OBS_UNSHOWN_CHARACTERS'],
  );
  const last = delivered.at(-1)!.text;
  const captions = await broadcastCaptions((c) => c.some((x) => x.lines.includes(last)));
  await stopStreaming(operator);

  // What OBS broadcast is what the output delivered, line for line, in order.
  const broadcast = newLines(captions);
  assert.deepEqual(
    broadcast,
    delivered.map((d) => d.text),
  );
  for (const c of captions) {
    assert.ok(c.lines.length <= 2, `at most 2 rows: ${JSON.stringify(c.lines)}`);
    for (const line of c.lines) assert.ok(line.length <= 32, `a row of at most 32 columns: ${line}`);
    // OBS's encoding is the one the output reckons with, and never ends split.
    assert.equal(c.entries, obsCaptionEncoding(c.lines).entries, JSON.stringify(c.lines));
    assert.equal(obsCaptionEncoding(c.lines).splitEnd, false);
  }
  assert.ok(captions.some((c) => c.lines.join('|') === 'report two old before first new'));
  assert.ok(obsCaptionEncoding(['great seven good ten', 'report two old before first new']).splitEnd);
  // Roll-up: the last caption, one new line, keeps the line before it on top.
  assert.deepEqual(captions.at(-1)!.lines, [captions.at(-2)!.lines.at(-1), '>> Straße über Ålesund ends.']);
  // Every word, in order, a new speaker marked >> (608 convention); the long word cut, not lost.
  const expected =
    'Good evening and welcome to the late news from the river city. >> Storms crossed the valley this afternoon, closing one café. Officials called it Supercalifragilisticexpialidociously-unprecedented weather. great seven good ten report two old before first new >> Straße über Ålesund ends.';
  assert.equal(broadcast.join(' ').replace(/\s+/g, ''), expected.replace(/\s+/g, ''));
});

test('OBS restarts: the output says it lost OBS, reconnects by itself, and captions go on', async (t) => {
  if (missing) return t.skip(missing);
  let operator = await studio!.operator();
  await startStreaming(operator);
  const sink = await obsCaptions({
    url: studio!.url,
    password: studio!.password,
    reconnect: { baseMs: 200, maxMs: 1000 },
  });
  const { warnings, delivered } = collectDeliveries(sink);
  sink.write(utterance('Before the restart.', 0));
  while (delivered.length < 1) await once(sink, 'delivered');

  await studio!.stop();
  while (!warnings.some((w) => w.code === 'ERR_OBS_UNREACHABLE')) await once(sink, 'warning');
  assert.equal(sink.stats().connected, false);
  sink.write(utterance('While OBS is away.', 3));

  await studio!.start();
  operator = await studio!.operator();
  await startStreaming(operator);
  while (sink.stats().reconnections < 1 || sink.stats().streaming !== true)
    await new Promise((r) => setTimeout(r, 100));
  sink.write(utterance('After the restart, captions flow again.', 6));
  await new Promise<void>((resolve) => sink.end(resolve));
  const stats = sink.stats();
  assert.equal(stats.reconnections, 1);
  assert.ok(
    delivered.some((d) => d.text === 'After the restart, captions flow'),
    JSON.stringify(delivered),
  );
  // The line written while OBS was away is accounted for: delivered, or not streaming yet.
  const { 'not-streaming': notStreaming, refused, overflow, unsent } = stats.undelivered;
  assert.equal(stats.made, stats.delivered + notStreaming + refused + overflow + unsent);
  assert.equal(refused + overflow + unsent, 0);
  const last = delivered.at(-1)!.text;
  const captions = await broadcastCaptions((c) => c.some((x) => x.lines.includes(last)));
  await stopStreaming(operator);
  assert.ok(
    newLines(captions).join(' ').includes('After the restart, captions flow again.'),
    JSON.stringify(captions),
  );
});

test('OBS stops answering: the output says so, waits on nothing, and goes on once OBS answers again', async (t) => {
  if (missing) return t.skip(missing);
  const operator = await studio!.operator();
  await startStreaming(operator);
  // Between the output and OBS, a link that can hang (OBS itself keeps streaming).
  const link = await hangingLink(Number(new URL(studio!.url).port));
  t.after(() => link.close());
  const sink = await obsCaptions({
    url: link.url,
    password: studio!.password,
    timeoutMs: 1000,
    reconnect: { baseMs: 200, maxMs: 500 },
  });
  const { warnings, delivered } = collectDeliveries(sink);
  sink.write(utterance('Before OBS went quiet.', 0));
  while (delivered.length < 1) await once(sink, 'delivered');
  link.hang();
  sink.write(utterance('While OBS says nothing.', 3));
  while (!warnings.some((w) => w.code === 'ERR_OBS_UNREACHABLE')) await once(sink, 'warning');
  assert.match(warnings.at(-1)!.message, /lost the connection to OBS .*did not answer in 1000 ms/);
  assert.equal(sink.stats().connected, false);
  link.resume();
  while (sink.stats().reconnections < 1) await new Promise((r) => setTimeout(r, 100));
  sink.write(utterance('OBS answers again.', 6));
  await new Promise<void>((resolve) => sink.end(resolve));
  const stats = sink.stats();
  assert.equal(stats.delivered, stats.made, JSON.stringify(stats));
  assert.deepEqual(
    delivered.map((d) => d.text),
    ['Before OBS went quiet.', 'While OBS says nothing.', 'OBS answers again.'],
  );
  const captions = await broadcastCaptions((c) => c.some((x) => x.lines.includes('OBS answers again.')));
  await stopStreaming(operator);
  assert.ok(newLines(captions).includes('While OBS says nothing.'), JSON.stringify(captions));
});

test('caption --obs: the words of the captions file are the words in the broadcast', async (t) => {
  if (missing) return t.skip(missing);
  const operator = await studio!.operator();
  await startStreaming(operator);
  const wav = join(root, 'news.wav');
  await writeFile(
    wav,
    await speechWav('Good evening. Here is the news at nine. That is all.', { pauseMs: 500 }),
  );
  const passwordFile = join(root, 'obs-password');
  await writeFile(passwordFile, `${studio!.password}\n`);
  const out = join(root, 'news.vtt');
  const run = await runCli([
    'caption',
    wav,
    '--realtime',
    '--port',
    '0',
    '--out',
    out,
    '--obs',
    studio!.url,
    '--obs-password-file',
    passwordFile,
  ]);
  assert.equal(run.code, 0, run.stderr);
  assert.ok(!run.stderr.includes(studio!.password) && !run.stdout.includes(studio!.password));
  const summary = /OBS: (\d+) of (\d+) lines delivered/.exec(run.stderr);
  assert.ok(summary && summary[1] === summary[2] && Number(summary[1]) > 0, run.stderr);
  const words = await vttWords(out);
  const captions = await broadcastCaptions((c) => {
    const seen = newLines(c).join(' ').split(/\s+/);
    return seen.length >= words.length && seen.at(-1) === words.at(-1);
  });
  await stopStreaming(operator);
  assert.deepEqual(newLines(captions).join(' ').split(/\s+/), words);
});
