// The emulator's Socket.IO server: the transport it accepts (websocket only, as the interface's
// handshake says) and the per-key request rate over events.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type ServerOptions } from 'node:http';
import { connect, type Socket } from 'node:net';
import { describe, test } from 'node:test';
import { startEmulator } from '../src/emulator/index.ts';
import { encodeFrame } from '../src/protocol/frame.ts';
import { call, connectSocket, emulatorsForFile, until, uuid } from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({ tts: { engine: 'synthetic' } });

describe('Socket.IO transport', () => {
  test('a long-polling handshake is refused; websocket connects', async () => {
    const emu = await emulator();
    for (const path of ['/socket.io', '/realtime/socket.io']) {
      const polling = await call(`${emu.url}${path}/?EIO=4&transport=polling`, {
        key: emu.apiKey,
        headers: { origin: emu.url },
        dispatcher,
      });
      assert.equal(polling.status, 400, polling.text);
      assert.doesNotMatch(polling.text, /"sid"/, 'no engine.io session was opened');
    }
    const socket = await connectSocket(emu.url, emu.apiKey);
    socket.close();
    assert.equal(emu.stats().socketConnections.opened, 1);
  });
});

test('an upgrade on a Socket.IO path that engine.io does not serve (no slash after it) is refused, not left hanging', async () => {
  // engine.io serves `/socket.io/...` only; `/socket.io` and `/socket.io?EIO=4` passed the
  // emulator's own check, so neither refused them: the connection was held, unanswered and with
  // no timeout, for good (a thousand of them filled the connection cap).
  const emu = await emulator();
  const { port } = new URL(emu.url);
  for (const target of ['/socket.io', '/socket.io?EIO=4&transport=websocket', '/realtime/socket.io']) {
    const socket = connect(Number(port), '127.0.0.1');
    try {
      socket.on('error', () => {});
      await once(socket, 'connect');
      const closed = once(socket, 'close').then(() => undefined);
      const answered = once(socket, 'data').then(([data]) => (data as Buffer).toString('latin1'));
      socket.write(
        `GET ${target} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nx-api-key: ${emu.apiKey}\r\norigin: ${emu.url}\r\n\r\n`,
      );
      const timeout = AbortSignal.timeout(3000);
      const answer = await Promise.race([
        closed,
        answered,
        once(timeout, 'abort').then(() => assert.fail(`an upgrade to ${target} was left open`)),
      ]);
      // Refused (closed), or answered over HTTP/1.1 as no operation (Node 24.9+), never switched.
      if (answer !== undefined) assert.match(answer, /^HTTP\/1\.1 404 /);
    } finally {
      socket.destroy();
    }
  }
  // The path with its slash still connects.
  const socket = await connectSocket(emu.url, emu.apiKey);
  socket.close();
});

const upgradesChosen =
  (
    createServer({ shouldUpgradeCallback: () => false } as ServerOptions) as {
      shouldUpgradeCallback?: unknown;
    }
  ).shouldUpgradeCallback !== undefined;

