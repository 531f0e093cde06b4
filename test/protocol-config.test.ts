import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import {
  ApiKey,
  bytesToUuid,
  ConfigError,
  DEFAULT_LIMITS,
  idToString,
  isUuid,
  randomUuid,
  resolveConfig,
  resolveLimits,
  resolveSocketEvents,
  SOCKET_EVENTS,
  ttsInputLimit,
  uuidToBytes,
} from '../src/index.ts';

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
    apiKey: 'other',
    apiPath: '/io/',
  });
  assert.equal(fromOptions.apiUrl, 'http://127.0.0.1:8080/base');
  assert.equal(fromOptions.origin, 'http://127.0.0.1:8080', 'Origin is scheme and host only');
  assert.equal(fromOptions.socketPath, '/io');
  assert.equal(fromOptions.apiKey.reveal(), 'other');
  assert.equal(resolveConfig({ env: { API_KEY: KEY, API_URL: 'http://h' } }).socketPath, '/socket.io');
  assert.equal(resolveConfig({ env, legacySocketPath: true }).socketPath, '/realtime/socket.io');
  assert.equal(resolveConfig({ env, realtimeHttpPrefix: '/' }).realtimeHttpPrefix, '');
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
  assert.throws(() => resolveLimits({ sessionExpirySec: 0 }), RangeError);
  assert.equal(ttsInputLimit(l, undefined), 500);
  assert.equal(ttsInputLimit(l, 'standard'), 1000);
  assert.equal(ttsInputLimit(l, 'toString'), 500, 'prototype keys are not tiers');
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
