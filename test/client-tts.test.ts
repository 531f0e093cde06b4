import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IncompleteStreamError, SpeechServiceError } from '../src/index.ts';
import { startService } from './helpers/service.ts';

const { emulator, client } = await startService();

test('TTS over HTTP gives 16 kHz PCM; longer text, longer audio', async () => {
  const short = await client.tts.synthesizeToBuffer({ text: 'Hello.' });
  const long = await client.tts.synthesizeToBuffer({
    text: 'Hello. This sentence is quite a bit longer than the first one.',
  });
  assert.equal(short.sampleRate, 16000);
  assert.ok(short.pcm.length > 0 && short.pcm.length % 2 === 0);
  assert.ok(long.pcm.length > short.pcm.length);
});

test('TTS over Socket.IO gives playable 24 kHz PCM', async () => {
  const out = await client.tts.synthesizeToBuffer({ text: 'Hello from the socket.', transport: 'socketio' });
  assert.equal(out.sampleRate, 24000);
  assert.ok(out.pcm.length > 0 && out.pcm.length % 2 === 0);
});

test('listVoices returns the seven voice profiles; a listed voice synthesizes', async () => {
  const voices = await client.tts.listVoices();
  assert.equal(voices.length, 7);
  const out = await client.tts.synthesizeToBuffer({ text: 'Hi', voiceId: voices[0]!.id });
  assert.ok(out.pcm.length > 0);
});

test('an unknown voice is 400 TTS_VOICE_NOT_FOUND, not retried', async () => {
  const before = emulator.stats().requests['tts.http'];
  await assert.rejects(
    client.tts.synthesize({ text: 'Hi', voiceId: '1b4e28ba-2fa1-41d2-883f-0016d3cca427' }),
    {
      status: 400,
      code: 'TTS_VOICE_NOT_FOUND',
    },
  );
  assert.equal(emulator.stats().requests['tts.http'] - before, 1);
});

test('pre-flight: text over the tier limit fails before anything is sent', async () => {
  const before = emulator.stats().requests['tts.http'];
  await assert.rejects(client.tts.synthesize({ text: 'a'.repeat(501) }), (err: unknown) => {
    return (
      err instanceof SpeechServiceError &&
      err.status === 422 &&
      err.code === 'CHARACTER_COUNT_EXCEEDED' &&
      err.origin === 'local'
    );
  });
  await assert.rejects(client.tts.synthesize({ text: '   ' }), { code: 'VALIDATION_REQUIRED_FIELD' });
  assert.equal(emulator.stats().requests['tts.http'], before);
});

test('a TTS body truncated before its final frame is an error on the audio stream', async () => {
  const fault = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'truncateTts', afterBytes: 3000 },
  });
  const synthesis = await client.tts.synthesize({ text: 'This audio will be cut short by the emulator.' });
  const err = await (async () => {
    for await (const _ of synthesis.audio);
  })().catch((e: unknown) => e);
  fault.remove();
  assert.ok(err instanceof IncompleteStreamError, String(err));
});

test('429 concurrency is waited out; a 503 before output is retried with a fresh id', async () => {
  const f1 = emulator.faults.add({
    operation: 'tts.http',
    times: 1,
    action: { type: 'status', status: 429, code: 'CONCURRENCY_LIMIT_EXCEEDED', retryAfter: 0.05 },
  });
  const f2 = emulator.faults.add({
    operation: 'tts.http',
    nth: 2,
    action: { type: 'status', status: 503, code: 'TTS_MODERATION_UNAVAILABLE' },
  });
  const out = await client.tts.synthesizeToBuffer({ text: 'Eventually this works.' });
  f1.remove();
  f2.remove();
  assert.ok(out.pcm.length > 0);
});