test('a request asking to upgrade to anything but a Socket.IO path (h2c) is answered over HTTP/1.1', {
  skip: upgradesChosen ? false : 'this Node cannot serve an upgrade request as a request (24.9+)',
}, async () => {
  // curl --http2 and Java's HttpClient ask for h2c on every http:// request: Node gave every
  // request with an Upgrade header to the upgrade listeners, and the emulator's closed it
  // unanswered (curl: "Empty reply from server").
  const emu = await emulator();
  const h2c = {
    connection: 'Upgrade, HTTP2-Settings',
    upgrade: 'h2c',
    'http2-settings': 'AAMAAABkAAQCAAAAAAIAAAAA',
  };
  const { port } = new URL(emu.url);
  const ask = async (head: string, body = '') => {
    const socket = connect(Number(port), '127.0.0.1');
    try {
      socket.on('error', () => {});
      await once(socket, 'connect');
      const answered = once(socket, 'data').then(([data]) => (data as Buffer).toString('latin1'));
      const closed = once(socket, 'close').then(() => 'closed without an answer');
      const headers = Object.entries({ ...h2c, 'x-api-key': emu.apiKey })
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      socket.write(
        `${head}\r\nhost: 127.0.0.1:${port}\r\n${headers}content-length: ${body.length}\r\n\r\n${body}`,
      );
      return await Promise.race([answered, closed]);
    } finally {
      socket.destroy();
    }
  };
  const job = await ask(`GET /v1/transcribe/${uuid()} HTTP/1.1`);
  assert.match(job, /^HTTP\/1\.1 404 /);
  assert.match(job, /TRANSCRIPTION_JOB_NOT_FOUND/);
  const tts = await ask('POST /http/tts HTTP/1.1', '{"id": "not a uuid", "text": "hi"}');
  assert.match(tts, /^HTTP\/1\.1 400 /);
  assert.match(tts, /VALIDATION_INVALID_FORMAT/);
});

test('close() does not wait for a websocket client that never answers the closing handshake', async () => {
  const emu = await startEmulator();
  const { port } = new URL(emu.url);
  const socket = connect(Number(port), '127.0.0.1');
  try {
    socket.on('error', () => {});
    await once(socket, 'connect');
    socket.write(
      `GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\nx-api-key: ${emu.apiKey}\r\norigin: ${emu.url}\r\n\r\n`,
    );
    const [answer] = (await once(socket, 'data')) as [Buffer];
    assert.match(answer.toString('latin1'), /^HTTP\/1\.1 101 /);
    socket.pause(); // reads nothing more: the server's closing frame is never answered
    let closed = false;
    void emu.close().then(() => {
      closed = true;
    });
    // ws waits 30 s for the answer; close() used to wait with it.
    await until(() => closed, 'close() finished');
  } finally {
    socket.destroy();
    await emu.close();
  }
});

describe('Socket.IO payload size', () => {
  test("a payload over its limit gets 413; one over engine.io's buffer (the largest limit + 1 MiB) drops the connection", async () => {
    const emu = await emulator({
      limits: {
        fastAudioBytes: 1000,
        realtimeAsrFrameBytes: 1000,
        realtimeDiarizationFrameBytes: 1000,
        ttsRequestBytes: 1000,
      },
    });
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const ack = (await socket.emitWithAck('audio_file', { id: uuid(), audio: Buffer.alloc(1001) })) as {
        ok: boolean;
        error: { code: string; data: unknown };
      };
      assert.equal(ack.ok, false);
      assert.equal(ack.error.code, 'PAYLOAD_TOO_LARGE');
      assert.deepEqual(ack.error.data, {
        limit: 1000,
        observed: 1001,
        unit: 'bytes',
        bound: 'fast_audio_bytes',
      });
      // Binary in a TTS request (a JSON body holds none) counts as its length: it is not
      // serialized to measure it (JSON.stringify makes a Buffer an array of numbers, four times
      // its size, and 60 MB of it blocked the emulator for 9 s).
      const id = uuid();
      const tts = (await socket.emitWithAck('tts_request', {
        id,
        text: 'hi',
        voice_references: [{ audio: Buffer.alloc(2000, 255), text: 'x' }],
      })) as { ok: boolean; error: { code: string; detail: string } };
      assert.equal(tts.error.code, 'PAYLOAD_TOO_LARGE');
      const json = JSON.stringify({ id, text: 'hi', voice_references: [{ audio: null, text: 'x' }] });
      assert.match(tts.error.detail, new RegExp(`of ${Buffer.byteLength(json) + 2000} bytes`));
      // The documented infidelity: engine.io refuses the message itself, before the emulator sees it.
      const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
      socket.emit('audio_file', { id: uuid(), audio: Buffer.alloc(2 * 1024 * 1024) });
      assert.equal(await gone, 'transport close');
      assert.equal(emu.stats().requests['fast.socket'], 1, 'the oversized event never reached the emulator');
    } finally {
      socket.close();
    }
  });
});

