import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import {
  ApiKey,
  ConfigError,
  DEFAULT_LIMITS,
  InvalidArgumentError,
  type LimitOverrides,
  resolveConfig,
  resolveLimits,
  resolveSocketEvents,
  SOCKET_EVENTS,
  ttsInputLimit,
} from '../src/index.ts';
import { bytesToUuid, idToString, isUuid, randomUuid, uuidToBytes } from '../src/protocol/uuid.ts';

const KEY = 'sk_test_5f2a9c0d1e8b7a6f';

test('resolveConfig reads options first, then API_KEY, API_URL, API_PATH', () => {
  const env = { API_KEY: KEY, API_URL: 'https://speech.example.com/', API_PATH: '/custom/socket' };
  const fromEnv = resolveConfig({ env });
  assert.equal(fromEnv.apiUrl, 'https://speech.example.com');
  assert.equal(fromEnv.apiKey.reveal(), KEY);
  assert.equal(fromEnv.socketPath, '/custom/socket');
  assert.equal(fromEnv.origin, 'https://speech.example.com');
  assert.equal(fromEnv.realtimeHttpPrefix, '/realtime/http');
  const fromOptions = resolveConfig({
    env,
    apiUrl: 'http://127.0.0.1:8080/base/',
    apiKey: 'other-key',
    apiPath: '/io/',
  });
  assert.equal(fromOptions.apiUrl, 'http://127.0.0.1:8080/base');
  assert.equal(fromOptions.origin, 'http://127.0.0.1:8080', 'Origin is scheme and host only');
  assert.equal(fromOptions.socketPath, '/io');
  assert.equal(fromOptions.apiKey.reveal(), 'other-key');
  assert.equal(resolveConfig({ env: { API_KEY: KEY, API_URL: 'http://h' } }).socketPath, '/socket.io');
  assert.equal(
    resolveConfig({ env: { API_KEY: KEY, API_URL: 'http://h', API_PATH: '' } }).socketPath,
    '/socket.io',
    'an empty API_PATH is unset, as for API_URL and API_KEY',
  );
  assert.equal(resolveConfig({ env, apiPath: '' }).socketPath, '/custom/socket', 'an empty option is unset');
  assert.equal(resolveConfig({ env, legacySocketPath: true }).socketPath, '/realtime/socket.io');
  assert.equal(resolveConfig({ env, realtimeHttpPrefix: '/' }).realtimeHttpPrefix, '');
});

test('a key too short to be a key is refused, saying why and not what it is', () => {
  for (const key of ['k', 'secret', 'sk-1234', '\u{1F511}'.repeat(7)]) {
    assert.throws(
      () => resolveConfig({ env: { API_URL: 'http://h', API_KEY: key } }),
      (err: unknown) =>
        err instanceof ConfigError &&
        err.message ===
          `the API key must have at least 8 characters, not ${[...key].length}: a shorter one could not be kept out of the words of error messages` &&
        (key.length < 2 || !err.message.includes(key)),
      key,
    );
    assert.throws(() => new ApiKey(key), ConfigError);
  }
  assert.equal(new ApiKey('abcd1234').reveal(), 'abcd1234');
  assert.equal(
    new ApiKey('\u{1F511}'.repeat(8)).reveal(),
    '\u{1F511}'.repeat(8),
    'characters, not UTF-16 units',
  );
});

test('resolveConfig errors are typed and never contain the key', () => {
  const cases: Record<string, string | undefined>[] = [
    { API_KEY: KEY },
    { API_URL: 'https://x' },
    { API_URL: 'ftp://x', API_KEY: KEY },
    { API_URL: `https://user:${KEY}@x`, API_KEY: KEY },
    { API_URL: `https://x/?api_key=${KEY}`, API_KEY: KEY },
    { API_URL: 'not a url', API_KEY: KEY },
    { API_URL: 'https://x', API_KEY: KEY, API_PATH: 'socket.io' },
    { API_URL: 'https://x', API_KEY: '   ' },
  ];
  for (const env of cases) {
    assert.throws(
      () => resolveConfig({ env }),
      (err: unknown) => err instanceof ConfigError && err.code === 'ERR_CONFIG' && !err.message.includes(KEY),
      JSON.stringify(env),
    );
  }
});

test('the key is redacted in toString, JSON and util.inspect', () => {
  const config = resolveConfig({ env: { API_KEY: KEY, API_URL: 'https://x' } });
  for (const text of [
    String(config.apiKey),
    `${config.apiKey}`,
    JSON.stringify(config),
    inspect(config),
    inspect(config, { depth: 9, showHidden: true }),
  ]) {
    assert.ok(!text.includes(KEY), text);
  }
  assert.match(JSON.stringify(config), /"apiKey":"\[redacted\]"/);
  assert.equal(new ApiKey(KEY).reveal(), KEY);
  assert.throws(() => new ApiKey('a\r\nb'), ConfigError);
});

