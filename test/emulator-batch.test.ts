// Batch transcription against the emulator: submission rules (language, query parameters,
// multipart, byte, tail and duration limits, audio validation), the job lifecycle, and the V2
// and V1 lookups with save_result, clearing, force-aligned speakers, ITN and redaction.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { UploadAnalyzer } from '../src/emulator/audio-analysis.ts';
import { EmulatorContext } from '../src/emulator/context.ts';
import type { AnalyzedAudio, BatchOptions } from '../src/emulator/engine/recording.ts';
import type { HttpExchange } from '../src/emulator/http-exchange.ts';
import type { Emulator } from '../src/emulator/index.ts';
import { JobStore, renderV1, renderV2 } from '../src/emulator/jobs.ts';
import { PartDataSplitter, releaseChunk } from '../src/emulator/multipart-scan.ts';
import { checkUploadHeaders, receiveUpload, uploadRules } from '../src/emulator/upload.ts';
import { validateJobV1, validateJobV2, validateSubmitAck } from '../src/protocol/jobs.ts';
import { encodeWav } from '../src/protocol/riff.ts';
import { chunksOf, splitAt } from './helpers/chunks.ts';
import {
  BOUNDARY,
  call,
  emulatorsForFile,
  filePart,
  MULTIPART_TYPE,
  multipart,
  type Part,
  RATE,
  speechPcm,
  until,
  uuid,
  wavOf,
} from './helpers/emulator-fixtures.ts';
import { sineFile } from './helpers/ffmpeg.ts';

/** PCM16 mono at the live rate. */
const BYTES_PER_SECOND = RATE * 2;

const { dispatcher, emulator } = emulatorsForFile({ jobTiming: { queuedMs: 0, processingMs: 0 } });

const speech = wavOf(
  speechPcm([{ silence: 0.3 }, { speech: 1.2 }, { silence: 0.9 }, { speech: 1.0 }, { silence: 0.3 }]),
);

function submit(
  emu: Emulator,
  query: string,
  body: Buffer | AsyncIterable<Buffer>,
  headers: Record<string, string> = {},
) {
  return call(`${emu.url}/v1/transcribe/${query}`, {
    key: emu.apiKey,
    headers: { 'content-type': MULTIPART_TYPE, ...headers },
    body,
    dispatcher,
  });
}

const get = (emu: Emulator, path: string) =>
  call(`${emu.url}/v1/transcribe/${path}`, { key: emu.apiKey, dispatcher });

/** A body sent with chunked transfer encoding (no Content-Length). */
function chunked(body: Buffer): AsyncIterable<Buffer> {
  return Readable.from(
    (function* () {
      for (let i = 0; i < body.length; i += 16_384) yield body.subarray(i, i + 16_384);
    })(),
  );
}

function errorOf(
  reply: { status: number; json: () => unknown },
  status: number,
  code: string,
): Record<string, unknown> {
  const body = reply.json() as Record<string, unknown>;
  assert.equal(reply.status, status, JSON.stringify(body));
  assert.equal(body.code, code);
  return body;
}

async function waitForStatus(emu: Emulator, id: string, status: string): Promise<void> {
  await until(async () => {
    const r = await get(emu, `${id}?save_result=true`);
    return (r.json() as { data: { status: string } }).data.status === status;
  }, `job ${status}`);
}