test('a TTS request nested deeper than the call stack is measured as its JSON, not answered 500', async () => {
  // Its size was measured by a recursive walk: 100,000 nested arrays (a body JSON.parse and
  // the same request over HTTP take) overflowed it, and the answer was 500 SERVER_INTERNAL.
  const depth = 100_000;
  const emu = await emulator({ limits: { ttsRequestBytes: 2 * depth + 1000 } });
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    const send = (id: string, nested: number) =>
      // Written as the packet itself: socket.io-client's own encoder recurses too.
      (socket.io.engine as unknown as { write: (packet: string) => void }).write(
        `2["tts_request",{"id":"${id}","text":"hi","x":${'['.repeat(nested)}${']'.repeat(nested)}}]`,
      );
    const errors: Record<string, unknown>[] = [];
    socket.on('error', (e: Record<string, unknown>) => errors.push(e));
    const id = uuid();
    const final = new Promise<void>((resolve) =>
      socket.on('tts_audio', (e: { id: string; is_final: boolean }) => {
        if (e.id === id && e.is_final) resolve();
      }),
    );
    send(id, depth);
    const refused = new Promise<void>((resolve) => socket.once('error', () => resolve()));
    await Promise.race([final, refused]);
    assert.equal(errors.length, 0, JSON.stringify(errors));
    // One level more than the limit allows: counted to the byte.
    const over = uuid();
    send(over, depth + 500);
    await until(() => errors.length === 1, 'the refusal');
    assert.equal(errors[0]!.code, 'PAYLOAD_TOO_LARGE');
    assert.equal(errors[0]!.id, over);
  } finally {
    socket.close();
  }
});

test('a Socket.IO client that stops reading holds its TTS answer back, as over HTTP: output stays bounded', async () => {
  // socket.io emits without waiting: each answer was synthesized and queued at once, its slot
  // given back, and a client that read nothing while asking again filled the emulator's memory
  // (75 MB a second) until the send timeout, two minutes later.
  const emu = await emulator({ limits: { accountConcurrency: { tts: 1 } } });
  const socket = await connectSocket(emu.url, emu.apiKey);
  let tcp: Socket | undefined;
  try {
    tcp = (socket.io.engine.transport as unknown as { ws: { _socket: Socket } }).ws._socket;
    tcp.pause(); // reads nothing more
    const text = 'hello world '.repeat(80); // 4.4 MB of 24 kHz speech
    for (let i = 0; i < 20; i++) {
      socket.emit('tts_request', { id: uuid(), text });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await until(() => emu.stats().requests['tts.socket'] === 20, 'every request arrived');
    const stats = emu.stats();
    assert.ok(
      stats.bytesOut < 16 * 1024 * 1024,
      `${stats.bytesOut} bytes queued for a client that reads nothing`,
    );
    // The kernel's buffers take a few MB first; then one answer waits, holding its slot.
    assert.ok(stats.ttsSyntheses <= 4, `${stats.ttsSyntheses} syntheses`);
    assert.equal(stats.concurrent.tts, 1, 'the answer waiting for the client holds its slot');
    assert.equal(stats.rejections.CONCURRENCY_LIMIT_EXCEEDED, 20 - stats.ttsSyntheses);
  } finally {
    tcp?.destroy(); // a paused socket would never see the closing handshake
    socket.close();
  }
  await until(() => emu.stats().concurrent.tts === 0, 'the slot given back when the client goes');
});

test('a frame waiting behind a stalled one when its socket closes opens no stream', async () => {
  const emu = await emulator();
  const socket = await connectSocket(emu.url, emu.apiKey);
  emu.faults.add({ operation: 'stt.socket', times: 1, action: { type: 'stall' } });
  const id = uuid();
  const start = encodeFrame({ streamId: id, isStart: true, language: 'en', pcm: Buffer.alloc(320) });
  socket.emit('audio_stream', start); // stalls
  socket.emit('audio_stream', start); // waits for its turn behind it
  await until(() => emu.stats().faultsApplied.stall === 1, 'the first frame stalled');
  socket.close();
  await until(() => emu.stats().socketConnections.active === 0, 'the socket closed');
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(emu.stats().sessions.opened, 0);
  assert.equal(emu.stats().concurrent.realtime_asr, 0);
});

test('an event sent without a payload, or with two, is answered on its acknowledgement', async () => {
  const emu = await emulator();
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    for (const event of ['audio_stream', 'diarization_stream', 'audio_file', 'tts_request']) {
      for (const args of [
        [],
        [encodeFrame({ streamId: uuid(), isStart: true, language: 'en', pcm: Buffer.alloc(320) }), 2],
      ]) {
        const ack = (await socket.timeout(5_000).emitWithAck(event, ...args)) as {
          ok: boolean;
          error?: { code: string };
        };
        assert.equal(
          ack.ok,
          args.length > 0 && event.endsWith('_stream'),
          `${event} (${args.length} arguments)`,
        );
        if (!ack.ok) assert.match(ack.error!.code, /^VALIDATION_/);
      }
    }
  } finally {
    socket.close();
  }
});

