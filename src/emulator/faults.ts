// Fault injection: rules matched per request (operation, key, n-th match, times) and folded
// into one `FaultPlan` that the operation consults at each point where a fault can act.

import type { OperationName } from '../protocol/operations.ts';
import { Rejection } from './rejection.ts';
import type { StatsCollector } from './stats.ts';
import type { FaultAction, FaultRule } from './types.ts';

type StatusAction = Extract<FaultAction, { type: 'status' }>;

export interface FaultPlan {
  delayMs: number;
  stall: boolean;
  statusBefore: StatusAction | undefined;
  statusAfterEffect: StatusAction | undefined;
  resetBefore: boolean;
  resetAfterEffect: boolean;
  resetAfterBytes: number | undefined;
  resetAfterRecords: number | undefined;
  truncateTts: { afterBytes: number | undefined } | undefined;
  slowBytesPerSecond: number | undefined;
  fail: boolean;
}

export const NO_FAULTS: Readonly<FaultPlan> = Object.freeze({
  delayMs: 0,
  stall: false,
  statusBefore: undefined,
  statusAfterEffect: undefined,
  resetBefore: false,
  resetAfterEffect: false,
  resetAfterBytes: undefined,
  resetAfterRecords: undefined,
  truncateTts: undefined,
  slowBytesPerSecond: undefined,
  fail: false,
});

export interface FaultContext {
  op: OperationName;
  /** The raw `x-api-key` value of the request (rules may select a key). */
  key: string | undefined;
}

interface ActiveRule {
  rule: FaultRule;
  matched: number;
  applied: number;
}

/**
 * `nth` counts the requests a rule matches: operation and key; for `truncateTts` only TTS
 * requests; for `endWithoutFinal` only answers about to carry their final record (that rule is
 * evaluated then, by `dropFinal`). With `nth`, the rule applies from the n-th match on, `times`
 * times (default once).
 */
export class FaultInjector {
  readonly #rules: ActiveRule[] = [];
  readonly #stats: StatsCollector;

  constructor(stats: StatsCollector, rules: readonly FaultRule[] = []) {
    this.#stats = stats;
    for (const rule of rules) this.add(rule);
  }

  add(rule: FaultRule): { remove(): void } {
    validateRule(rule);
    const active: ActiveRule = { rule: structuredClone(rule), matched: 0, applied: 0 };
    this.#rules.push(active);
    return {
      remove: () => {
        const i = this.#rules.indexOf(active);
        if (i >= 0) this.#rules.splice(i, 1);
      },
    };
  }

  clear(): void {
    this.#rules.length = 0;
  }

  /** The faults that act on one request (every rule but `endWithoutFinal`). */
  plan(ctx: FaultContext): FaultPlan {
    if (this.#rules.length === 0) return NO_FAULTS;
    const plan: FaultPlan = { ...NO_FAULTS };
    let any = false;
    for (const action of this.#fire(ctx, (a) => a.type !== 'endWithoutFinal')) {
      any = true;
      apply(plan, action);
    }
    return any ? plan : NO_FAULTS;
  }

  /** Whether an answer about to send its final record must end without it. */
  dropFinal(ctx: FaultContext): boolean {
    if (this.#rules.length === 0) return false;
    return this.#fire(ctx, (a) => a.type === 'endWithoutFinal').length > 0;
  }

  #fire(ctx: FaultContext, wanted: (action: FaultAction) => boolean): FaultAction[] {
    const out: FaultAction[] = [];
    for (const active of this.#rules) {
      const { rule } = active;
      if (!wanted(rule.action)) continue;
      if (rule.operation !== '*' && rule.operation !== ctx.op) continue;
      if (rule.key !== undefined && rule.key !== ctx.key) continue;
      if (rule.action.type === 'truncateTts' && !ctx.op.startsWith('tts.')) continue;
      active.matched++;
      if (rule.nth !== undefined && active.matched < rule.nth) continue;
      const times = rule.times ?? (rule.nth !== undefined ? 1 : Number.POSITIVE_INFINITY);
      if (active.applied >= times) continue;
      active.applied++;
      this.#stats.fault(rule.action.type);
      out.push(rule.action);
    }
    return out;
  }
}

function apply(plan: FaultPlan, action: FaultAction): void {
  switch (action.type) {
    case 'status':
      if (action.stage === 'afterEffect') plan.statusAfterEffect ??= action;
      else plan.statusBefore ??= action;
      break;
    case 'delay':
      plan.delayMs += action.ms;
      break;
    case 'reset':
      if (action.afterBytes !== undefined) plan.resetAfterBytes = action.afterBytes;
      else if (action.afterRecords !== undefined) plan.resetAfterRecords = action.afterRecords;
      else if (action.stage === 'afterEffect') plan.resetAfterEffect = true;
      else plan.resetBefore = true;
      break;
    case 'endWithoutFinal':
      break; // evaluated by dropFinal when the final record is due
    case 'truncateTts':
      plan.truncateTts = { afterBytes: action.afterBytes };
      break;
    case 'stall':
      plan.stall = true;
      break;
    case 'slowBody':
      plan.slowBytesPerSecond = action.bytesPerSecond;
      break;
    case 'fail':
      plan.fail = true;
      break;
  }
}

function validateRule(rule: FaultRule): void {
  const a = rule.action as FaultAction | undefined;
  if (!a || typeof a !== 'object') throw new TypeError('a fault rule needs an action');
  if (rule.nth !== undefined && !(Number.isSafeInteger(rule.nth) && rule.nth >= 1))
    throw new RangeError('fault rule nth must be an integer >= 1');
  if (rule.times !== undefined && !(rule.times >= 1)) throw new RangeError('fault rule times must be >= 1');
  if (a.type === 'status' && !(Number.isSafeInteger(a.status) && a.status >= 100 && a.status <= 599))
    throw new RangeError('a status fault needs an HTTP status');
  if (a.type === 'slowBody' && !(a.bytesPerSecond > 0))
    throw new RangeError('slowBody needs bytesPerSecond > 0');
  if (a.type === 'delay' && !(a.ms >= 0)) throw new RangeError('delay needs ms >= 0');
}

/** The rejection a `status` fault answers with (code `HTTP_<status>` when none is given). */
export function statusFaultRejection(action: StatusAction): Rejection {
  const init: ConstructorParameters<typeof Rejection>[1] = {
    status: action.status,
    detail: action.detail ?? `injected ${action.status}`,
  };
  if (action.retryAfter !== undefined) init.retryAfterSec = action.retryAfter;
  if (action.rawBody !== undefined) init.rawBody = action.rawBody;
  if (action.contentType !== undefined) init.contentType = action.contentType;
  return new Rejection(action.code ?? `HTTP_${action.status}`, init);
}

/** The operation's own failure, as the interface names it per operation. */
export function failureRejection(op: OperationName): Rejection {
  if (op === 'batch.get' || op === 'batch.getLegacy')
    return new Rejection('SERVER_INTERNAL', { detail: 'job lookup failed' });
  if (op.startsWith('tts.') || op === 'voices.socket')
    return new Rejection('TTS_SYNTHESIS_FAILED', { detail: 'synthesis failed before output' });
  if (op.startsWith('diarization.'))
    return new Rejection('DIARIZATION_FAILED', { detail: 'diarization failed before a final record' });
  return new Rejection('ASR_TRANSCRIPTION_FAILED', { detail: 'transcription failed before a final record' });
}
