// RetryPolicy without a slot or a deadline (a live session's frames after the first): its first
// attempt runs outside the loop, and what follows a failure is the loop's, the same as with a
// slot or a deadline; the attempt's signal is the caller's own when it follows the client's close.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Admission, type Attempt, RetryPolicy } from '../src/client/index.ts';
import {
  DeadlineExceededError,
  localServiceError,
  SpeechServiceError,
  TransportError,
} from '../src/protocol/errors.ts';

const refused = () => localServiceError('CONCURRENCY_LIMIT_EXCEEDED', 'busy', { operation: 'stt.http' });
const quick = { baseMs: 1, maxMs: 2 };

test('a retryable failure of the first attempt is tried again after onRetry, numbered on', async () => {
  const policy = new RetryPolicy();
  const numbers: number[] = [];
  const retried: unknown[] = [];
  const value = await policy.run({
    operation: 'stt.http',
    retry: { maxAttempts: 3, ...quick },
    retryable: () => true,
    onRetry: (err) => retried.push(err),
    run: async ({ number }: Attempt) => {
      numbers.push(number);
      if (number === 0) throw refused();
      return 'accepted';
    },
  });
  assert.equal(value, 'accepted');
  assert.deepEqual(numbers, [0, 1]);
  assert.equal(retried.length, 1);
});

test('a failure that may not be retried, or the last attempt, is thrown as it is', async () => {
  const policy = new RetryPolicy();
  let calls = 0;
  const once = refused();
  await assert.rejects(
    policy.run({
      operation: 'stt.http',
      retryable: () => false,
      run: async () => {
        calls++;
        throw once;
      },
    }),
    (err) => err === once,
  );
  assert.equal(calls, 1);
  calls = 0;
  await assert.rejects(
    policy.run({
      operation: 'stt.http',
      retry: { maxAttempts: 2, ...quick },
      retryable: () => true,
      run: async () => {
        calls++;
        throw refused();
      },
    }),
    (err: Error) => (err as { code?: string }).code === 'CONCURRENCY_LIMIT_EXCEEDED',
  );
  assert.equal(calls, 2);
});

test("the caller's abort and the client's close during the first attempt end the operation with their reason", async () => {
  const closing = new AbortController();
  const policy = new RetryPolicy({ closed: closing.signal });
  const caller = new AbortController();
  const reason = new Error('stop');
  let calls = 0;
  const aborted = policy.run({
    operation: 'stt.http',
    signal: caller.signal,
    retry: quick,
    retryable: () => true,
    run: ({ signal }) =>
      new Promise((_, reject) => {
        calls++;
        // The attempt fails with a retryable refusal, but the caller has stopped: no retry.
        signal.addEventListener('abort', () => reject(refused()), { once: true });
        caller.abort(reason);
      }),
  });
  await assert.rejects(aborted, (err) => err === reason);
  assert.equal(calls, 1);
  const closed = new TransportError('ERR_CLIENT_CLOSED', 'the client was closed');
  const cut = policy.run({
    operation: 'stt.http',
    retryable: () => true,
    run: ({ signal }) =>
      new Promise((_, reject) => {
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
        closing.abort(closed);
      }),
  });
  await assert.rejects(cut, (err) => err === closed);
});

test("a signal that follows the client's close is the attempt's own: no composite signal per attempt", async () => {
  const closing = new AbortController();
  const policy = new RetryPolicy({ closed: closing.signal });
  const session = new AbortController();
  const signals: AbortSignal[] = [];
  const run = async ({ signal }: Attempt) => {
    signals.push(signal);
  };
  await policy.run({ operation: 'stt.http', signal: session.signal, signalFollowsClose: true, run });
  await policy.run({ operation: 'stt.http', signal: session.signal, run });
  assert.equal(signals[0], session.signal);
  // Otherwise it is joined with the client's close.
  assert.notEqual(signals[1], session.signal);
  closing.abort(new Error('closed'));
  assert.equal(signals[1]!.aborted, true);
  assert.equal(signals[0]!.aborted, false);
});

test('an admission refusal whose Retry-After is longer than what is left of the deadline fails at once, the refusal its cause', {
  timeout: 10_000,
}, async () => {
  const admission = new Admission();
  const policy = new RetryPolicy({ admission });
  const refusal = new SpeechServiceError({
    status: 429,
    code: 'CONCURRENCY_LIMIT_EXCEEDED',
    retryable: true,
    retryAfterMs: 600_000,
  });
  let attempts = 0;
  const err = await policy
    .run({
      operation: 'stt.http',
      workload: 'realtime_asr',
      deadline: 60_000,
      run: async () => {
        attempts++;
        throw refusal;
      },
    })
    .catch((e: unknown) => e);
  assert.ok(err instanceof DeadlineExceededError, String(err));
  assert.equal(err.cause, refusal);
  assert.equal(attempts, 1);
  // Nothing waits in the queue for the pause: the workload is paused for others all the same.
  const stats = admission.stats().find((s) => s.workload === 'realtime_asr')!;
  assert.equal(stats.queued, 0);
  assert.equal(stats.running, 0);
  admission.close();
});
