import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inspect } from 'node:util';
import fc from 'fast-check';
import { ERROR_CODES, errorFromResponse, SpeechpipeError, SpeechServiceError } from '../src/index.ts';
import { unitOfBound } from '../src/protocol/error-codes.ts';
import {
  localServiceError,
  MAX_RETRY_AFTER_MS,
  parseRetryAfter,
  REDACTED,
  redactSecrets,
} from '../src/protocol/errors.ts';

const NOW = Date.parse('2026-11-22T10:00:00.000Z');

test('a service error body becomes a typed error with every field', () => {
  const err = errorFromResponse({
    status: 413,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      error: 'payload_too_large',
      code: 'PAYLOAD_TOO_LARGE',
      detail: 'request body too large',
      retryable: false,
      timestamp: '2026-11-22T10:00:00.000Z',
      request_id: 'req-1',
      job_id: 'job-x',
      data: { limit: 100, observed: 101, unit: 'bytes', bound: 'request_bytes' },
    }),
    operation: 'batch.submit',
  });
  assert.ok(err instanceof SpeechServiceError && err instanceof SpeechpipeError && err instanceof Error);
  assert.equal(err.status, 413);
  assert.equal(err.code, 'PAYLOAD_TOO_LARGE');
  assert.equal(err.retryable, false);
  assert.equal(err.detail, 'request body too large');
  assert.equal(err.requestId, 'req-1');
  assert.equal(err.jobId, 'job-x');
  assert.equal(err.timestamp, '2026-11-22T10:00:00.000Z');
  assert.equal(err.origin, 'service');
  assert.deepEqual(err.limit, { limit: 100, observed: 101, unit: 'bytes', bound: 'request_bytes' });
  assert.match(err.message, /batch\.submit: 413 PAYLOAD_TOO_LARGE: request body too large \(request req-1\)/);
});

test('the batch 429 shape: data.capacity and Retry-After seconds', () => {
  const err = errorFromResponse({
    status: 429,
    headers: new Headers({ 'Retry-After': '7' }),
    body: JSON.stringify({
      error: 'rate_limited',
      code: 'RATE_LIMIT_EXCEEDED',
      detail: 'slow down',
      retryable: true,
      timestamp: '2026-11-22T10:00:00.000Z',
      data: { capacity: 10 },
    }),
  });
  assert.equal(err.code, 'RATE_LIMIT_EXCEEDED');
  assert.equal(err.retryable, true);
  assert.equal(err.retryAfterMs, 7000);
  assert.deepEqual(err.data, { capacity: 10 });
  assert.equal(err.limit, undefined);
});

test('Retry-After as an HTTP date', () => {
  const err = errorFromResponse({
    status: 429,
    headers: { 'retry-after': 'Sun, 22 Nov 2026 10:00:30 GMT' },
    body: '{"code":"CONCURRENCY_LIMIT_EXCEEDED","retryable":true}',
    now: NOW,
  });
  assert.equal(err.retryAfterMs, 30_000);
});

test('parseRetryAfter', () => {
  assert.equal(parseRetryAfter('0'), 0);
  assert.equal(parseRetryAfter(' 120 '), 120_000);
  assert.equal(parseRetryAfter('1.5'), 1500);
  assert.equal(parseRetryAfter('Sun, 22 Nov 2026 09:00:00 GMT', NOW), 0, 'a past date means now');
  assert.equal(parseRetryAfter('-1'), undefined);
  assert.equal(parseRetryAfter('soon'), undefined);
  assert.equal(parseRetryAfter(''), undefined);
  assert.equal(parseRetryAfter(undefined), undefined);
});

