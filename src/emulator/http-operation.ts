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

/**
 * What an operation's handler gives back: the promise of its answer, or undefined when it
 * answers in callbacks of its own (a live frame) and gives what it throws there to
 * `answerFailure` itself.
 */
export type HandlerResult = Promise<void> | undefined;

/**
 * Run an HTTP operation. Without faults (the usual case) everything before the handler is
 * synchronous, so a handler that answers in callbacks (every live frame) costs no promise;
 * the result is the promise of the answer, or undefined when the handler gave none.
 */
export function runHttpOperation(
  ex: HttpExchange,
  handler: (key: EmulatorKey) => HandlerResult,
): HandlerResult {
  const { ctx } = ex;
  ctx.stats.request(ex.op);
  ex.plan = ctx.faults.plan({ op: ex.op, key: ex.keyHeader });
  if (ex.plan !== NO_FAULTS) return runWithFaults(ex, handler);
  let out: HandlerResult;
  try {
    out = authorizedRun(ex, handler);
  } catch (err) {
    return answerFailure(ex, err);
  }
  return out?.catch((err: unknown) => answerFailure(ex, err));
}

async function runWithFaults(ex: HttpExchange, handler: (key: EmulatorKey) => HandlerResult): Promise<void> {
  try {
    const before = await faultsBefore(ex.plan, ex.ctx.lifecycle, ex.signal);
    if (before) {
      await answerFault(ex, before);
      return;
    }
    await authorizedRun(ex, handler);
  } catch (err) {
    await answerFailure(ex, err);
  }
}

function authorizedRun(ex: HttpExchange, handler: (key: EmulatorKey) => HandlerResult): HandlerResult {
  const { ctx } = ex;
  const key = ctx.keys.authenticate(ex.req.headers['x-api-key']);
  ctx.keys.authorize(key, ex.op);
  ex.admission = ctx.admission(key, ex.op);
  return handler(key);
}

/** What an operation threw, as its answer: its rejection, a 500, or the answer cut once begun. */
export async function answerFailure(ex: HttpExchange, err: unknown): Promise<void> {
  const rejection = toRejection(err);
  if (rejection && !ex.gone) await ex.reject(rejection);
  else if (!ex.gone && !ex.started) {
    await ex.reject(
      new Rejection('SERVER_INTERNAL', { detail: `emulator error: ${(err as Error)?.message ?? err}` }),
    );
  } else ex.cut();
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
