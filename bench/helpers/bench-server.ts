// The servers bench/emulator.bench.ts loads, each run as a process of its own:
// `node bench/helpers/bench-server.ts MODE THREADS`, MODE `emulator` (the emulator with limits
// out of the way), `echo` (a bare node:http server answering each POST with one NDJSON line) or
// `sink` (a bare node:http server reading and discarding uploads). THREADS > 1 serves one port
// from that many threads (the emulator: `startEmulatorWorkers`; the bare servers: worker
// threads listening with SO_REUSEPORT, as the emulator's do). Prints `{url, apiKey}` once
// listening; stops on SIGTERM.

import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';

const [mode, threadsText] = (isMainThread ? process.argv.slice(2) : workerData.argv) as [string, string];
const threads = Number(threadsText ?? 1);

if (mode === 'emulator') {
  const { startEmulator, startEmulatorWorkers } = await import('../../src/emulator/index.ts');
  const options = {
    sessionSlots: 100_000,
    // Every session of the highest levels holds a connection of its own.
    server: { maxConnections: 100_000 },
    jobTiming: { queuedMs: 0, processingMs: 0 },
    limits: { accountConcurrency: { realtime_asr: 100_000, batch: 100_000 }, batchRequestBytes: 1 << 30 },
  };
  const emu =
    threads > 1 ? await startEmulatorWorkers({ ...options, workers: threads }) : await startEmulator(options);
  process.stdout.write(`${JSON.stringify({ url: emu.url, apiKey: emu.apiKey })}\n`);
  process.on('SIGTERM', () => void emu.close());
} else {
  const line = `${JSON.stringify({ id: '00000000-0000-4000-8000-000000000001', seq: 0, transcription: 'the baseline answer', words: [], is_speech_final: false, is_final: false })}\n`;
  const server = createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => {
      if (mode === 'echo') {
        res.writeHead(200, { 'content-type': 'application/x-ndjson' });
        res.end(line);
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"jobId":"00000000-0000-4000-8000-000000000001","status":"queued"}');
      }
    });
  });
  const port = isMainThread ? 0 : (workerData.port as number);
  server.listen({ port, host: '127.0.0.1', reusePort: threads > 1 });
  await once(server, 'listening');
  if (!isMainThread) parentPort!.postMessage('up');
  else {
    const { port } = server.address() as AddressInfo;
    const others: Worker[] = [];
    for (let i = 1; i < threads; i++) {
      const w = new Worker(new URL(import.meta.url), { workerData: { argv: [mode, threadsText], port } });
      others.push(w);
      await once(w, 'message');
    }
    process.stdout.write(
      `${JSON.stringify({ url: `http://127.0.0.1:${port}`, apiKey: 'no-key-checked' })}\n`,
    );
    process.on('SIGTERM', () => {
      server.closeAllConnections();
      server.close();
      for (const w of others) void w.terminate();
    });
  }
}