describe('Socket.IO per-key request rate', () => {
  test('a negative acknowledgement RATE_LIMIT_EXCEEDED; events refused by validation take no token', async () => {
    const emu = await emulator({ rateLimit: { requestsPerSecond: 0.001, burst: 2 } });
    const socket = await connectSocket(emu.url, emu.apiKey);
    try {
      const codeOf = async (event: string, payload?: unknown) => {
        const ack = (await (payload === undefined
          ? socket.emitWithAck(event)
          : socket.emitWithAck(event, payload))) as { ok?: boolean; error?: Record<string, unknown> };
        return ack.error?.code ?? 'ok';
      };
      const frame = (start: boolean) =>
        encodeFrame({ streamId: uuid(), isStart: start, language: 'en', pcm: Buffer.alloc(320) });
      for (let i = 0; i < 3; i++) {
        assert.equal(await codeOf('audio_stream', 'not binary'), 'VALIDATION_INVALID_FORMAT');
        assert.equal(await codeOf('audio_stream', frame(false)), 'SESSION_EXPIRED');
        assert.equal(await codeOf('tts_request', { id: uuid(), text: ' ' }), 'VALIDATION_REQUIRED_FIELD');
        assert.equal(
          await codeOf('audio_file', { id: 'x', audio: Buffer.alloc(2) }),
          'VALIDATION_INVALID_UUID',
        );
      }
      assert.equal(await codeOf('list_voices'), 'ok');
      assert.equal(await codeOf('audio_stream', frame(true)), 'ok');
      const limited = (await socket.emitWithAck('list_voices')) as {
        ok: boolean;
        error: Record<string, unknown>;
      };
      assert.equal(limited.ok, false);
      assert.equal(limited.error.code, 'RATE_LIMIT_EXCEEDED');
      assert.equal(limited.error.retryable, true);
      assert.equal(await codeOf('audio_stream', frame(true)), 'RATE_LIMIT_EXCEEDED');
      assert.equal(
        await codeOf('audio_stream', 'not binary'),
        'VALIDATION_INVALID_FORMAT',
        'validation first',
      );
      assert.equal(emu.stats().rejections.RATE_LIMIT_EXCEEDED, 2);
    } finally {
      socket.close();
    }
  });
});

test('a stalled live frame holds its own stream only: another stream on the same socket is answered', async () => {
  const emu = await emulator();
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    const stall = emu.faults.add({ operation: 'stt.socket', times: 1, action: { type: 'stall' } });
    const frame = (id: string) =>
      encodeFrame({ streamId: id, isStart: true, isFinal: true, language: 'en', pcm: Buffer.alloc(3200) });
    socket.emit('audio_stream', frame(uuid()), () => {}); // never answered
    const ack = (await socket.timeout(5_000).emitWithAck('audio_stream', frame(uuid()))) as { ok: boolean };
    assert.equal(ack.ok, true);
    assert.equal(emu.stats().faultsApplied.stall, 1);
    stall.remove();
  } finally {
    socket.close();
  }
});

