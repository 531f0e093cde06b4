// Authentication, authorization, admission and routing of the emulator: 401/403 on every HTTP
// operation, the Socket.IO handshake, per-key request rate, per-account concurrency, wrong
// methods and unknown paths. Driven with plain HTTP and socket.io-client.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { io } from 'socket.io-client';
import { Agent } from 'undici';
import { type Emulator, type EmulatorKey, startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import {
  call,
  connectSocket,
  filePart,
  MULTIPART_TYPE,
  multipart,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';

const FULL: EmulatorKey = {
  key: 'key-full',
  account: 'acme',
  tier: 'standard',
  capabilities: ['batch', 'realtime_asr', 'diarization', 'tts'],
};
const BATCH_ONLY: EmulatorKey = { key: 'key-batch', account: 'acme', tier: 'free', capabilities: ['batch'] };
const NOTHING: EmulatorKey = { key: 'key-none', account: 'other', tier: 'free', capabilities: [] };

const wav = wavOf(speechPcm([{ speech: 0.5 }]));
const frame = () => encodeFrame({ streamId: uuid(), isStart: true, language: 'en', pcm: Buffer.alloc(3200) });

/** Every HTTP operation: a request that would succeed with the full key. */
const OPERATIONS: {
  name: string;
  method: 'GET' | 'POST';
  path: () => string;
  body?: () => Buffer;
  type?: string;
}[] = [
  {
    name: 'batch.submit',
    method: 'POST',
    path: () => '/v1/transcribe/en',
    body: () => multipart([filePart(wav)]),
    type: MULTIPART_TYPE,
  },
  { name: 'batch.get', method: 'GET', path: () => `/v1/transcribe/${uuid()}` },
  { name: 'batch.getLegacy', method: 'GET', path: () => `/v1/transcribe/${uuid()}/en` },
  {
    name: 'fast.http',
    method: 'POST',
    path: () => `/http/stt?id=${uuid()}`,
    body: () => multipart([filePart(wav)]),
    type: MULTIPART_TYPE,
  },
  { name: 'stt.http', method: 'POST', path: () => '/http/stt-stream', body: frame },
  { name: 'stt.http (alias)', method: 'POST', path: () => '/realtime/http/realtime-asr', body: frame },
  { name: 'diarization.http', method: 'POST', path: () => '/realtime/http/diarization-stream', body: frame },
  {
    name: 'tts.http',
    method: 'POST',
    path: () => '/realtime/http/tts',
    body: () => Buffer.from(JSON.stringify({ id: uuid(), text: 'hello' })),
    type: 'application/json',
  },
];

let emu: Emulator;
const dispatcher = new Agent();

before(async () => {
  emu = await startEmulator({ keys: [FULL, BATCH_ONLY, NOTHING], tts: { engine: 'synthetic' } });
});
after(async () => {
  await emu.close();
  await dispatcher.close();
});

function send(op: (typeof OPERATIONS)[number], key: string | null) {
  const headers: Record<string, string> = op.type ? { 'content-type': op.type } : {};
  return call(`${emu.url}${op.path()}`, { method: op.method, key, headers, body: op.body?.(), dispatcher });
}

function assertErrorBody(body: Record<string, unknown>, code: string) {
  assert.equal(body.code, code);
  assert.equal(typeof body.error, 'string');
  assert.equal(typeof body.detail, 'string');
  assert.equal(typeof body.retryable, 'boolean');
  assert.match(String(body.timestamp), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(typeof body.request_id, 'string');
}

describe('HTTP authentication on every operation', () => {
  for (const op of OPERATIONS) {
    test(`${op.name}: missing, empty and invalid keys are 401; a key without the capability is 403`, async () => {
      const missing = await send(op, null);
      assert.equal(missing.status, 401);
      const m = missing.json() as Record<string, unknown>;
      assertErrorBody(m, 'AUTH_UNAUTHORIZED');
      assert.equal(typeof m.message, 'string', 'the missing-key 401 carries message');
      assert.equal(m.retryable, false);

      const empty = await send(op, '');
      assert.equal(empty.status, 401);
      assert.equal(typeof (empty.json() as Record<string, unknown>).message, 'string');

      const invalid = await send(op, 'not-a-key');
      assert.equal(invalid.status, 401);
      const i = invalid.json() as Record<string, unknown>;
      assertErrorBody(i, 'AUTH_UNAUTHORIZED');
      assert.equal(i.message, undefined, 'message only on missing-key errors');

      const forbidden = await send(op, NOTHING.key);
      assert.equal(forbidden.status, 403);
      assertErrorBody(forbidden.json() as Record<string, unknown>, 'AUTH_FORBIDDEN');

      const ok = await send(op, FULL.key);
      assert.ok(
        ok.status === 200 || ok.status === 404,
        `${op.name} with the full key: ${ok.status} ${ok.text}`,
      );
    });
  }

  test('capabilities are per operation: a batch-only key may submit but not stream', async () => {
    const batch = await send(OPERATIONS[0]!, BATCH_ONLY.key);
    assert.equal(batch.status, 200);
    const live = await send(OPERATIONS[4]!, BATCH_ONLY.key);
    assert.equal(live.status, 403);
    assert.equal(emu.stats().rejections.AUTH_FORBIDDEN! >= 1, true);
  });
});

describe('routing', () => {
  test('a wrong method is 405 METHOD_NOT_ALLOWED with Allow; an unknown path is 404', async () => {
    const wrong = await call(`${emu.url}/http/stt-stream`, { method: 'GET', key: FULL.key, dispatcher });
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.allow, 'POST');
    assert.equal((wrong.json() as Record<string, unknown>).code, 'METHOD_NOT_ALLOWED');
    const legacyPost = await call(`${emu.url}/v1/transcribe/${uuid()}/en`, {
      method: 'POST',
      key: FULL.key,
      body: 'x',
      dispatcher,
    });
    assert.equal(legacyPost.status, 405);
    const unknown = await call(`${emu.url}/v2/nothing`, { key: FULL.key, dispatcher });
    assert.equal(unknown.status, 404);
  });

  test('both realtime prefixes reach the same operations', async () => {
    const before = emu.stats().requests['stt.http'];
    for (const path of [
      '/http/stt-stream',
      '/realtime/http/stt-stream',
      '/http/realtime-asr',
      '/realtime/http/realtime-asr',
    ]) {
      const res = await call(`${emu.url}${path}`, { key: FULL.key, body: frame(), dispatcher });
      assert.equal(res.status, 200, path);
    }
    assert.equal(emu.stats().requests['stt.http'] - before, 4);
  });
});

describe('keys', () => {
  test('a key no request could carry, or one listed twice, is refused when the emulator starts', async () => {
    const key = (k: string, account = 'acme'): EmulatorKey => ({ ...FULL, key: k, account });
    // HTTP trims a header value: such a key was announced and then refused with 401 every time.
    for (const bad of [' padded', 'padded\t', 'line\nbreak', 'caf\u00e9']) {
      await assert.rejects(startEmulator({ keys: [key(bad)] }), RangeError, JSON.stringify(bad));
    }
    // The same key in two accounts silently took the last entry's account and capabilities.
    await assert.rejects(
      startEmulator({ keys: [key('twice'), { ...BATCH_ONLY, key: 'twice', account: 'other' }] }),
      /listed twice/,
    );
  });
});

describe('Socket.IO handshake', () => {
  const rejected = async (key: string | undefined, origin?: string | null, path?: string) => {
    const err = (await connectSocket(emu.url, key, { origin, path }).then(
      (s) => {
        s.close();
        return undefined;
      },
      (e: unknown) => e,
    )) as (Error & { data?: Record<string, unknown> }) | undefined;
    assert.ok(err, 'the connection is refused');
    return err.data!;
  };

  test('needs a valid x-api-key', async () => {
    const missing = await rejected(undefined);
    assertErrorBody(missing, 'AUTH_UNAUTHORIZED');
    assert.equal(typeof missing.message, 'string');
    assertErrorBody(await rejected('wrong'), 'AUTH_UNAUTHORIZED');
  });

  test('needs an Origin naming the service', async () => {
    assertErrorBody(await rejected(FULL.key, null), 'AUTH_UNAUTHORIZED');
    assertErrorBody(await rejected(FULL.key, 'http://elsewhere.example'), 'AUTH_UNAUTHORIZED');
  });

  test('an Origin sent twice (Node joins it as "a, a") is that origin; two different ones are refused', async () => {
    const socket = await connectSocket(emu.url, FULL.key, { origin: `${emu.url}, ${emu.url}` });
    socket.close();
    assertErrorBody(await rejected(FULL.key, `${emu.url}, http://elsewhere.example`), 'AUTH_UNAUTHORIZED');
  });

  test('the Host header is compared with the Origin as a host, whatever its case', async () => {
    // A host is case-insensitive: a client (or a proxy) that spells the Host header in capitals
    // names the same service, and was refused as another origin.
    const { port } = new URL(emu.url);
    const attempt = (host: string, origin: string) => {
      const socket = io(`http://localhost:${port}`, {
        transports: ['websocket'],
        extraHeaders: { 'x-api-key': FULL.key, origin, host },
        reconnection: false,
        forceNew: true,
      });
      return new Promise<string>((resolve) => {
        socket.once('connect', () => resolve('connected'));
        socket.once('connect_error', (err) => resolve(err.message));
      }).finally(() => socket.close());
    };
    assert.equal(await attempt(`LOCALHOST:${port}`, `http://localhost:${port}`), 'connected');
    assert.equal(await attempt(`localhost:${port}`, `http://LocalHost:${port}`), 'connected');
    assert.match(await attempt(`localhost:${port}`, `http://elsewhere:${port}`), /Origin/);
  });

  test('connects on both paths; a missing capability is an error event with the id', async () => {
    for (const path of ['/socket.io', '/realtime/socket.io']) {
      const socket = await connectSocket(emu.url, BATCH_ONLY.key, { path });
      try {
        const id = uuid();
        const error = new Promise<Record<string, unknown>>((resolve) => socket.once('error', resolve));
        socket.emit(
          'audio_stream',
          encodeFrame({ streamId: id, isStart: true, language: 'en', pcm: Buffer.alloc(320) }),
        );
        const body = await error;
        assertErrorBody(body, 'AUTH_FORBIDDEN');
        assert.equal(body.id, id);
        const ack = (await socket.emitWithAck('list_voices')) as {
          ok: boolean;
          error: Record<string, unknown>;
        };
        assert.equal(ack.ok, false);
        assert.equal(ack.error.code, 'AUTH_FORBIDDEN');
      } finally {
        socket.close();
      }
    }
    assert.ok(emu.stats().socketConnections.opened >= 2);
  });
});

describe('admission', () => {
  test('per-key request rate: 429 RATE_LIMIT_EXCEEDED, batch body with data.capacity', async () => {
    const limited = await startEmulator({ rateLimit: { requestsPerSecond: 0.001, burst: 2 } });
    try {
      const get = () => call(`${limited.url}/v1/transcribe/${uuid()}`, { key: limited.apiKey, dispatcher });
      assert.equal((await get()).status, 404);
      assert.equal((await get()).status, 404);
      const third = await get();
      assert.equal(third.status, 429);
      assert.ok(Number(third.headers['retry-after']) >= 1);
      const body = third.json() as Record<string, unknown>;
      assert.deepEqual(Object.keys(body).sort(), [
        'code',
        'data',
        'detail',
        'error',
        'retryable',
        'timestamp',
      ]);
      assert.deepEqual(body.data, { capacity: 2 });
      assert.equal(body.retryable, true);
      const tts = await call(`${limited.url}/http/tts`, {
        key: limited.apiKey,
        body: JSON.stringify({ id: uuid(), text: 'hello' }),
        dispatcher,
      });
      assert.equal(tts.status, 429);
      const ttsBody = tts.json() as Record<string, unknown>;
      assertErrorBody(ttsBody, 'RATE_LIMIT_EXCEEDED');
      assert.equal(ttsBody.data, undefined, 'the non-batch 429 is the usual error body');
      assert.equal(limited.stats().rejections.RATE_LIMIT_EXCEEDED, 2);
    } finally {
      await limited.close();
    }
  });

  test('per-key request rate: a request refused by its own validation gets its own code and takes no token', async () => {
    const limited = await startEmulator({
      rateLimit: { requestsPerSecond: 0.001, burst: 1 },
      tts: { engine: 'synthetic' },
    });
    try {
      const key = limited.apiKey;
      const code = async (path: string, body?: Buffer | string, type?: string) => {
        const headers: Record<string, string> = type ? { 'content-type': type } : {};
        const reply = await call(`${limited.url}${path}`, { key, body, headers, dispatcher });
        return `${reply.status} ${(reply.json() as Record<string, unknown>).code}`;
      };
      const validTts = () => JSON.stringify({ id: uuid(), text: 'hello' });
      for (let i = 0; i < 3; i++) {
        // TTS body rules, a frame for a stream never started, a bad fast id, a bad job id, and an
        // upload refused while it is read (after admission): none of them takes the one token.
        assert.equal(await code('/http/tts', '{}'), '400 VALIDATION_INVALID_FORMAT');
        assert.equal(
          await code(
            '/http/stt-stream',
            encodeFrame({ streamId: uuid(), language: 'en', pcm: Buffer.alloc(320) }),
          ),
          '409 SESSION_EXPIRED',
        );
        assert.equal(
          await code('/http/stt?id=12', multipart([filePart(wav)]), MULTIPART_TYPE),
          '400 VALIDATION_INVALID_UUID',
        );
        assert.equal(await code('/v1/transcribe/not-a-uuid'), '400 VALIDATION_INVALID_UUID');
        assert.equal(
          await code(`/http/stt?id=${uuid()}`, multipart([filePart(wav), filePart(wav)]), MULTIPART_TYPE),
          '422 FILE_COUNT_EXCEEDED',
        );
      }
      assert.equal(
        (await call(`${limited.url}/http/tts`, { key, body: validTts(), dispatcher })).status,
        200,
      );
      assert.equal(await code('/http/tts', validTts()), '429 RATE_LIMIT_EXCEEDED');
      assert.equal(await code('/http/tts', '{}'), '400 VALIDATION_INVALID_FORMAT', 'validation comes first');
      assert.equal(await code('/v1/transcribe/not-a-uuid'), '400 VALIDATION_INVALID_UUID');
      assert.equal(
        await code('/v1/transcribe/xx', multipart([filePart(wav)]), MULTIPART_TYPE),
        '400 VALIDATION_INVALID_LANGUAGE',
        'batch validation comes first too',
      );
      assert.equal(
        await code('/v1/transcribe/en?itn=maybe', multipart([filePart(wav)]), MULTIPART_TYPE),
        '400 VALIDATION_INVALID_PARAM',
      );
      assert.equal(await code(`/v1/transcribe/${uuid()}`), '429 RATE_LIMIT_EXCEEDED');
      assert.equal(limited.stats().rejections.RATE_LIMIT_EXCEEDED, 2);
    } finally {
      await limited.close();
    }
  });

  test('per-key request rate: a request refused by admission gets its token back', async () => {
    const limited = await startEmulator({
      rateLimit: { requestsPerSecond: 0.001, burst: 2 },
      limits: { accountConcurrency: { batch: 1 } },
    });
    try {
      const upload = multipart([filePart(wav)]);
      const submit = (body: Buffer | AsyncIterable<Buffer>) =>
        call(`${limited.url}/v1/transcribe/en`, {
          key: limited.apiKey,
          headers: { 'content-type': MULTIPART_TYPE },
          body,
          dispatcher,
        });
      let finish!: () => void;
      const rest = new Promise<void>((resolve) => {
        finish = resolve;
      });
      async function* slowUpload() {
        yield upload.subarray(0, 100);
        await rest;
        yield upload.subarray(100);
      }
      const first = submit(slowUpload());
      await until(() => limited.stats().concurrent.batch === 1, 'the first upload admitted');
      const second = await submit(upload);
      assert.equal((second.json() as Record<string, unknown>).code, 'CONCURRENCY_LIMIT_EXCEEDED');
      finish();
      assert.equal((await first).status, 200);
      assert.equal((await submit(upload)).status, 200, "the refused request's token came back");
      assert.equal((await submit(upload)).status, 429);
      assert.equal(limited.stats().rejections.RATE_LIMIT_EXCEEDED, 1);
    } finally {
      await limited.close();
    }
  });

  test('per-account concurrency per workload, shared by the keys of an account', async () => {
    const other: EmulatorKey = { ...FULL, key: 'key-2' };
    const limited = await startEmulator({
      keys: [FULL, other],
      limits: { accountConcurrency: { realtime_asr: 1 } },
    });
    try {
      const start = (key: string) =>
        call(`${limited.url}/http/stt-stream`, { key, body: frame(), dispatcher });
      assert.equal((await start(FULL.key)).status, 200);
      const second = await start(other.key);
      assert.equal(second.status, 429);
      assert.equal(second.headers['retry-after'], '1');
      const body = second.json() as Record<string, unknown>;
      assert.equal(body.code, 'CONCURRENCY_LIMIT_EXCEEDED');
      assert.deepEqual(body.data, {
        limit: 1,
        observed: 2,
        unit: 'operations',
        bound: 'account_concurrency_realtime_asr',
      });
      assert.equal(limited.stats().sessions.opened, 1, 'the rejected start took nothing');
      // Other workloads are counted separately.
      const diarization = await call(`${limited.url}/http/diarization-stream`, {
        key: FULL.key,
        body: frame(),
        dispatcher,
      });
      assert.equal(diarization.status, 200);
    } finally {
      await limited.close();
    }
  });
});
