// The common course of every HTTP operation: count it, apply the faults that act before it
// (delay, stall, reset, status), authenticate and authorize, run it (it admits itself after its
// own validation: rate, concurrency), and turn what it throws into the error answer.

import { SpeechServiceError } from '../protocol/errors.ts';
import { type FaultAnswer, failureRejection, faultAfterEffect, faultsBefore, NO_FAULTS } from './faults.ts';
import type { HttpExchange } from './http-exchange.ts';
import { Rejection } from './rejection.ts';
import type { EmulatorKey } from './types.ts';

/** A thrown value as the rejection to answer, or undefined when there is nothing to answer. */
export function toRejection(err: unknown): Rejection | undefined {
  if (err instanceof Rejection) return err;
  if (err instanceof SpeechServiceError) {
    const init: ConstructorParameters<typeof Rejection>[1] = {
      status: err.status,
      detail: err.detail ?? err.message,
    };
    if (err.limit) init.data = err.limit;
    return new Rejection(err.code, init);
  }
  return undefined;
}

export async function runHttpOperation(
  ex: HttpExchange,
  handler: (key: EmulatorKey) => Promise<void>,
): Promise<void> {
  const { ctx } = ex;
  ctx.stats.request(ex.op);
  ex.plan = ctx.faults.plan({ op: ex.op, key: ex.keyHeader });
  try {
    // Without faults (the usual case) nothing to wait for, and no abort signal to make.
    const before = ex.plan === NO_FAULTS ? undefined : await faultsBefore(ex.plan, ctx.lifecycle, ex.signal);
    if (before) {
      await answerFault(ex, before);
      return;
    }
    const key = ctx.keys.authenticate(ex.req.headers['x-api-key']);
    ctx.keys.authorize(key, ex.op);
    ex.admission = ctx.admission(key, ex.op);
    await handler(key);
  } catch (err) {
    const rejection = toRejection(err);
    if (rejection && !ex.gone) await ex.reject(rejection);
    else if (!ex.gone && !ex.started) {
      await ex.reject(
        new Rejection('SERVER_INTERNAL', { detail: `emulator error: ${(err as Error)?.message ?? err}` }),
      );
    } else ex.cut();
  }
}

/**
 * After the operation's effect: a `reset` or `status` fault at stage `afterEffect` answers now
 * (the effect stays). Returns true when the answer was given.
 */
export async function answeredAfterEffect(ex: HttpExchange): Promise<boolean> {
  const answer = faultAfterEffect(ex.plan);
  if (!answer) return false;
  await answerFault(ex, answer);
  return true;
}

/** A fault's answer instead of the operation's: reset the connection, or the error body. */
export async function answerFault(ex: HttpExchange, answer: FaultAnswer): Promise<void> {
  if (answer === 'reset') ex.destroy();
  else await ex.reject(answer);
}

/** The `fail` fault: the operation's own failure, before any output. */
export function throwIfFailing(ex: HttpExchange): void {
  if (ex.plan.fail) throw failureRejection(ex.op);
}