test("frames waiting for their stream's turn are bounded: past the byte rate's burst a frame is refused at once, the stream stays live", async () => {
  // Frames of a stream wait while an earlier one is held (a delay here; a recognizer behind on
  // the stream in practice): a client that sent without waiting for acknowledgements queued
  // them in memory without bound.
  const burst = 64_000;
  const emu = await emulator({ limits: { sessionAudioRateBurstBytes: burst } });
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    const delay = emu.faults.add({ operation: 'stt.socket', times: 1, action: { type: 'delay', ms: 1000 } });
    const id = uuid();
    const pcm = Buffer.alloc(16_000);
    const answers: string[] = [];
    const send = (name: string, isStart = false) =>
      new Promise<{ ok: boolean; error?: { code: string; data?: unknown } }>((resolve) =>
        socket.emit(
          'audio_stream',
          encodeFrame({ streamId: id, isStart, language: 'en', pcm }),
          (ack: never) => {
            answers.push(name);
            resolve(ack);
          },
        ),
      );
    const start = send('start', true); // held by the delay
    await until(() => emu.stats().faultsApplied.delay === 1, 'the start frame is held');
    delay.remove();
    const queued = [send('2'), send('3'), send('4')]; // 48,054 bytes waiting behind it
    const refused = await Promise.all([send('5'), send('6')]); // 64,072: over the burst
    assert.deepEqual(answers, ['5', '6'], 'refused on arrival, before the frames ahead were answered');
    for (const ack of refused) {
      assert.equal(ack.ok, false);
      assert.equal(ack.error!.code, 'SESSION_BYTE_RATE_EXCEEDED');
      assert.deepEqual(ack.error!.data, {
        limit: burst,
        observed: 4 * 16_018,
        unit: 'bytes',
        bound: 'session_audio_rate_burst',
      });
    }
    assert.equal((await start).ok, true);
    for (const ack of await Promise.all(queued)) assert.equal(ack.ok, true, 'the frames ahead are taken');
    assert.equal(emu.stats().sessions.active, 1, 'the stream stays live');
  } finally {
    socket.close();
  }
});

test('a Socket.IO stream abandoned on an open connection expires and gives back its concurrency', async () => {
  const emu = await emulator({ limits: { sessionExpirySec: 0.2 } });
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    const ack = (await socket.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: uuid(), isStart: true, language: 'en', pcm: Buffer.alloc(3200) }),
    )) as { ok: boolean };
    assert.equal(ack.ok, true);
    assert.equal(emu.stats().concurrent.realtime_asr, 1);
    await until(() => emu.stats().sessions.expired === 1, 'the abandoned stream expires');
    assert.equal(emu.stats().concurrent.realtime_asr, 0);
    assert.equal(socket.connected, true, 'the connection stays');
  } finally {
    socket.close();
  }
});

test('a final frame ends a Socket.IO stream and gives back its concurrency at once', async () => {
  const emu = await emulator();
  const socket = await connectSocket(emu.url, emu.apiKey);
  try {
    const id = uuid();
    const final = new Promise<void>((resolve) =>
      socket.on('transcription_result', (r: { is_final: boolean }) => r.is_final && resolve()),
    );
    await socket.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: id, isStart: true, language: 'en', pcm: Buffer.alloc(3200) }),
    );
    assert.equal(emu.stats().concurrent.realtime_asr, 1);
    await socket.emitWithAck(
      'audio_stream',
      encodeFrame({ streamId: id, isStart: false, isFinal: true, language: 'en', pcm: Buffer.alloc(640) }),
    );
    await final;
    await until(() => emu.stats().concurrent.realtime_asr === 0, 'the slot given back');
  } finally {
    socket.close();
  }
});
