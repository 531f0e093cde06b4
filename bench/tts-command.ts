// `speechpipe tts` (built-in emulator, espeak-ng engine) against espeak-ng writing the same
// text to a WAV file directly, in the same run, alternating, median of 3. The ratio is
// espeak-ng's wall time over ours (1.0: as fast as the engine alone).
//
//   node bench/tts-command.ts [--chars N]

import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { BUILTIN_SENTENCES } from '../src/benchmark/media.ts';

const exec = promisify(execFile);
const { values } = parseArgs({ options: { chars: { type: 'string', default: '3000' } } });
let text = '';
for (let i = 0; text.length < Number(values.chars); i++)
  text += `${BUILTIN_SENTENCES[i % BUILTIN_SENTENCES.length]} `;
text = text.trim();
const dir = await mkdtemp(join(tmpdir(), 'speechpipe-bench-tts-'));
// The built command, as installed users run it (npm run build); the sources otherwise.
const built = new URL('../dist/cli/main.js', import.meta.url).pathname;
const CLI = existsSync(built) ? built : new URL('../src/cli/main.ts', import.meta.url).pathname;
const env = { ...process.env };
delete env.API_URL;
delete env.API_KEY;

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return (performance.now() - t) / 1000;
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const ours: number[] = [];
const engine: number[] = [];
try {
  for (let round = 0; round < 3; round++) {
    engine.push(await time(() => exec('espeak-ng', ['-w', join(dir, 'espeak.wav'), '-v', 'en-us', text])));
    ours.push(
      await time(() =>
        exec(
          process.execPath,
          [CLI, 'tts', text, '--out', join(dir, 'ours.wav'), '--transport', 'socketio'],
          { env },
        ),
      ),
    );
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
const o = median(ours);
const e = median(engine);
console.log(`${text.length} characters; median of 3 wall times`);
console.log(
  `speechpipe tts (${CLI.endsWith('.js') ? 'dist' : 'sources'}, built-in emulator, Socket.IO, 24 kHz)  ${o.toFixed(2)} s`,
);
console.log(`espeak-ng -w (22.05 kHz, no service)                   ${e.toFixed(2)} s`);
console.log(`ratio (espeak-ng / speechpipe tts): ${(e / o).toFixed(2)}`);
