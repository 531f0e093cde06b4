// Emulator memory under concurrent large uploads (issue 13, item 9): eight 60 MiB WAV uploads at
// once over HTTP (fast, multipart) and over Socket.IO (`audio_file`), the emulator in its own
// process; peak and retained RSS from /proc, against a bare node:http sink that discards the
// body, in the same run.
//
//   node bench/upload-memory.ts

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { io } from 'socket.io-client';
import { request } from 'undici';
import { encodeWav } from '../src/protocol/riff.ts';

const EMULATOR = `
import { startEmulator } from ${JSON.stringify(new URL('../src/emulator/index.ts', import.meta.url).href)};
const emulator = await startEmulator({ limits: { accountConcurrency: { fast: 8 } } });
process.stdout.write(JSON.stringify({ url: emulator.url, apiKey: emulator.apiKey }) + '\\n');
process.stdin.resume();
`;
const SINK = `
import { createServer } from 'node:http';
const server = createServer((req, res) => { req.resume(); req.on('end', () => res.end('{}')); });
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(JSON.stringify({ url: 'http://127.0.0.1:' + server.address().port, apiKey: 'no-key-checked' }) + '\\n');
});
process.stdin.resume();
`;

const MiB = 1024 * 1024;
const UPLOADS = 8;

async function start(code: string) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], {
    stdio: ['pipe', 'pipe', 'inherit'],
    cwd: new URL('..', import.meta.url),
  });
  let line = '';
  for await (const chunk of child.stdout) {
    line += chunk;
    if (line.includes('\n')) break;
  }
  const { url, apiKey } = JSON.parse(line) as { url: string; apiKey: string };
  const mem = () => {
    const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
    const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)![1]);
    return { rssMiB: Math.round(kib('VmRSS') / 1024), peakMiB: Math.round(kib('VmHWM') / 1024) };
  };
  return { url, apiKey, mem, stop: () => child.kill() };
}

function wavOf(bytes: number): Buffer {
  const pcm = Buffer.alloc(bytes - 44);
  for (let i = 0; i + 1 < pcm.length; i += 2) pcm.writeInt16LE(Math.round(3000 * Math.sin(i / 20)), i);
  return encodeWav(pcm, 16_000);
}

async function httpUploads(url: string, apiKey: string, wav: Buffer): Promise<void> {
  const boundary = 'speechpipe-bench';
  const body = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="a.wav"\r\ncontent-type: audio/wav\r\n\r\n`,
    ),
    wav,
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  await Promise.all(
    Array.from({ length: UPLOADS }, async () => {
      const res = await request(`${url}/http/stt?id=${crypto.randomUUID()}&language=en`, {
        method: 'POST',
        headers: { 'x-api-key': apiKey, 'content-type': `multipart/form-data; boundary=${boundary}` },
        body,
      });
      await res.body.dump();
    }),
  );
}

async function socketUploads(url: string, apiKey: string, wav: Buffer): Promise<void> {
  await Promise.all(
    Array.from({ length: UPLOADS }, async () => {
      const socket = io(url, {
        transports: ['websocket'],
        extraHeaders: { 'x-api-key': apiKey, origin: url },
        forceNew: true,
        reconnection: false,
      });
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      await socket
        .timeout(300_000)
        .emitWithAck('audio_file', { id: crypto.randomUUID(), language: 'en', audio: wav });
      socket.close();
    }),
  );
}

const wav = wavOf(60 * MiB);
const rows: string[] = [];
for (const [name, run] of [
  ['HTTP multipart (fast)', httpUploads],
  ['Socket.IO audio_file', socketUploads],
] as const) {
  const emulator = await start(EMULATOR);
  const sink = await start(SINK);
  try {
    const before = emulator.mem();
    await run(emulator.url, emulator.apiKey, wav);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const after = emulator.mem();
    if (name.startsWith('HTTP')) await httpUploads(sink.url, sink.apiKey, wav);
    const baseline = sink.mem();
    rows.push(
      `${name.padEnd(24)} emulator peak ${String(after.peakMiB).padStart(5)} MiB, after ${String(after.rssMiB).padStart(5)} MiB (idle ${before.rssMiB})` +
        (name.startsWith('HTTP')
          ? `; node:http sink peak ${baseline.peakMiB} MiB; ratio ${(after.peakMiB / baseline.peakMiB).toFixed(2)}`
          : ''),
    );
  } finally {
    emulator.stop();
    sink.stop();
  }
}
console.log(`${UPLOADS} concurrent 60 MiB uploads\n${rows.join('\n')}`);
process.exit(0);
