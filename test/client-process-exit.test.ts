// A program that uses the client over Socket.IO and forgets close() still exits once its
// operations finished, and does not exit while one is still waiting for the service.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { startEmulator } from '../src/emulator/index.ts';

const run = promisify(execFile);
const index = new URL('../src/index.ts', import.meta.url).href;

test('Socket.IO TTS, voices and a live session without close(): the process exits by itself, after its results', {
  timeout: 30_000,
}, async (t) => {
  // Slow answers: a process that exited while waiting would print nothing (exit code 13).
  const emulator = await startEmulator({ latency: { perRequestMs: 300 } });
  const dir = await mkdtemp(join(tmpdir(), 'speechpipe-exit-'));
  t.after(async () => {
    await emulator.close();
    await rm(dir, { recursive: true, force: true });
  });
  const script = join(dir, 'program.ts');
  await writeFile(
    script,
    `import { createClient } from ${JSON.stringify(index)};
const client = createClient({ apiUrl: process.argv[2], apiKey: process.argv[3], env: {} });
const voices = await client.tts.listVoices();
const speech = await client.tts.synthesizeToBuffer({ text: 'Hello there.', transport: 'socketio' });
const session = client.live.stt({ transport: 'socketio' });
await session.send(Buffer.alloc(32000), { final: true });
const final = await session.done;
console.log(JSON.stringify({ voices: voices.length, bytes: speech.pcm.length, final: final.is_final }));
`,
  );
  // execFile's timeout kills a process that stays alive: that rejects with a signal.
  const { stdout } = await run(process.execPath, [script, emulator.url, emulator.apiKey], {
    timeout: 15_000,
  });
  const result = JSON.parse(stdout.trim()) as { voices: number; bytes: number; final: boolean };
  assert.ok(result.voices > 0);
  assert.ok(result.bytes > 0);
  assert.equal(result.final, true);
});
