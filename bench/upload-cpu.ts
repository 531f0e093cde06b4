// Server CPU per MB of batch upload (issue 16, item 3): the emulator and a bare node:http sink,
// each in its own process, take the same multipart WAV uploads in alternating rounds; CPU time
// (user + system, from /proc) per MB of body, and MB/s. CPU per MB moves much less than MB/s
// when other processes share the machine, so it shows the emulator's own cost.
//
//   node bench/upload-cpu.ts [uploads per round]
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Agent } from 'undici';
import { encodeWav } from '../src/protocol/riff.ts';
import { multipartWav, upload } from './emulator.bench.ts';
import { speechLike } from './helpers/live-load.ts';

const EMULATOR_URL = new URL('../src/emulator/index.ts', import.meta.url).href;
const SERVER = (mode: string) =>
  mode === 'sink'
    ? `
import { createServer } from 'node:http';
const server = createServer((req, res) => { req.on('data', () => {}); req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }); res.end('{}'); }); });
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ url: 'http://127.0.0.1:' + server.address().port, apiKey: 'no-key-checked' }) + '\\n'));
`
    : `
const { startEmulator } = await import(${JSON.stringify(EMULATOR_URL)});
const emu = await startEmulator({ sessionSlots: 100000, jobTiming: { queuedMs: 0, processingMs: 0 },
  limits: { accountConcurrency: { realtime_asr: 100000, batch: 100000 }, batchRequestBytes: 1 << 30 } });
process.stdout.write(JSON.stringify({ url: emu.url, apiKey: emu.apiKey }) + '\\n');
`;
async function start(mode: string) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SERVER(mode)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await once(lines, 'line')) as [string];
  return {
    ...JSON.parse(line),
    child,
    cpu: () => {
      const f = readFileSync(`/proc/${child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return (Number(f[11]) + Number(f[12])) / 100;
    },
  };
}
// The same body as the batch upload row of emulator.bench.ts.
const { body, type } = multipartWav(encodeWav(speechLike(1000), 16_000));
const servers = { emulator: await start('emulator'), sink: await start('sink') };
const agent = new Agent();
const N = Number(process.argv[2] ?? 5);
const res: Record<'emulator' | 'sink', { cpu: number[]; mbs: number[] }> = {
  emulator: { cpu: [], mbs: [] },
  sink: { cpu: [], mbs: [] },
};
for (let round = 0; round < 6; round++)
  for (const name of ['emulator', 'sink'] as const) {
    const s = servers[name];
    const c0 = s.cpu();
    const t0 = performance.now();
    for (let i = 0; i < N; i++) {
      await upload(s, agent, body, type);
    }
    const mb = (N * body.length) / 1e6;
    if (round > 0) {
      res[name].cpu.push(((s.cpu() - c0) * 1000) / mb);
      res[name].mbs.push(mb / ((performance.now() - t0) / 1000));
    }
  }
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
for (const [name, r] of Object.entries(res))
  console.log(
    `${name.padEnd(9)} server CPU ${med(r.cpu).toFixed(2)} ms/MB, ${med(r.mbs).toFixed(0)} MB/s (medians of 5 rounds of ${N} uploads)`,
  );
console.log(
  `ratio MB/s ${(med(res.emulator.mbs) / med(res.sink.mbs)).toFixed(2)}; CPU ms/MB sink/emulator ${(med(res.sink.cpu) / med(res.emulator.cpu)).toFixed(2)}`,
);
await agent.close();
for (const s of Object.values(servers)) s.child.kill();
process.exit(0);
