// emulator.stats(): the counters cluster tests and benchmarks read: the largest concurrency per
// workload, batch jobs created, and busy time per workload (operation-milliseconds).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';

const wav = await speechWav('Counting what reached the service.', { pauseMs: 100 });

test('busyMs sums the time operations were held per workload; maxConcurrent and jobsCreated count', async () => {
  const { emulator, client } = await startService({ latency: { perRequestMs: 400 } });
  const before = emulator.stats();
  assert.equal(before.busyMs.fast, 0);
  const began = performance.now();
  await Promise.all([client.fast.transcribeFinal(wav), client.fast.transcribeFinal(wav)]);
  const wall = performance.now() - began;
  await client.batch.submit(wav, { language: 'en' });
  const stats = emulator.stats();
  assert.equal(stats.maxConcurrent.fast, 2);
  assert.equal(stats.jobsCreated, 1);
  // Two requests of at least 400 ms each, at once: about 800 operation-ms, within the wall time twice.
  assert.ok(stats.busyMs.fast >= 780, `busyMs.fast ${stats.busyMs.fast}`);
  assert.ok(stats.busyMs.fast <= 2 * wall + 20, `busyMs.fast ${stats.busyMs.fast} > 2 × ${wall}`);
  assert.ok(stats.busyMs.batch >= 380, `busyMs.batch ${stats.busyMs.batch}`);
  assert.equal(stats.busyMs.tts, 0);
});
