// The suite's own guard: a test file that leaves a handle open fails (test/setup.ts).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';

function runFixture(
  name: string,
  env: Record<string, string> = {},
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--test', '--import', './test/setup.ts', `test/fixtures/${name}`],
      {
        cwd: new URL('..', import.meta.url),
        timeout: 60_000,
        // A nested runner must not believe it reports to this one.
        env: { ...process.env, NODE_TEST_CONTEXT: undefined, SPEECHPIPE_LEAK_GRACE_MS: '1000', ...env },
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: stdout + stderr }),
    );
  });
}

test('a file that leaves a server open fails, naming the handle', async () => {
  const { code, output } = await runFixture('leaky.fixture.ts');
  assert.notEqual(code, 0);
  assert.match(output, /left handles open after its hooks: TCPServerWrap x1/);
});

test('a file that closes its server in after() passes', async () => {
  const { code, output } = await runFixture('tidy.fixture.ts');
  assert.equal(code, 0, output);
});

// The CI failure this guards against: test/sources-files.test.ts removes 16,000 directories in
// its `after` hook, which under load took longer than the grace period, and the guard reported
// the removal's own requests (FSReqCallback x12731) as handles left open.
test('an after hook still doing file-system work past the grace period is not a leak', async () => {
  const cases: Record<string, string>[] = [
    // Past the grace period (1 s), under the cap.
    { FIXTURE_WORK_MS: '2500', SPEECHPIPE_LEAK_WORK_CAP_MS: '60000' },
    // A cap set below the grace period does not shorten it.
    { FIXTURE_WORK_MS: '1500', SPEECHPIPE_LEAK_GRACE_MS: '2500', SPEECHPIPE_LEAK_WORK_CAP_MS: '500' },
  ];
  for (const env of cases) {
    const { code, output } = await runFixture('slow-hook.fixture.ts', env);
    assert.equal(code, 0, `${JSON.stringify(env)}\n${output}`);
  }
});

test('work that never ends is reported at the cap, naming the requests', async () => {
  const { code, output } = await runFixture('slow-hook.fixture.ts', {
    FIXTURE_WORK_MS: '60000',
    SPEECHPIPE_LEAK_WORK_CAP_MS: '2000',
  });
  assert.notEqual(code, 0);
  assert.match(output, /left handles open after its hooks: FSReq/);
});