test('Retry-After: the three HTTP-date forms are GMT whatever the local time zone', () => {
  const now = Date.UTC(1994, 10, 6, 8, 49, 0);
  const expected = Date.UTC(1994, 10, 6, 8, 49, 37) - now;
  const saved = process.env.TZ;
  try {
    for (const tz of ['America/New_York', 'Asia/Tokyo', 'UTC']) {
      process.env.TZ = tz;
      assert.equal(parseRetryAfter('Sun, 06 Nov 1994 08:49:37 GMT', now), expected, `IMF-fixdate in ${tz}`);
      assert.equal(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', now), expected, `RFC 850 in ${tz}`);
      assert.equal(parseRetryAfter('Sun Nov  6 08:49:37 1994', now), expected, `asctime in ${tz}`);
    }
  } finally {
    if (saved === undefined) delete process.env.TZ;
    else process.env.TZ = saved;
  }
  assert.equal(parseRetryAfter('Tue Nov 22 10:00:30 2026', NOW), 30_000, 'asctime with a two-digit day');
  // RFC 850's two-digit year: more than 50 years ahead means the previous century.
  assert.equal(parseRetryAfter('Sunday, 22-Nov-26 10:00:30 GMT', NOW), 30_000);
  assert.equal(parseRetryAfter('Thursday, 22-Nov-90 10:00:00 GMT', NOW), 0, '1990, not 2090');
});

test('Retry-After: loose text is not a date; absurd waits are clamped', () => {
  for (const value of [
    'try 2099',
    'Retry 3',
    'abc 12',
    'in 5 minutes',
    '2026-11-22T10:00:30Z',
    'Sun, 22 Nov 2026 10:00:30 UTC', // HTTP-dates are GMT
    'sun, 22 nov 2026 10:00:30 gmt', // and case-sensitive
    'Sun, 22 Nov 2026 10:00:30', // no zone in the IMF form
    'Sun, 31 Feb 2026 10:00:30 GMT', // no such day
    'Sun, 22 Nov 2026 24:00:30 GMT',
    'Sun,  22 Nov 2026 10:00:30 GMT',
    '+5',
    '1e3',
    '0x10',
    '5 s',
  ]) {
    assert.equal(parseRetryAfter(value, NOW), undefined, value);
  }
  assert.equal(parseRetryAfter('Sun, 22 Nov 2099 10:00:00 GMT', NOW), MAX_RETRY_AFTER_MS);
  assert.equal(parseRetryAfter('99999999', NOW), MAX_RETRY_AFTER_MS);
  assert.equal(MAX_RETRY_AFTER_MS, 3_600_000);
});

test('the missing-key 401 with `message` and without `code`', () => {
  const err = errorFromResponse({
    status: 401,
    body: JSON.stringify({
      error: 'unauthorized',
      message: 'API key missing',
      retryable: false,
      timestamp: 'x',
    }),
  });
  assert.equal(err.code, 'AUTH_UNAUTHORIZED');
  assert.equal(err.retryable, false);
  assert.equal(err.detail, 'API key missing');
});

test('an intermediary HTML 403 page still gives a typed error', () => {
  const err = errorFromResponse({
    status: 403,
    headers: { 'content-type': 'text/html' },
    body: '<html><head><style>p{}</style></head><body><h1>403 Forbidden</h1><p>nginx</p></body></html>',
  });
  assert.equal(err.status, 403);
  assert.equal(err.code, 'HTTP_403');
  assert.equal(err.origin, 'intermediary');
  assert.equal(err.retryable, false);
  assert.match(err.detail!, /403 Forbidden nginx/);
  assert.doesNotMatch(err.detail!, /</);
});

test('an intermediary 502 or empty 503 is retryable', () => {
  assert.equal(errorFromResponse({ status: 502, body: 'Bad Gateway' }).retryable, true);
  const e503 = errorFromResponse({ status: 503, body: '' });
  assert.equal(e503.retryable, true);
  assert.equal(e503.code, 'HTTP_503');
  assert.equal(errorFromResponse({ status: 404, body: '[1,2]' }).origin, 'intermediary');
});

test('decisions never come from `error` or `message`', () => {
  const err = errorFromResponse({
    status: 400,
    body: JSON.stringify({
      error: 'RATE_LIMIT_EXCEEDED',
      message: 'retry later',
      code: 'VALIDATION_INVALID_PARAM',
    }),
  });
  assert.equal(err.code, 'VALIDATION_INVALID_PARAM');
  assert.equal(err.retryable, false);
  const noCode = errorFromResponse({ status: 400, body: JSON.stringify({ error: 'SERVER_INTERNAL' }) });
  assert.equal(noCode.code, 'HTTP_400');
  assert.equal(noCode.retryable, false);
});

test('a JSON body without `code` or `retryable` is not a service body, whatever its `error` says', () => {
  const proxy = errorFromResponse({
    status: 403,
    body: JSON.stringify({ error: 'Forbidden', message: 'blocked by policy', job_id: 'j', data: { a: 1 } }),
  });
  assert.equal(proxy.origin, 'intermediary');
  assert.equal(proxy.code, 'HTTP_403');
  assert.equal(proxy.detail, 'blocked by policy', 'shown for humans');
  assert.equal(proxy.jobId, undefined);
  assert.equal(proxy.data, undefined);
  const other = errorFromResponse({ status: 502, body: '{"upstream":"down"}' });
  assert.equal(other.origin, 'intermediary');
  assert.equal(other.detail, 'response body: {"upstream":"down"}', 'JSON, so not labelled non-JSON');
  assert.match(errorFromResponse({ status: 502, body: 'Bad Gateway' }).detail!, /^non-JSON response body: /);
});

test('a missing `retryable` falls back to the catalog for the code', () => {
  assert.equal(
    errorFromResponse({ status: 500, body: '{"code":"TTS_VOICE_RESOLUTION_FAILED"}' }).retryable,
    false,
  );
  assert.equal(
    errorFromResponse({ status: 503, body: '{"code":"SERVER_DEPENDENCY_FAILURE"}' }).retryable,
    true,
  );
});

test('request id falls back to the x-request-id header', () => {
  assert.equal(
    errorFromResponse({ status: 500, headers: { 'x-request-id': 'abc' }, body: '' }).requestId,
    'abc',
  );
});

test('secrets are redacted from detail and message', () => {
  const key = 'sk_live_0123456789abcdef';
  const err = errorFromResponse({
    status: 401,
    body: JSON.stringify({
      code: 'AUTH_UNAUTHORIZED',
      detail: `key ${key} is invalid (${encodeURIComponent(`${key}/x`)})`,
    }),
    secrets: [key, `${key}/x`],
  });
  for (const text of [err.message, err.detail!, JSON.stringify(err), inspect(err), String(err.stack)]) {
    assert.ok(!text.includes(key), text);
  }
  assert.match(err.detail!, /\[redacted\]/);
});

test('localServiceError uses the catalog status and retryability', () => {
  const e = localServiceError('CHARACTER_COUNT_EXCEEDED', 'too long', {
    data: { limit: 1, observed: 2, unit: 'characters', bound: 'tts_input_characters' },
  });
  assert.equal(e.status, 422);
  assert.equal(e.origin, 'local');
  assert.equal(e.retryable, false);
  assert.equal(localServiceError('VALIDATION_FILE_CORRUPT', 'x', { status: 422 }).status, 422);
});

test('the catalog covers every code of the interface with its status', () => {
  assert.equal(Object.keys(ERROR_CODES).length, 32);
  assert.deepEqual(ERROR_CODES.SESSION_IDLE_TIMEOUT, { status: 408, retryable: false });
  assert.deepEqual(ERROR_CODES.SESSION_EXPIRED, { status: 409, retryable: false });
  assert.deepEqual(ERROR_CODES.SESSION_BYTE_RATE_EXCEEDED, { status: 429, retryable: true });
  assert.equal(unitOfBound('account_concurrency_tts'), 'operations');
  assert.equal(unitOfBound('session_idle'), 'seconds');
  assert.equal(unitOfBound('nope'), undefined);
});

test('secrets are redacted from every field: jobId, requestId, timestamp and data (nested)', () => {
  const key = 'sk-SECRET-4f1e9a';
  const err = errorFromResponse({
    status: 400,
    body: JSON.stringify({
      code: 'VALIDATION_INVALID_UUID',
      retryable: false,
      detail: 'bad id',
      job_id: key,
      request_id: `req-${key}`,
      timestamp: `2026-11-22T10:00:00.000Z ${key}`,
      data: { echoed: [{ value: `x${key}x` }, key], [key]: 1, limit: 1 },
    }),
    secrets: [key],
  });
  for (const text of [
    JSON.stringify(err),
    inspect(err),
    inspect(err, { depth: Number.POSITIVE_INFINITY, showHidden: true }),
    err.message,
    String(err.stack),
  ]) {
    assert.ok(!text.includes(key), text);
  }
  assert.equal(err.jobId, '[redacted]');
  assert.equal(err.requestId, 'req-[redacted]');
  assert.equal(err.timestamp, '2026-11-22T10:00:00.000Z [redacted]');
  assert.deepEqual(err.data, {
    // Glued to letters, the key takes the word it is in: nothing of it is left.
    echoed: [{ value: '[redacted]' }, '[redacted]'],
    '[redacted]': 1,
    limit: 1,
  });
  const fromHeader = errorFromResponse({ status: 502, headers: { 'x-request-id': key }, secrets: [key] });
  assert.equal(fromHeader.requestId, '[redacted]');
  const direct = new SpeechServiceError({
    status: 500,
    code: 'SERVER_INTERNAL',
    retryable: true,
    jobId: key,
    data: { nested: { deeper: [key] } },
    secrets: [key],
  });
  assert.ok(!inspect(direct, { depth: Number.POSITIVE_INFINITY }).includes(key));
  assert.ok(!JSON.stringify(direct).includes(key));
});

/** A key as deployments issue them, and any other of 8 characters or more (never a line break). */
const apiKey = fc.oneof(
  fc.stringMatching(/^(sk|key|test)[-_][A-Za-z0-9]{8,32}$/),
  fc
    .string({ unit: 'grapheme', minLength: 8, maxLength: 24 })
    .filter((k) => [...k].length >= 8 && !/[\r\n]/.test(k) && k.trim() !== ''),
);
/** The forms an echo of the key can take in a message: as sent, URL-encoded, escaped in JSON. */
const forms = (key: string) => [key, encodeURIComponent(key), JSON.stringify(key).slice(1, -1)];

test('redaction: no form of the key is left, however it is echoed and whatever is glued to it', () => {
  fc.assert(
    fc.property(
      apiKey,
      fc.array(fc.tuple(fc.string({ unit: 'grapheme', maxLength: 12 }), fc.nat(2)), {
        minLength: 1,
        maxLength: 4,
      }),
      fc.string({ unit: 'grapheme', maxLength: 12 }),
      (key, echoes, tail) => {
        const text = echoes.map(([before, form]) => before + forms(key)[form]).join('') + tail;
        const out = redactSecrets(text, [key]);
        // The marker itself may spell a key ("redacted", "d]-x..."): it is not the key's text.
        const shown = out.split(REDACTED).join('\u0000');
        for (const form of forms(key))
          assert.ok(!shown.includes(form), `${JSON.stringify(form)} in ${JSON.stringify(out)}`);
      },
    ),
    { numRuns: 500 },
  );
});

test('redaction: the key goes as a token, and no other word is touched or cut', () => {
  const word = fc.stringMatching(/^[\p{L}\p{N}_]{1,10}$/u);
  const gap = fc.stringMatching(/^[ .,:;=()"'/-]{1,3}$/);
  fc.assert(
    fc.property(
      fc.stringMatching(/^[A-Za-z0-9][-_A-Za-z0-9]{6,30}[A-Za-z0-9]$/),
      fc.array(fc.tuple(gap, fc.oneof(word, fc.constant(null))), { maxLength: 12 }),
      (key, parts) => {
        // Words and gaps, the key standing alone where a part is null.
        const pieces = parts.flatMap(([g, w]) => [g, w ?? key]);
        fc.pre(!pieces.some((p) => p !== key && forms(key).some((f) => p.includes(f))));
        const expected = pieces.map((p) => (p === key ? REDACTED : p)).join('');
        assert.equal(redactSecrets(pieces.join(''), [key]), expected);
      },
    ),
    { numRuns: 500 },
  );
  // Glued to letters on either side, the key takes its whole word, never part of it.
  fc.assert(
    fc.property(
      fc.stringMatching(/^[A-Za-z0-9][-_A-Za-z0-9]{6,30}[A-Za-z0-9]$/),
      fc.stringMatching(/^[\p{L}\p{N}_]{0,6}$/u),
      fc.stringMatching(/^[\p{L}\p{N}_]{0,6}$/u),
      (key, before, after) => {
        assert.equal(redactSecrets(`(${before}${key}${after}) ok`, [key]), '([redacted]) ok');
      },
    ),
  );
  // Messages the client builds around Socket.IO's and undici's texts keep every word.
  const key = 'sk_live_4f1e9a2b';
  assert.equal(
    redactSecrets('Socket.IO connection failed (websocket error)', [key]),
    'Socket.IO connection failed (websocket error)',
  );
  assert.equal(
    redactSecrets(`key "${key}" rejected; key=${key}&x`, [key]),
    'key "[redacted]" rejected; key=[redacted]&x',
  );
  // Glued by an encoding (%3D is "=", \n a line break in JSON text): the glue goes with it.
  assert.equal(redactSecrets(`q=key%3D${key} "a\\n${key}"`, [key]), 'q=key%[redacted] "a\\[redacted]"');
});