describe('batch submission', () => {
  let emu: Emulator;
  before(async () => {
    emu = await emulator({
      limits: { batchRequestBytes: 400_000, batchAudioDurationSec: 4, batchUnvalidatableTailBytes: 1_000 },
    });
  });

  test('a valid upload is acknowledged with a queued job', async () => {
    const before = emu.stats().jobsCreated;
    const res = await submit(
      emu,
      'en?diarization=d2&itn=true&redact=0&asr=nova-en-fast',
      multipart([filePart(speech)]),
    );
    assert.equal(res.status, 200, res.text);
    assert.ok(validateSubmitAck(res.json()).ok);
    assert.equal((res.json() as { status: string }).status, 'queued');
    assert.equal(emu.stats().jobsCreated - before, 1);
  });

  test('admission: per-account batch concurrency counts submissions in flight', async () => {
    const busy = await emulator({
      limits: { accountConcurrency: { batch: 1 } },
      latency: { perRequestMs: 60_000 },
    });
    const controller = new AbortController();
    const pending = call(`${busy.url}/v1/transcribe/en`, {
      key: busy.apiKey,
      headers: { 'content-type': MULTIPART_TYPE },
      body: multipart([filePart(speech)]),
      dispatcher,
      signal: controller.signal,
    }).catch((e: Error) => e);
    await until(() => busy.stats().concurrent.batch === 1, 'the first submission admitted');
    const second = await submit(busy, 'en', multipart([filePart(speech)]));
    const body = errorOf(second, 429, 'CONCURRENCY_LIMIT_EXCEEDED');
    assert.equal(second.headers['retry-after'], '1');
    assert.deepEqual(body.data, {
      limit: 1,
      observed: 2,
      unit: 'operations',
      bound: 'account_concurrency_batch',
    });
    // Header-only checks come before admission: a malformed request is not a 429.
    errorOf(
      await submit(busy, 'en', Buffer.from('{}'), { 'content-type': 'application/json' }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
    controller.abort();
    await pending;
    await until(() => busy.stats().concurrent.batch === 0, 'released');
    assert.equal(busy.stats().jobsCreated, 0);
  });

  test('query rules: language, diarization, itn, redact, asr', async () => {
    const body = () => multipart([filePart(speech)]);
    errorOf(await submit(emu, 'fr', body()), 400, 'VALIDATION_INVALID_LANGUAGE');
    for (const q of ['diarization=2', 'diarization=yes', 'diarization=D1', 'itn=yes', 'redact=2', 'itn=']) {
      errorOf(await submit(emu, `en?${q}`, body()), 400, 'VALIDATION_INVALID_PARAM');
    }
    for (const q of [
      'diarization=0',
      'diarization=false',
      'diarization=1',
      'diarization=true',
      'diarization=d1',
    ]) {
      assert.equal((await submit(emu, `auto?${q}`, body())).status, 200, q);
    }
    errorOf(await submit(emu, 'en?asr=nova-ar', body()), 400, 'ASR_MODEL_NOT_FOUND');
    errorOf(await submit(emu, 'en?asr=whisper', body()), 400, 'ASR_MODEL_NOT_FOUND');
    assert.equal((await submit(emu, 'ar?asr=nova-ar', body())).status, 200);
  });

  test('a language without a default model needs an explicit asr', async () => {
    const noDefault = await emulator({ asrModels: { ar: [] } });
    errorOf(await submit(noDefault, 'ar', multipart([filePart(speech)])), 400, 'ASR_MODEL_NOT_FOUND');
  });

  test('multipart rules: multipart only, `file` first, one audio part, at most 8 parts', async () => {
    const before = emu.stats().jobsCreated;
    errorOf(
      await submit(emu, 'en', Buffer.from('{}'), { 'content-type': 'application/json' }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
    errorOf(
      await submit(emu, 'en', Buffer.from('a=b'), { 'content-type': 'multipart/form-data' }),
      400,
      'VALIDATION_INVALID_FORMAT',
    );
    // A content type the multipart parser cannot read (a boundary with a space, unquoted) is
    // malformed too: it was 500 SERVER_INTERNAL.
    for (const type of [
      `multipart/form-data; boundary=a ${BOUNDARY}`,
      `multipart/form-data; boundary=${BOUNDARY}/x`,
      `multipart/form-data; x; boundary=${BOUNDARY}`,
    ]) {
      errorOf(
        await submit(emu, 'en', multipart([filePart(speech)]), { 'content-type': type }),
        400,
        'VALIDATION_INVALID_FORMAT',
      );
    }
    errorOf(
      await submit(emu, 'en', multipart([{ name: 'note', data: 'hi' }, filePart(speech)])),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
    errorOf(await submit(emu, 'en', Buffer.alloc(0)), 400, 'VALIDATION_INVALID_FORMAT');
    errorOf(
      await submit(emu, 'en', multipart([{ name: 'audio', filename: 'a.wav', data: speech }])),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
    errorOf(
      await submit(emu, 'en', multipart([{ name: 'file', data: 'not a file part' }])),
      400,
      'VALIDATION_REQUIRED_FIELD',
    );
    const two = errorOf(
      await submit(
        emu,
        'en',
        multipart([filePart(speech), { name: 'second', filename: 'b.wav', data: speech }]),
      ),
      422,
      'FILE_COUNT_EXCEEDED',
    );
    assert.deepEqual(two.data, { limit: 1, observed: 2, unit: 'files', bound: 'file_parts' });
    const fields = (n: number): Part[] => Array.from({ length: n }, (_, i) => ({ name: `f${i}`, data: 'x' }));
    assert.equal(
      (await submit(emu, 'en', multipart([filePart(speech), ...fields(7)]))).status,
      200,
      'eight parts',
    );
    const nine = errorOf(
      await submit(emu, 'en', multipart([filePart(speech), ...fields(8)])),
      422,
      'FILE_COUNT_EXCEEDED',
    );
    assert.deepEqual(nine.data, { limit: 8, observed: 9, unit: 'parts', bound: 'multipart_parts' });
    assert.equal(emu.stats().jobsCreated - before, 1, 'only the valid eight-part upload made a job');
  });

  test('request bytes: at the limit accepted; a declared Content-Length over it is refused at once; chunked over it is limit+1', async () => {
    const before = emu.stats().jobsCreated;
    const limitBody = exactSize(400_000);
    assert.equal(limitBody.length, 400_000);
    const tailLimited = await emulator({
      limits: { batchRequestBytes: 400_000, batchUnvalidatableTailBytes: 400_000 },
    });
    assert.equal((await submit(tailLimited, 'en', limitBody)).status, 200, 'exactly at the limit');
    const over = exactSize(400_001);
    const declared = errorOf(await submit(tailLimited, 'en', over), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(declared.data, {
      limit: 400_000,
      observed: 400_001,
      unit: 'bytes',
      bound: 'request_bytes',
    });
    const big = Buffer.concat([over, Buffer.alloc(2_000_000)]);
    const declaredBig = errorOf(await submit(tailLimited, 'en', big), 413, 'PAYLOAD_TOO_LARGE');
    assert.equal((declaredBig.data as { observed: number }).observed, big.length);
    const streamed = errorOf(await submit(tailLimited, 'en', chunked(big)), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(streamed.data, {
      limit: 400_000,
      observed: 400_001,
      unit: 'bytes',
      bound: 'request_bytes',
    });
    assert.equal(tailLimited.stats().jobsCreated, 1);
    assert.equal(emu.stats().jobsCreated, before);

    function exactSize(size: number): Buffer {
      const probe = multipart([filePart(speech), { name: 'pad', data: '' }]);
      return multipart([filePart(speech), { name: 'pad', data: 'p'.repeat(size - probe.length) }]);
    }
  });

  test('bytes after the recording: at the limit accepted, one more refused (declared and chunked)', async () => {
    // The tail is every byte after the delimiter that ends the recording part.
    const recordingEnd = (body: Buffer) =>
      body.indexOf(`\r\n--${BOUNDARY}`, body.indexOf(speech.subarray(-64))) + 4 + BOUNDARY.length;
    const withTail = (tail: number) => {
      const probe = multipart([filePart(speech), { name: 'pad', data: '' }]);
      const probeTail = probe.length - recordingEnd(probe);
      const body = multipart([filePart(speech), { name: 'pad', data: 'q'.repeat(tail - probeTail) }]);
      assert.equal(body.length - recordingEnd(body), tail);
      return body;
    };
    assert.equal((await submit(emu, 'en', withTail(1_000))).status, 200);
    const before = emu.stats().jobsCreated;
    const over = withTail(1_001);
    const declared = errorOf(await submit(emu, 'en', over), 413, 'PAYLOAD_TOO_LARGE');
    // Errors rule 2: with a declared Content-Length, observed is that length.
    assert.deepEqual(declared.data, {
      limit: 1_000,
      observed: over.length,
      unit: 'bytes',
      bound: 'unvalidatable_tail_bytes',
    });
    const streamed = errorOf(await submit(emu, 'en', chunked(withTail(5_000))), 413, 'PAYLOAD_TOO_LARGE');
    assert.deepEqual(streamed.data, {
      limit: 1_000,
      observed: 1_001,
      unit: 'bytes',
      bound: 'unvalidatable_tail_bytes',
    });
    assert.equal((await submit(emu, 'en', chunked(withTail(1_000)))).status, 200);
    assert.equal(emu.stats().jobsCreated - before, 1);
  });

  test('bytes after the recording: a long preamble leaves the rule on; a part header over 16 KiB is malformed', async () => {
    const before = emu.stats().jobsCreated;
    const tail = { name: 'pad', data: 'q'.repeat(5_000) };
    // Preamble before the first delimiter (RFC 2046: ignored), much longer than the recording's
    // part header and longer than any read of the request.
    const preamble = Buffer.from(`${'p'.repeat(200 * 1024)}\r\n`);
    for (const body of [
      Buffer.concat([preamble, multipart([filePart(speech), tail])]),
      Buffer.concat([preamble, multipart([filePart(speech)], { epilogue: 'e'.repeat(5_000) })]),
    ]) {
      for (const sent of [body, chunked(body)]) {
        const r = errorOf(await submit(emu, 'en', sent), 413, 'PAYLOAD_TOO_LARGE');
        assert.equal((r.data as { bound: string }).bound, 'unvalidatable_tail_bytes');
      }
    }
    const withPreamble = Buffer.concat([preamble, multipart([filePart(speech)])]);
    assert.equal((await submit(emu, 'en', chunked(withPreamble))).status, 200, 'a preamble alone is fine');
    // A part header over busboy's 16 KiB is a malformed multipart body.
    const longHeader = multipart([filePart(speech), tail])
      .toString('latin1')
      .replace(
        'content-type: application/octet-stream',
        `x-pad: ${'h'.repeat(70 * 1024)}\r\ncontent-type: audio/wav`,
      );
    errorOf(await submit(emu, 'en', Buffer.from(longHeader, 'latin1')), 400, 'VALIDATION_INVALID_FORMAT');
    assert.equal(emu.stats().jobsCreated - before, 1);
  });

  test('the audio part read in any reads (split at the header end, inside the closing delimiter, at odd offsets): the same job', async () => {
    const emu = await emulator();
    const body = multipart([filePart(speech), { name: 'note', data: 'x' }]);
    const dataStart = body.indexOf('\r\n\r\n') + 4;
    const closing = body.indexOf(`\r\n--${BOUNDARY}`, dataStart);
    const result = async (sent: Buffer | AsyncIterable<Buffer>) => {
      const reply = await submit(emu, 'en?diarization=1', sent);
      assert.equal(reply.status, 200, reply.text);
      const { jobId } = reply.json() as { jobId: string };
      await waitForStatus(emu, jobId, 'done');
      const { data } = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
      return {
        ...data,
        id: undefined,
        job_id: undefined,
        version: undefined,
        created_at: undefined,
        updated_at: undefined,
      };
    };
    const whole = await result(body);
    for (const cuts of [
      [dataStart, dataStart + 1, closing + 1, closing + 5],
      [dataStart - 1, dataStart + 3, closing - 1, closing + 2],
      [dataStart + 4097, closing, closing + 9],
    ]) {
      // Each read is sent on its own (a pause between), so the emulator sees these splits.
      const reads = Readable.from(
        (async function* () {
          for (const piece of splitAt(body, cuts)) {
            yield piece;
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        })(),
      );
      assert.deepEqual(await result(reads), whole, `cut at ${cuts.join(', ')}`);
    }
  });

  test('the audio part splitter: its data and the bytes from the closing delimiter on, in any reads', () => {
    const delimiter = `\r\n--${BOUNDARY}`;
    // Data made of the delimiter's own pieces, so partial delimiters occur at every read boundary.
    const piece = fc.constantFrom('\r', '\n', '-', '\r\n', '\r\n--', delimiter.slice(0, -1), 'a', 'RIFF');
    fc.assert(
      fc.property(
        fc.array(piece, { maxLength: 40 }),
        fc.array(fc.nat(400), { maxLength: 12 }),
        (pieces, cuts) => {
          const data = Buffer.from(pieces.join(''));
          if (data.includes(delimiter)) return;
          const rest = Buffer.from(`${delimiter}--\r\nepilogue`);
          const splitter = new PartDataSplitter(BOUNDARY);
          const gotData: Buffer[] = [];
          const gotRest: Buffer[] = [];
          for (const read of splitAt(Buffer.concat([data, rest]), cuts)) {
            if (splitter.closed) {
              gotRest.push(read);
              continue;
            }
            const out = splitter.push(read);
            gotData.push(...out.data);
            gotRest.push(...out.rest);
          }
          assert.equal(splitter.closed, true);
          assert.equal(splitter.bytes, data.length);
          assert.deepEqual(Buffer.concat(gotData), data);
          assert.deepEqual(Buffer.concat(gotRest), rest);
        },
      ),
      { numRuns: 500 },
    );
  });

  test('releaseChunk frees only a buffer that is the whole of its own memory', () => {
    const own = Buffer.allocUnsafeSlow(64);
    assert.equal(releaseChunk(own), true);
    assert.equal(own.length, 0);
    assert.equal(own.buffer.byteLength, 0);
    const shared = Buffer.allocUnsafeSlow(64).fill(7);
    for (const view of [shared.subarray(1), shared.subarray(0, 63)]) assert.equal(releaseChunk(view), false);
    assert.deepEqual(shared, Buffer.alloc(64, 7));
    const pooled = Buffer.from('pooled bytes');
    assert.equal(releaseChunk(pooled), false);
    assert.equal(pooled.toString(), 'pooled bytes');
  });

  test('the request chunks of an upload are freed once analysed, never while they are kept or read by another listener', async () => {
    const ctx = new EmulatorContext({});
    after(() => ctx.lifecycle.close());
    const rules = uploadRules(ctx.limits, 'batch');
    /** Reads of the body, each in memory of its own (as node:http gives them), through receiveUpload. */
    const receive = async (reads: Buffer[], otherListener = false) => {
      const owned = reads.map((r) => {
        const b = Buffer.allocUnsafeSlow(r.length);
        r.copy(b);
        return b;
      });
      const req = Object.assign(Readable.from(owned), {
        headers: { 'content-type': MULTIPART_TYPE },
      });
      if (otherListener) req.on('data', () => {});
      const ex = { req, ctx, signal: new AbortController().signal } as unknown as HttpExchange;
      const audio = await receiveUpload(ex, rules, checkUploadHeaders(ex, rules));
      return { audio, freed: owned.map((b, i) => b.length === 0 && reads[i]!.length > 0) };
    };
    const expected = async (file: Buffer) => (await receive([multipart([filePart(file)])])).audio;

    const body = multipart([filePart(speech)]);
    const dataStart = body.indexOf('\r\n\r\n') + 4;
    const closing = body.indexOf(`\r\n--${BOUNDARY}`, dataStart);
    // The part headers with the start of the WAV header, its rest in 8-byte reads, the samples
    // in 4 KiB reads, and a last read with the closing delimiter.
    const cuts = [dataStart + 10];
    for (let at = dataStart + 18; at < dataStart + 60; at += 8) cuts.push(at);
    for (let at = dataStart + 4096; at < closing - 100; at += 4096) cuts.push(at);
    cuts.push(closing - 100);
    const reads = splitAt(body, cuts);
    const whole = await expected(speech);
    const split = await receive(reads);
    assert.deepEqual(split.audio, whole);
    // Not freed: the first read (busboy has the part headers), the reads of the WAV header
    // while it is incomplete (kept to parse it), the last (busboy has the closing delimiter).
    const headerEnd = dataStart + 44;
    let end = 0;
    const expectFreed = reads.map((r, i) => {
      end += r.length;
      return i > 0 && i < reads.length - 1 && end >= headerEnd;
    });
    assert.ok(expectFreed.filter(Boolean).length > 20);
    assert.deepEqual(split.freed, expectFreed);

    // Another reader of the request: nothing is freed.
    const shared = await receive(reads, true);
    assert.deepEqual(shared.audio, whole);
    assert.equal(shared.freed.some(Boolean), false);

    // Not WAV: the bytes go to a temp file for ffmpeg, written after the read returns.
    const flac = await sineFile({ seconds: 2, rate: 16_000, codec: 'flac', format: 'flac' });
    const flacBody = multipart([filePart(flac, 'a.flac')]);
    const flacStart = flacBody.indexOf('\r\n\r\n') + 4;
    const flacReads = splitAt(
      flacBody,
      Array.from({ length: 20 }, (_, i) => flacStart + 1 + i * 1024),
    );
    const decoded = await receive(flacReads);
    assert.deepEqual(decoded.audio, await expected(flac));
    assert.equal(decoded.freed.some(Boolean), false);
  });

  test('audio validation: unsupported, corrupt, empty or zero-duration audio is 422 VALIDATION_FILE_CORRUPT', async () => {
    const before = emu.stats().jobsCreated;
    const cases: [string, Buffer][] = [
      ['random bytes', Buffer.from('this is not audio at all, not even a little bit'.repeat(20))],
      ['empty file', Buffer.alloc(0)],
      ['WAV with no samples', wavOf(Buffer.alloc(0))],
      ['WAV cut inside its header', speech.subarray(0, 30)],
      // A sample rate no audio has: its samples last no time at the service's resolution.
      [
        'WAV declaring a 4 GHz sample rate',
        (() => {
          const wav = Buffer.from(speech);
          wav.writeUInt32LE(0xffffffff, 24);
          wav.writeUInt32LE(0xfffffffe, 28);
          return wav;
        })(),
      ],
      ['WAV of a few samples (under a millisecond)', wavOf(Buffer.alloc(8, 1))],
    ];
    for (const [name, data] of cases) {
      const body = errorOf(
        await submit(emu, 'en', multipart([filePart(data)])),
        422,
        'VALIDATION_FILE_CORRUPT',
      );
      assert.equal(body.retryable, false, name);
    }
    assert.equal(emu.stats().jobsCreated, before);
  });

  test('duration: at the limit accepted; over it 422 AUDIO_DURATION_EXCEEDED, whole seconds rounded up', async () => {
    const before = emu.stats().jobsCreated;
    assert.equal(
      (await submit(emu, 'en', multipart([filePart(wavOf(Buffer.alloc(4 * BYTES_PER_SECOND)))]))).status,
      200,
    );
    const wav = errorOf(
      await submit(emu, 'en', multipart([filePart(wavOf(Buffer.alloc(4 * BYTES_PER_SECOND + 2)))])),
      422,
      'AUDIO_DURATION_EXCEEDED',
    );
    assert.deepEqual(wav.data, { limit: 4, observed: 5, unit: 'seconds', bound: 'audio_duration' });
    // Stereo 8 kHz, 6.5 s: the duration comes from the header's sizes and format.
    const stereo = encodeWav(Buffer.alloc(6.5 * 8_000 * 4), 8_000, 2);
    const s = errorOf(await submit(emu, 'en', multipart([filePart(stereo)])), 422, 'AUDIO_DURATION_EXCEEDED');
    assert.equal((s.data as { observed: number }).observed, 7);
    // A streaming header (sizes unknown, as ffmpeg writes to a pipe): reading stops past the
    // limit, so the observed duration is a minimum.
    const streamed = await sineFile({ seconds: 6.5, rate: 8_000, channels: 2, codec: 'pcm_s16le' });
    const m = errorOf(
      await submit(emu, 'en', multipart([filePart(streamed)])),
      422,
      'AUDIO_DURATION_EXCEEDED',
    );
    assert.equal((m.data as { observed: number }).observed, 5);
    assert.equal(emu.stats().jobsCreated - before, 1);
  });

  test('non-WAV audio is decoded by ffmpeg: at the limit accepted, over it refused with a minimum', async () => {
    const flacAt = await sineFile({ seconds: 4, rate: 16_000, codec: 'flac', format: 'flac' });
    assert.equal((await submit(emu, 'en', multipart([filePart(flacAt, 'a.flac')]))).status, 200);
    const flacOver = await sineFile({ seconds: 9, rate: 22_050, codec: 'flac', format: 'flac' });
    const over = errorOf(
      await submit(emu, 'en', multipart([filePart(flacOver, 'a.flac')])),
      422,
      'AUDIO_DURATION_EXCEEDED',
    );
    const data = over.data as { observed: number; limit: number };
    assert.ok(data.observed > 4 && data.observed <= 9, `observed ${data.observed} is a minimum`);
    const mp3 = await sineFile({ seconds: 1, rate: 16_000, codec: 'libmp3lame', format: 'mp3' });
    assert.equal((await submit(emu, 'en', multipart([filePart(mp3, 'a.mp3')]))).status, 200);
  });
});

describe('jobs and lookups', () => {
  test('queued, then processing, then done; V2 and V1 shapes for each status', async () => {
    const slow = await emulator({ jobTiming: { queuedMs: 600_000, processingMs: 0 } });
    const { jobId } = (await submit(slow, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    for (const path of [`${jobId}?save_result=true`, `${jobId}`]) {
      const v2 = (await get(slow, path)).json() as { data: Record<string, unknown> };
      assert.ok(validateJobV2(v2).ok, JSON.stringify(validateJobV2(v2)));
      assert.equal(v2.data.status, 'queued', 'a pending job is not cleared by reading');
      assert.deepEqual(Object.keys(v2.data), [
        'id',
        'version',
        'created_at',
        'updated_at',
        'language',
        'audio_duration',
        'sample_rate_hz',
        'status',
      ]);
    }
    const v1 = (await get(slow, `${jobId}/whatever`)).json() as Record<string, unknown>;
    assert.ok(validateJobV1(v1).ok);
    assert.equal(v1.status, 'queued');
    assert.equal(v1.diarization_segments, null);

    const processing = await emulator({ jobTiming: { queuedMs: 0, processingMs: 600_000 } });
    const p = (await submit(processing, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    await waitForStatus(processing, p.jobId, 'processing');
    const pv2 = (await get(processing, p.jobId)).json() as { message: string; data: Record<string, unknown> };
    assert.ok(validateJobV2(pv2).ok);
    assert.equal(pv2.message, 'success');
    assert.equal(pv2.data.id, p.jobId);
    assert.equal(pv2.data.status, 'processing');
    assert.equal(pv2.data.language, 'en');
    assert.deepEqual(Object.keys(pv2.data), [
      'id',
      'version',
      'created_at',
      'updated_at',
      'language',
      'audio_duration',
      'sample_rate_hz',
      'status',
    ]);
    const pv1 = (await get(processing, `${p.jobId}/en`)).json() as Record<string, unknown>;
    assert.ok(validateJobV1(pv1).ok);
    assert.deepEqual(pv1.results, { transcript: '' });
    assert.equal(pv1.diarization_segments, null);
  });

  test('done: result fields, then cleared after a read without save_result (V2)', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu, 'ar?diarization=1', multipart([filePart(speech)]))).json() as {
      jobId: string;
    };
    await waitForStatus(emu, jobId, 'done');
    const kept = (await get(emu, `${jobId}?save_result=1`)).json() as { data: Record<string, unknown> };
    assert.ok(validateJobV2(kept).ok);
    const done = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
    assert.ok(validateJobV2(done).ok);
    assert.deepEqual(done.data, kept.data, 'save_result=true left the result in place');
    assert.equal(done.data.status, 'done');
    assert.equal(done.data.language, 'ar');
    assert.equal(done.data.sample_rate_hz, 16_000);
    assert.ok(Math.abs((done.data.audio_duration as number) - 3.7) < 0.01);
    assert.equal((done.data.diarization_segments as unknown[]).length, 2);
    assert.equal(done.data.itn_result, null);
    assert.equal(done.data.redaction_result, null);
    assert.equal(done.data.redaction_labels, '');
    assert.equal(done.data.final_result, done.data.asr_result);
    const cleared = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
    assert.ok(validateJobV2(cleared).ok);
    assert.equal(cleared.data.status, 'cleared');
    assert.ok((cleared.data.version as number) > (done.data.version as number));
    const v1 = (await get(emu, `${jobId}/ar`)).json() as Record<string, unknown>;
    assert.ok(validateJobV1(v1).ok);
    assert.deepEqual(v1.diarization_segments, []);
    assert.deepEqual(v1.results, { transcript: '' });
  });

  test('failed (a fail fault on the submission): no failure reason; cleared after a read', async () => {
    const emu = await emulator({ faults: [{ operation: 'batch.submit', action: { type: 'fail' } }] });
    const res = await submit(emu, 'en', multipart([filePart(speech)]));
    assert.equal(res.status, 200, 'the failure happens later, in the job');
    const { jobId } = res.json() as { jobId: string };
    await waitForStatus(emu, jobId, 'failed');
    const v1 = (await get(emu, `${jobId}/en?save_result=true`)).json() as Record<string, unknown>;
    assert.ok(validateJobV1(v1).ok);
    assert.equal(v1.diarization_segments, null);
    const v2 = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
    assert.ok(validateJobV2(v2).ok);
    assert.equal(v2.data.status, 'failed');
    assert.equal(((await get(emu, jobId)).json() as { data: { status: string } }).data.status, 'cleared');
  });

  test('V1: offsets with speakers, diarization_force_align, then cleared', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu, 'en?diarization=true', multipart([filePart(speech)]))).json() as {
      jobId: string;
    };
    await waitForStatus(emu, jobId, 'done');
    const aligned = (await get(emu, `${jobId}/en?save_result=true`)).json() as {
      results: { transcript: string; offsets: { speaker: string | null; startTime: number }[] };
      diarization_segments: { start_time: number; end_time: number; speaker: string }[];
    };
    assert.ok(validateJobV1(aligned).ok);
    assert.ok(aligned.results.transcript.length > 0);
    const segments = aligned.diarization_segments;
    assert.deepEqual(
      segments.map((s) => s.speaker),
      ['SPEAKER_00', 'SPEAKER_01'],
    );
    assert.ok(aligned.results.offsets.every((o) => o.speaker === 'SPEAKER_00' || o.speaker === 'SPEAKER_01'));
    const unaligned = (
      await get(emu, `${jobId}/en?save_result=true&diarization_force_align=false`)
    ).json() as typeof aligned;
    const outside = unaligned.results.offsets.filter((o) => o.speaker === 'UNKNOWN_SPEAKER');
    assert.ok(outside.length >= 1, 'the first word of a region starts before its diarization segment');
    for (const o of outside)
      assert.ok(segments.every((s) => o.startTime < s.start_time || o.startTime > s.end_time));
    for (const value of ['0', '1', 'true']) {
      assert.equal(
        (await get(emu, `${jobId}/en?save_result=true&diarization_force_align=${value}`)).status,
        200,
      );
    }
    errorOf(await get(emu, `${jobId}/en?diarization_force_align=maybe`), 400, 'VALIDATION_INVALID_PARAM');
    const read = (await get(emu, `${jobId}/en`)).json() as Record<string, unknown>;
    assert.equal(read.status, 'done');
    assert.equal(((await get(emu, `${jobId}/en`)).json() as Record<string, unknown>).status, 'cleared');
  });

  test('without diarization the V1 speakers are null', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    await waitForStatus(emu, jobId, 'done');
    const v1 = (await get(emu, `${jobId}/en`)).json() as {
      results: { offsets: { speaker: unknown }[] };
      diarization_segments: unknown[];
    };
    assert.deepEqual(v1.diarization_segments, []);
    assert.ok(v1.results.offsets.length > 0 && v1.results.offsets.every((o) => o.speaker === null));
  });

  test('a registered transcript (SHA-256 of the file), with ITN and redaction', async () => {
    const emu = await emulator();
    emu.registerTranscript(
      createHash('sha256').update(speech).digest('hex'),
      'please call twenty three times or mail ann@example.com by nine',
    );
    const { jobId } = (await submit(emu, 'en?itn=1&redact=true', multipart([filePart(speech)]))).json() as {
      jobId: string;
    };
    await waitForStatus(emu, jobId, 'done');
    const { data } = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
    assert.equal(data.asr_result, 'please call twenty three times or mail ann@example.com by nine');
    assert.equal(data.itn_result, 'please call 23 times or mail ann@example.com by 9');
    assert.equal(data.redaction_result, 'please call [NUMBER] times or mail [EMAIL] by [NUMBER]');
    assert.equal(data.redaction_labels, 'EMAIL,NUMBER');
    assert.equal(data.final_result, data.redaction_result);
    assert.deepEqual(data.final_word_segments, data.redaction_word_segments);
    assert.equal((data.itn_word_segments as unknown[]).length, 9);
  });

  test('uploads are hashed only while a transcript is registered under a SHA-256; the analysis is the same', async () => {
    const ctx = new EmulatorContext({});
    after(() => ctx.lifecycle.close());
    assert.equal(ctx.hashUploads, false);
    ctx.registerTranscript(uuid(), 'a live stream transcript');
    assert.equal(ctx.hashUploads, false, 'a stream UUID cannot be a file hash');
    const analyse = async (hash: boolean) => {
      const analyzer = new UploadAnalyzer({
        lifecycle: ctx.lifecycle,
        maxDurationSec: 60,
        durationBound: 'audio_duration',
        signal: new AbortController().signal,
        hash,
      });
      try {
        for (const chunk of chunksOf(speech, 4097)) await analyzer.write(chunk);
        return await analyzer.finish();
      } finally {
        analyzer.dispose();
      }
    };
    const plain = await analyse(ctx.hashUploads);
    assert.equal(plain.sha256, undefined);
    assert.equal(ctx.fileTranscript(plain), undefined);
    ctx.registerTranscript('AB'.repeat(32), 'another file');
    assert.equal(ctx.hashUploads, true);
    const hashed = await analyse(ctx.hashUploads);
    assert.equal(hashed.sha256, createHash('sha256').update(speech).digest('hex'));
    assert.deepEqual({ ...hashed, sha256: undefined }, { ...plain, sha256: undefined });
  });

  test('lookup errors: bad UUID echoed in job_id, bad save_result, unknown job, fail fault 500', async () => {
    const emu = await emulator();
    for (const path of ['not-a-uuid', 'not-a-uuid/en']) {
      const body = errorOf(await get(emu, path), 400, 'VALIDATION_INVALID_UUID');
      assert.equal(body.job_id, 'not-a-uuid');
    }
    errorOf(await get(emu, `${uuid()}?save_result=yes`), 400, 'VALIDATION_INVALID_PARAM');
    errorOf(await get(emu, `${uuid()}/en?save_result=2`), 400, 'VALIDATION_INVALID_PARAM');
    const id = uuid();
    assert.equal(errorOf(await get(emu, id), 404, 'TRANSCRIPTION_JOB_NOT_FOUND').job_id, id);
    errorOf(await get(emu, `${id}/en`), 404, 'TRANSCRIPTION_JOB_NOT_FOUND');
    const { jobId } = (await submit(emu, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    await waitForStatus(emu, jobId, 'done');
    const fault = emu.faults.add({ operation: 'batch.get', times: 1, action: { type: 'fail' } });
    const failed = errorOf(await get(emu, jobId), 500, 'SERVER_INTERNAL');
    assert.equal(failed.retryable, true);
    fault.remove();
    assert.equal(
      ((await get(emu, jobId)).json() as { data: { status: string } }).data.status,
      'done',
      'a failed lookup clears nothing',
    );
  });

  test('the V1 lang segment is required: an empty one is no operation (404), not a V1 lookup', async () => {
    const emu = await emulator();
    const { jobId } = (await submit(emu, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    await waitForStatus(emu, jobId, 'done');
    // `/v1/transcribe/{job_id}/` names neither lookup: the V1 route needs its `{lang}` segment.
    errorOf(await get(emu, `${jobId}/`), 404, 'NOT_FOUND');
    errorOf(await get(emu, `${jobId}/?save_result=true`), 404, 'NOT_FOUND');
    const v1 = await get(emu, `${jobId}/xx?save_result=true`);
    assert.equal(v1.status, 200, 'any nonempty lang is accepted and ignored');
    assert.equal((v1.json() as { status: string }).status, 'done');
  });

  test('jobRetentionMs: an ended job is forgotten after the retention, then 404 on both lookups', async () => {
    const emu = await emulator({ jobRetentionMs: 200 });
    const { jobId } = (await submit(emu, 'en', multipart([filePart(speech)]))).json() as { jobId: string };
    await waitForStatus(emu, jobId, 'done');
    await until(async () => (await get(emu, jobId)).status === 404, 'the job forgotten');
    errorOf(await get(emu, `${jobId}/en`), 404, 'TRANSCRIPTION_JOB_NOT_FOUND');
    await assert.rejects(emulator({ jobRetentionMs: -1 }), RangeError);
  });
});

describe('job store: memory and retention', () => {
  const audio = (): AnalyzedAudio => ({
    durationSec: 3.7,
    regions: [
      { start: 0.3, end: 1.5 },
      { start: 2.4, end: 3.4 },
    ],
    sha256: 'ab'.repeat(32),
  });
  const options: BatchOptions = {
    language: 'en',
    diarization: 'd1',
    itn: true,
    redact: true,
    transcript: 'call twenty three times',
  };
  function store(
    jobTiming = { queuedMs: 0, processingMs: 0 },
    retention?: ConstructorParameters<typeof JobStore>[1],
  ) {
    const ctx = new EmulatorContext({ jobTiming });
    after(() => ctx.lifecycle.close());
    return new JobStore(ctx, retention);
  }

  test('a cleared job keeps only its small status record and still answers cleared (V2 and V1)', async () => {
    const jobs = store();
    const job = jobs.create('acct', audio(), options, false);
    assert.deepEqual(jobs.held(), { jobs: 1, inputs: 1, results: 0 });
    await until(() => job.status === 'done', 'done');
    assert.deepEqual(
      jobs.held(),
      { jobs: 1, inputs: 0, results: 1 },
      'the input is dropped once the result exists',
    );
    assert.equal(renderV2(job).data.status, 'done');
    jobs.clearAfterRead(job);
    assert.deepEqual(jobs.held(), { jobs: 1, inputs: 0, results: 0 }, 'the result is dropped when cleared');
    const again = jobs.get(job.id.toUpperCase(), 'acct');
    assert.ok(again);
    const v2 = renderV2(again);
    assert.ok(validateJobV2(v2).ok);
    assert.equal(v2.data.status, 'cleared');
    assert.equal(v2.data.audio_duration, 3.7);
    assert.equal(v2.data.language, 'en');
    assert.equal(Object.keys(v2.data).length, 8);
    const v1 = renderV1(again, true);
    assert.ok(validateJobV1(v1).ok);
    assert.equal(v1.status, 'cleared');
    assert.deepEqual(v1.diarization_segments, []);
    assert.deepEqual(v1.results, { transcript: '' });
    assert.equal(v1.metadata.fileDuration, 3.7);
  });

  test('a failed job drops its input; reading it clears it', async () => {
    const jobs = store();
    const job = jobs.create('acct', audio(), options, true);
    await until(() => job.status === 'failed', 'failed');
    assert.deepEqual(jobs.held(), { jobs: 1, inputs: 0, results: 0 });
    jobs.clearAfterRead(job);
    assert.equal(renderV2(job).data.status, 'cleared');
  });

  test('retention: a job is forgotten retentionMs after its last status change, only once it has ended', async () => {
    let clock = 0;
    const jobs = store(undefined, { retentionMs: 1_000, now: () => clock });
    const done = jobs.create('acct', audio(), options, false);
    const cleared = jobs.create('acct', audio(), options, false);
    await until(() => done.status === 'done' && cleared.status === 'done', 'done');
    clock = 500;
    jobs.clearAfterRead(cleared);
    clock = 999;
    assert.ok(jobs.get(done.id, 'acct'), 'kept until the retention has passed');
    clock = 1_000;
    assert.equal(jobs.get(done.id, 'acct'), undefined, 'forgotten: a later read is 404');
    assert.ok(jobs.get(cleared.id, 'acct'), 'clearing restarted its retention');
    clock = 1_500;
    assert.equal(jobs.get(cleared.id, 'acct'), undefined);
    assert.deepEqual(jobs.held(), { jobs: 0, inputs: 0, results: 0 });

    const pending = store({ queuedMs: 600_000, processingMs: 0 }, { retentionMs: 0, now: () => clock });
    const queued = pending.create('acct', audio(), options, false);
    clock = 1e12;
    assert.equal(
      pending.get(queued.id, 'acct')?.status,
      'queued',
      'a job that has not ended is never forgotten',
    );
    assert.throws(() => store(undefined, { retentionMs: -1 }), RangeError);
  });
});

describe('real recordings (optional media)', () => {
  const media = process.env.SPEECHPIPE_MEDIA ?? fileURLToPath(new URL('../../shared/media', import.meta.url));
  /** File, duration, and the least number of speech regions it has. */
  const files: [string, number, number][] = [
    ['en/jfk.wav', 11, 4],
    ['en/ms-whatstheweatherlike.alaw', 2.03, 1], // an A-law WAV, read natively
    ['diar/pyannote-sample.wav', 30, 3],
    ['compressed/jfk.flac', 11, 4],
    ['compressed/jfk.m4a', 11, 4],
    ['compressed/jfk.mp3', 11.09, 4],
    ['compressed/prism-speech_orig.ogg', 10.81, 4],
    ['compressed/prism-speech_orig.webm', 10.81, 4],
    ['compressed/silero-test.opus', 8.07, 2],
  ];

  test('every container decodes, with its duration and speech regions from the audio', async (t) => {
    if (!existsSync(media)) {
      t.skip(`no media at ${media}`);
      return;
    }
    const emu = await emulator();
    for (const [name, seconds, regions] of files) {
      const path = join(media, name);
      if (!existsSync(path)) {
        t.diagnostic(`missing ${path}`);
        continue;
      }
      const reply = await submit(emu, 'en?diarization=1', multipart([filePart(readFileSync(path), name)]));
      assert.equal(reply.status, 200, `${name}: ${reply.text}`);
      const { jobId } = reply.json() as { jobId: string };
      await waitForStatus(emu, jobId, 'done');
      const { data } = (await get(emu, jobId)).json() as { data: Record<string, unknown> };
      assert.ok(
        Math.abs((data.audio_duration as number) - seconds) < 0.1,
        `${name}: ${data.audio_duration} s`,
      );
      const found = (data.diarization_segments as unknown[]).length;
      assert.ok(found >= regions, `${name}: ${found} speech regions, at least ${regions} expected`);
    }
  });
});
