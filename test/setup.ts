// Loaded into every test process (--import): fails the file when it leaves handles open
// (sockets, servers, child processes, timers, workers) after its tests finish.

import { after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

const count = (list: string[]) => {
  const m = new Map<string, number>();
  for (const r of list) m.set(r, (m.get(r) ?? 0) + 1);
  return m;
};

const baseline = count(process.getActiveResourcesInfo());

function leaks(): string[] {
  const now = count(process.getActiveResourcesInfo());
  const out: string[] = [];
  for (const [type, n] of now) {
    const extra = n - (baseline.get(type) ?? 0);
    if (extra > 0) out.push(`${type} x${extra}`);
  }
  return out;
}

after(async () => {
  // Closing sockets and reaping children takes a few ticks; allow that, not more.
  for (let i = 0; i < 40; i++) {
    if (leaks().length === 0) return;
    await sleep(50);
  }
  const left = leaks();
  if (left.length > 0) throw new Error(`test file left handles open: ${left.join(', ')}`);
});