test('limits: defaults from the interface, overridable', () => {
  assert.equal(DEFAULT_LIMITS.batchRequestBytes, 512 * 1024 * 1024);
  assert.equal(DEFAULT_LIMITS.batchAudioDurationSec, 4 * 3600);
  assert.equal(DEFAULT_LIMITS.fastAudioBytes, 64 * 1024 * 1024);
  assert.equal(DEFAULT_LIMITS.realtimeAsrFrameBytes, 16 * 1024 * 1024);
  assert.equal(DEFAULT_LIMITS.sessionExpirySec, 60);
  assert.equal(DEFAULT_LIMITS.accountConcurrency.tts, 4);
  assert.equal(DEFAULT_LIMITS.accountConcurrency.realtime_asr, 8);
  const l = resolveLimits({ fastAudioBytes: 10, accountConcurrency: { tts: 1 } });
  assert.equal(l.fastAudioBytes, 10);
  assert.equal(l.accountConcurrency.tts, 1);
  assert.equal(l.accountConcurrency.batch, DEFAULT_LIMITS.accountConcurrency.batch);
  assert.throws(() => resolveLimits({ sessionExpirySec: 0 }), InvalidArgumentError);
  assert.equal(ttsInputLimit(l, undefined), 500);
  assert.equal(ttsInputLimit(l, 'standard'), 1000);
  assert.equal(ttsInputLimit(l, 'toString'), 500, 'prototype keys are not tiers');
});

test("DEFAULT_LIMITS is the interface's Limits table", () => {
  assert.deepEqual(DEFAULT_LIMITS, {
    batchRequestBytes: 536_870_912, // 512 MiB
    batchAudioDurationSec: 14_400, // 4 hours
    batchFileParts: 1,
    batchMultipartParts: 8,
    batchUnvalidatableTailBytes: 524_288,
    fastAudioBytes: 67_108_864, // 64 MiB
    fastAudioDurationSec: 1_800,
    realtimeAsrFrameBytes: 16_777_216, // 16 MiB
    realtimeDiarizationFrameBytes: 16_777_216,
    sessionAudioDurationSec: 14_400,
    sessionAudioRateRealtime: 4, // 4 times real time sustained
    sessionAudioRateBurstBytes: 16_777_216, // with a 16 MiB burst
    sessionExpirySec: 60,
    sessionIdleSec: 900, // the example body's limit
    nonFinalResponseWindowMs: 2_000,
    ttsRequestBytes: 16_777_216,
    ttsInputCharacters: { free: 500, standard: 1_000, enterprise: 1_000 },
    ttsVoiceReferenceTextCharacters: 500,
    ttsVoiceReferenceCount: 1,
    ttsVoiceReferenceBytes: 2_097_152, // 2 MiB
    ttsVoiceReferenceDurationSec: 15,
    ttsSynthesisDeadlineMs: 25_000,
    // The interface's examples (TTS 4, realtime ASR 8); batch, fast and diarization: DECISIONS.
    accountConcurrency: { batch: 8, fast: 8, realtime_asr: 8, diarization: 8, tts: 4 },
  });
});

test('resolveLimits: undefined keeps the default; unknown keys and fractional counts are refused', () => {
  const kept = resolveLimits({
    fastAudioBytes: undefined,
    ttsInputCharacters: { free: undefined, standard: 700 },
    accountConcurrency: undefined,
  } as LimitOverrides);
  assert.equal(kept.fastAudioBytes, DEFAULT_LIMITS.fastAudioBytes);
  assert.deepEqual(kept.ttsInputCharacters, { free: 500, standard: 700, enterprise: 1000 });
  assert.deepEqual(kept.accountConcurrency, DEFAULT_LIMITS.accountConcurrency);
  // Seconds, milliseconds and the real-time multiple may be fractional.
  const fine = resolveLimits({
    sessionExpirySec: 0.5,
    sessionAudioRateRealtime: 0.01,
    nonFinalResponseWindowMs: 1.5,
  });
  assert.equal(fine.sessionExpirySec, 0.5);
  assert.equal(fine.sessionAudioRateRealtime, 0.01);
  for (const bad of [
    { fastAudioByte: 10 },
    { toString: 1 },
    { accountConcurrency: { gpu: 1 } },
    { ttsInputCharacters: { platinum: 5 } },
    { batchFileParts: 1.5 },
    { fastAudioBytes: 1000.5 },
    { ttsInputCharacters: { free: 10.5 } },
    { accountConcurrency: { tts: 0.5 } },
    { accountConcurrency: 4 },
    { sessionIdleSec: Number.POSITIVE_INFINITY },
    { sessionIdleSec: '900' },
    { sessionIdleSec: -1 },
  ]) {
    assert.throws(
      () => resolveLimits(bad as unknown as LimitOverrides),
      InvalidArgumentError,
      JSON.stringify(bad),
    );
  }
  assert.throws(
    () => resolveLimits({}, { TTS_MAX_INPUT_CHARACTERS_STANDARD: '7.5' }),
    (err: unknown) => err instanceof ConfigError && /TTS_MAX_INPUT_CHARACTERS_STANDARD/.test(err.message),
  );
  assert.equal(resolveLimits(undefined).batchFileParts, 1);
});

test('UUID helpers convert both ways', () => {
  const id = randomUuid();
  assert.ok(isUuid(id));
  assert.equal(bytesToUuid(uuidToBytes(id)), id);
  assert.equal(idToString(uuidToBytes(id)), id);
  assert.equal(idToString(id.toUpperCase()), id);
  assert.ok(!isUuid('3f2504e04f8941d39a0c0305e82c3301'));
});

test('Socket.IO events are one overridable table', () => {
  assert.equal(SOCKET_EVENTS.audioStream, 'audio_stream');
  assert.equal(SOCKET_EVENTS.transcriptionResult, 'transcription_result');
  const events = resolveSocketEvents({ ttsAudio: 'tts_chunk' });
  assert.equal(events.ttsAudio, 'tts_chunk');
  assert.equal(events.ttsRequest, 'tts_request');
});
