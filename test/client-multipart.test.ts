import assert from 'node:assert/strict';
import { createReadStream } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { after, test } from 'node:test';
import busboy from 'busboy';
import { uploadSource } from '../src/client/input.ts';
import { multipartBody } from '../src/client/multipart.ts';
import { encodeWav } from '../src/index.ts';
import { startService } from './helpers/service.ts';

const dir = await mkdtemp(join(tmpdir(), 'speechpipe-mp-'));
after(() => rm(dir, { recursive: true, force: true }));

async function parse(body: Readable, contentType: string) {
  const parts: { name: string; filename?: string; type?: string; data: Buffer }[] = [];
  await new Promise<void>((resolve, reject) => {
    const bb = busboy({ headers: { 'content-type': contentType } });
    bb.on('file', (name, stream, info) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () =>
        parts.push({ name, filename: info.filename, type: info.mimeType, data: Buffer.concat(chunks) }),
      );
    });
    bb.on('field', (name, value) => parts.push({ name, data: Buffer.from(value) }));
    bb.on('close', resolve);
    bb.on('error', reject);
    body.pipe(bb);
  });
  return parts;
}

async function bytes(r: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of r) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

test('multipart: one `file` part, exact length, parsed by busboy', async () => {
  const data = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
  const path = join(dir, 'talk "1".wav');
  await writeFile(path, data);
  const source = await uploadSource(path);
  assert.equal(source.size, data.length);
  assert.equal(source.contentType, 'audio/wav');
  const mp = multipartBody({
    filename: source.filename,
    contentType: source.contentType,
    stream: source.open()!,
    size: source.size,
  });
  const raw = await bytes(mp.body);
  assert.equal(raw.length, mp.length, 'declared length is exact');
  const parts = await parse(Readable.from([raw]), mp.contentType);
  assert.equal(parts.length, 1);
  assert.equal(parts[0]!.name, 'file');
  assert.equal(parts[0]!.filename, 'talk _1_.wav', 'quotes and line breaks are neutralised');
  assert.deepEqual(parts[0]!.data, data);
});

test('inputs: files and bytes reopen for a retry, streams only once', async () => {
  const buf = await uploadSource(Buffer.from('abc'));
  assert.equal(buf.reopenable, true);
  assert.deepEqual(await bytes(buf.open()!), Buffer.from('abc'));
  assert.deepEqual(await bytes(buf.open()!), Buffer.from('abc'));
  const stream = await uploadSource({ stream: Readable.from([Buffer.from('xyz')]), filename: 'a.mp3' });
  assert.equal(stream.reopenable, false);
  assert.equal(stream.contentType, 'audio/mpeg');
  assert.ok(stream.open());
  assert.equal(stream.open(), undefined);
  await assert.rejects(uploadSource(join(dir, 'missing.wav')), { code: 'ERR_INVALID_ARGUMENT' });
  await assert.rejects(uploadSource(dir), { code: 'ERR_INVALID_ARGUMENT' });
});

test('destroying the multipart body releases the file stream', async () => {
  const path = join(dir, 'big.bin');
  await writeFile(path, Buffer.alloc(1 << 20));
  const source = await uploadSource(path);
  const file = source.open()!;
  const mp = multipartBody({
    filename: 'big.bin',
    contentType: 'application/octet-stream',
    stream: file,
    size: source.size,
  });
  mp.body.once('data', () => mp.body.destroy());
  await new Promise((resolve) => mp.body.once('close', resolve));
  await new Promise((resolve) => (file.destroyed ? resolve(undefined) : file.once('close', resolve)));
  assert.ok(file.destroyed);
});

test('destroying the multipart body releases a stalled input stream at once', {
  timeout: 5_000,
}, async () => {
  const stalled = new Readable({ read() {} });
  stalled.push(Buffer.from('first chunk, then nothing'));
  const mp = multipartBody({ filename: 'a.wav', contentType: 'audio/wav', stream: stalled, size: undefined });
  const chunks: Buffer[] = [];
  mp.body.on('data', (c: Buffer) => chunks.push(c));
  // Until the body has passed the input's one chunk on and waits for the next.
  while (!Buffer.concat(chunks).includes('first chunk')) await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  mp.body.destroy();
  await new Promise((resolve) => mp.body.once('close', resolve));
  assert.ok(stalled.destroyed, 'the input is released, not left waiting for its next chunk');
});

test("an upload whose input fails fails with the input's own error: never uncaught, not a lost connection, not retried", async () => {
  const { client } = await startService();
  const wav = encodeWav(Buffer.alloc(32_000), 16_000);
  let opened = 0;
  const inputs = {
    // Fails when the file is opened: before the request body is read, the request still connecting.
    'cannot be opened': () => {
      opened++;
      return createReadStream(join(dir, 'gone.wav'));
    },
    'fails while read': () => {
      opened++;
      let sent = false;
      return new Readable({
        read() {
          if (sent) this.destroy(Object.assign(new Error('read failed'), { code: 'EIO' }));
          else this.push(wav.subarray(0, 1000));
          sent = true;
        },
      });
    },
  };
  for (const [name, input] of Object.entries(inputs)) {
    for (const upload of [
      () => client.batch.submit(input),
      () => client.fast.transcribeFinal(input),
      () => client.fast.transcribeFinal(input, { transport: 'socketio' }),
    ]) {
      opened = 0;
      const err = (await upload().catch((e: unknown) => e)) as NodeJS.ErrnoException;
      assert.equal(err.code, name === 'cannot be opened' ? 'ENOENT' : 'EIO', `${name}: ${err}`);
      assert.equal(opened, 1, `${name}: opened once, not retried`);
    }
  }
  // Nothing held: the next upload goes through.
  assert.equal((await client.fast.transcribeFinal(wav)).is_final, true);
  await new Promise((resolve) => setImmediate(resolve)); // a released slot leaves the queue
  for (const w of client.admissionStats()) assert.equal(w.running, 0, w.workload);
});

test('an upload whose input gives more or fewer bytes than its declared size fails as the input: not ambiguous, not retried', async () => {
  const { client } = await startService();
  const wav = encodeWav(Buffer.alloc(32_000), 16_000);
  for (const size of [wav.length - 100, wav.length + 100]) {
    let opened = 0;
    // A file that grew or shrank after its size was read gives the same.
    const input = {
      stream: () => {
        opened++;
        return Readable.from([wav.subarray(0, 1000), wav.subarray(1000)]);
      },
      size,
      filename: 'a.wav',
    };
    for (const upload of [() => client.batch.submit(input), () => client.fast.transcribeFinal(input)]) {
      opened = 0;
      const err = (await upload().catch((e: unknown) => e)) as { code?: string; ambiguous?: boolean };
      assert.equal(err.code, 'ERR_INVALID_ARGUMENT', `declared ${size} of ${wav.length}: ${err}`);
      assert.notEqual(err.ambiguous, true);
      assert.equal(opened, 1, 'not retried');
    }
  }
});
