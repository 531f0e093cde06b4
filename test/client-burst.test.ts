// A burst of 1,000 submissions against the emulator with a real limit below the client's plan
// share: admission control ends it with no failures and a bounded number of rejections.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeWav } from '../src/index.ts';
import { startService } from './helpers/service.ts';

// 0.1 s of a quiet tone: a valid recording, cheap to upload a thousand times.
const pcm = Buffer.alloc(3200);
for (let i = 0; i < pcm.length / 2; i++) pcm.writeInt16LE(Math.round(2000 * Math.sin(i / 5)), i * 2);
const wav = encodeWav(pcm, 16000);

test('a burst of 1,000 batch submissions against an account limit of 2: no failures, rejections bounded', async (t) => {
  const { emulator, client } = await startService(
    {
      limits: { accountConcurrency: { batch: 2 } },
      // Each submission holds its concurrency unit a little, so the burst really overlaps.
      latency: { perRequestMs: 2 },
      jobTiming: { queuedMs: 60_000, processingMs: 60_000 },
    },
    { concurrency: { batch: 8 } },
  );
  const results = await Promise.allSettled(Array.from({ length: 1000 }, () => client.batch.submit(wav)));
  const failures = results.filter((r) => r.status === 'rejected');
  assert.deepEqual(failures, []);
  const stats = emulator.stats();
  assert.equal(stats.jobsCreated, 1000);
  const rejections = stats.rejections.CONCURRENCY_LIMIT_EXCEEDED ?? 0;
  const lane = client.admissionStats().find((s) => s.workload === 'batch')!;
  t.diagnostic(`${rejections} concurrency rejections for 1,000 submissions, ${lane.raises} raises`);
  // Concurrency adapts down instead of hammering, whatever the scheduling: a rejection seen at
  // concurrency c >= 2 lowers it by at least one, so there are at most 7 of those (8 down to 1)
  // plus one per raise. At concurrency 1 a task starts only when none runs, and a lone
  // submission is never refused (the emulator frees its unit as it answers, before it reads
  // another request): the rejections seen at 1 are of submissions already running when it got
  // there, at most 7 each time it gets there (once, plus once per raise). Raises come only
  // after a 10 s cool-down; a run shorter than that has none, so at most 14 rejections.
  assert.ok(rejections <= 14 + 8 * lane.raises, `${rejections} rejections, ${lane.raises} raises`);
  assert.equal(stats.requests['batch.submit'], 1000 + rejections);
  assert.equal(lane.running, 0);
  assert.equal(lane.queued, 0);
  assert.equal(lane.retries, rejections);
});
