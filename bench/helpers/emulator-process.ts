// Run the emulator in its own process (so a benchmark measures only the client's memory and
// CPU), with options given as JSON; resolves with its URL and key, and a stop function.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import type { EmulatorOptions } from '../../src/emulator/index.ts';

const CHILD = `
import { startEmulator } from ${JSON.stringify(new URL('../../src/emulator/index.ts', import.meta.url).href)};
const emulator = await startEmulator(JSON.parse(process.argv[1]));
process.stdout.write(JSON.stringify({ url: emulator.url, apiKey: emulator.apiKey }) + '\\n');
process.stdin.resume();
process.stdin.on('end', async () => { await emulator.close(); process.exit(0); });
`;

export async function startEmulatorProcess(
  options: EmulatorOptions,
): Promise<{ url: string; apiKey: string; pid: number; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD, JSON.stringify(options)], {
    stdio: ['pipe', 'pipe', 'inherit'],
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
  });
  let line = '';
  for await (const chunk of child.stdout) {
    line += chunk;
    if (line.includes('\n')) break;
  }
  const { url, apiKey } = JSON.parse(line) as { url: string; apiKey: string };
  return {
    url,
    apiKey,
    pid: child.pid!,
    async stop() {
      child.stdin.end();
      if (child.exitCode === null) await once(child, 'exit');
    },
  };
}
