// Fault injection: rules matched per request (operation, key, n-th match, times) and folded
// into one `FaultPlan`. A planned fault counts as applied (its rule's `times`, the statistics)
// only when the operation claims it at the point where it acts, so a request refused before a
// fault could act leaves that fault for the next one.

import { OPERATIONS, type OperationName } from '../protocol/operations.ts';
import type { Lifecycle } from './lifecycle.ts';
import { Rejection } from './rejection.ts';
import { localRuleCounters, type RuleCounters } from './shared-state.ts';
import type { StatsCollector } from './stats.ts';
import type { FaultAction, FaultRule } from './types.ts';

type ActionOf<T extends FaultAction['type']> = Extract<FaultAction, { type: T }>;
type StatusAction = ActionOf<'status'>;

interface ActiveRule {
  id: number;
  rule: FaultRule;
  /** Local, or shared by the threads of one emulator. */
  counters: RuleCounters;
}

/** A rule in force, as the admin endpoint lists it: how often it matched and acted so far. */
export interface ActiveFaultRule {
  id: number;
  rule: FaultRule;
  matched: number;
  applied: number;
}

const timesOf = (rule: FaultRule): number =>
  rule.times ?? (rule.nth !== undefined ? 1 : Number.POSITIVE_INFINITY);

/** A fault planned for one request. It acts only if claimed where it acts. */
export class PlannedFault<A extends FaultAction = FaultAction> {
  readonly action: A;
  readonly #rule: ActiveRule;
  readonly #stats: StatsCollector;
  #claimed: boolean | undefined;

  constructor(action: A, rule: ActiveRule, stats: StatsCollector) {
    this.action = action;
    this.#rule = rule;
    this.#stats = stats;
  }

  /**
   * The fault acts now: count it (once per request). False when its rule ran out since the
   * plan was made (another request took the last application); it must not act then.
   */
  claim(): boolean {
    if (this.#claimed === undefined) {
      this.#claimed = this.#rule.counters.tryApply(timesOf(this.#rule.rule));
      if (this.#claimed) this.#stats.fault(this.action.type);
    }
    return this.#claimed;
  }

  /** False once a claim was refused: the fault no longer acts on this request. */
  get usable(): boolean {
    return this.#claimed !== false;
  }
}

/** The faults that may act on one request, by the point where each acts (the first rule wins). */
export class FaultPlan {
  readonly delays: readonly PlannedFault<ActionOf<'delay'>>[];
  readonly stall: PlannedFault<ActionOf<'stall'>> | undefined;
  readonly statusBefore: PlannedFault<StatusAction> | undefined;
  readonly statusAfterValidation: PlannedFault<StatusAction> | undefined;
  readonly statusAfterEffect: PlannedFault<StatusAction> | undefined;
  readonly resetBefore: PlannedFault<ActionOf<'reset'>> | undefined;
  readonly resetAfterEffect: PlannedFault<ActionOf<'reset'>> | undefined;
  readonly resetAfterBytes: PlannedFault<ActionOf<'reset'> & { afterBytes: number }> | undefined;
  readonly resetAfterRecords: PlannedFault<ActionOf<'reset'> & { afterRecords: number }> | undefined;
  readonly truncateTts: PlannedFault<ActionOf<'truncateTts'>> | undefined;
  readonly slowBody: PlannedFault<ActionOf<'slowBody'>> | undefined;
  readonly #fail: PlannedFault<ActionOf<'fail'>> | undefined;

  constructor(faults: readonly PlannedFault[] = []) {
    const first = <A extends FaultAction>(test: (a: FaultAction) => boolean): PlannedFault<A> | undefined =>
      faults.find((f) => test(f.action)) as PlannedFault<A> | undefined;
    const isReset = (a: FaultAction): a is ActionOf<'reset'> => a.type === 'reset';
    this.delays = faults.filter((f) => f.action.type === 'delay') as PlannedFault<ActionOf<'delay'>>[];
    this.stall = first((a) => a.type === 'stall');
    this.statusBefore = first((a) => a.type === 'status' && (a.stage ?? 'before') === 'before');
    this.statusAfterValidation = first((a) => a.type === 'status' && a.stage === 'afterValidation');
    this.statusAfterEffect = first((a) => a.type === 'status' && a.stage === 'afterEffect');
    this.resetAfterBytes = first((a) => isReset(a) && a.afterBytes !== undefined);
    this.resetAfterRecords = first((a) => isReset(a) && a.afterRecords !== undefined);
    const atStage = (a: FaultAction) =>
      isReset(a) && a.afterBytes === undefined && a.afterRecords === undefined;
    this.resetBefore = first((a) => atStage(a) && (a as ActionOf<'reset'>).stage !== 'afterEffect');
    this.resetAfterEffect = first((a) => atStage(a) && (a as ActionOf<'reset'>).stage === 'afterEffect');
    this.truncateTts = first((a) => a.type === 'truncateTts');
    this.slowBody = first((a) => a.type === 'slowBody');
    this.#fail = first((a) => a.type === 'fail');
  }

  /**
   * Whether the operation's own failure (`fail`) happens now. Reading it claims the fault, so
   * read it only where the failure happens.
   */
  get fail(): boolean {
    return this.#fail?.claim() ?? false;
  }

  /** The slow body rate, when that fault acts on the bytes about to be sent (claims it). */
  slowBytesPerSecond(): number | undefined {
    return this.slowBody?.claim() ? this.slowBody.action.bytesPerSecond : undefined;
  }
}

/** The plan of a request no rule matches (its fields are read-only). */
export const NO_FAULTS = new FaultPlan();

export interface FaultContext {
  op: OperationName;
  /** The raw `x-api-key` value of the request (rules may select a key). */
  key: string | undefined;
}

/**
 * `nth` counts the requests a rule matches: operation and key; for `truncateTts` only TTS
 * requests; for `endWithoutFinal` only answers about to carry their final record (that rule is
 * evaluated then, by `dropFinal`). With `nth`, the rule applies from the n-th match on, `times`
 * times (default once); an application counts when the action acts.
 */
export class FaultInjector {
  readonly #rules: ActiveRule[] = [];
  readonly #stats: StatsCollector;
  #nextId = 1;

  constructor(stats: StatsCollector, rules: readonly FaultRule[] = []) {
    this.#stats = stats;
    for (const rule of rules) this.add(rule);
  }

  add(rule: FaultRule): { id: number; remove(): void } {
    return this.insert(this.#nextId++, rule, localRuleCounters());
  }

  /** Add `rule` under an id and counters given by whoever numbers the rules of several threads. */
  insert(id: number, rule: FaultRule, counters: RuleCounters): { id: number; remove(): void } {
    validateRule(rule);
    const active: ActiveRule = { id, rule: structuredClone(rule), counters };
    this.#rules.push(active);
    return {
      id: active.id,
      remove: () => {
        const i = this.#rules.indexOf(active);
        if (i >= 0) this.#rules.splice(i, 1);
      },
    };
  }

  /** Remove the rule `add` numbered `id`; false when no such rule is in force. */
  remove(id: number): boolean {
    const i = this.#rules.findIndex((r) => r.id === id);
    if (i < 0) return false;
    this.#rules.splice(i, 1);
    return true;
  }

  /** Remove every rule; returns how many there were. */
  clear(): number {
    const n = this.#rules.length;
    this.#rules.length = 0;
    return n;
  }

  /** The rules in force, in the order they are matched (copies). */
  list(): ActiveFaultRule[] {
    return this.#rules.map(({ id, rule, counters }) => ({
      id,
      rule: structuredClone(rule),
      matched: counters.matched(),
      applied: counters.applied(),
    }));
  }

  /** The faults that may act on one request (every rule but `endWithoutFinal`). */
  plan(ctx: FaultContext): FaultPlan {
    if (this.#rules.length === 0) return NO_FAULTS;
    const planned = this.#match(ctx, (a) => a.type !== 'endWithoutFinal');
    return planned.length === 0 ? NO_FAULTS : new FaultPlan(planned);
  }

  /** Whether an answer about to send its final record must end without it (acts at once). */
  dropFinal(ctx: FaultContext): boolean {
    if (this.#rules.length === 0) return false;
    return this.#match(ctx, (a) => a.type === 'endWithoutFinal').some((f) => f.claim());
  }

  #match(ctx: FaultContext, wanted: (action: FaultAction) => boolean): PlannedFault[] {
    const out: PlannedFault[] = [];
    for (const active of this.#rules) {
      const { rule } = active;
      if (!wanted(rule.action)) continue;
      if (rule.operation !== '*' && rule.operation !== ctx.op) continue;
      if (rule.key !== undefined && rule.key !== ctx.key) continue;
      if (rule.action.type === 'truncateTts' && !ctx.op.startsWith('tts.')) continue;
      const matched = active.counters.match();
      if (rule.nth !== undefined && matched < rule.nth) continue;
      if (active.counters.applied() >= timesOf(rule)) continue;
      out.push(new PlannedFault(rule.action, active, this.#stats));
    }
    return out;
  }
}

/** What a fault does instead of the operation's answer: reset the connection, or answer this. */
export type FaultAnswer = 'reset' | Rejection;

/**
 * The faults that act before the operation, in order: delay, stall (until the request goes
 * away), reset, status. Returns the answer they give instead, if any.
 */
export async function faultsBefore(
  plan: FaultPlan,
  lifecycle: Lifecycle,
  signal: AbortSignal,
): Promise<FaultAnswer | undefined> {
  let delayMs = 0;
  for (const delay of plan.delays) if (delay.claim()) delayMs += delay.action.ms;
  if (delayMs > 0) await lifecycle.sleep(delayMs, signal);
  if (plan.stall?.claim()) await lifecycle.sleep(Number.POSITIVE_INFINITY, signal);
  if (plan.resetBefore?.claim()) return 'reset';
  if (plan.statusBefore?.claim()) return statusFaultRejection(plan.statusBefore.action);
  return undefined;
}

/**
 * Where the operation admits itself, after its own validation and before the request rate,
 * concurrency and its effect (TTS: after the voice, content policy and model, before synthesis):
 * a `status` fault at stage `afterValidation`, if one acts.
 */
export function faultAfterValidation(plan: FaultPlan): Rejection | undefined {
  if (plan.statusAfterValidation?.claim()) return statusFaultRejection(plan.statusAfterValidation.action);
  return undefined;
}

/** After the operation's effect: a `reset` or `status` fault at stage `afterEffect`, if one acts. */
export function faultAfterEffect(plan: FaultPlan): FaultAnswer | undefined {
  if (plan.resetAfterEffect?.claim()) return 'reset';
  if (plan.statusAfterEffect?.claim()) return statusFaultRejection(plan.statusAfterEffect.action);
  return undefined;
}

/** How an answer's output ends early: `reset` cuts the connection; `end` (truncateTts) ends it normally. */
export type OutputCut = 'reset' | 'end';

/**
 * What is about to go out: plain body bytes (an error or JSON body), a record (an NDJSON record,
 * a Socket.IO result event) or audio (a TTS frame, a `tts_audio` event).
 */
export type OutputUnit = 'bytes' | 'record' | 'audio';

/**
 * An answer's output counted against the plan's cuts, the same way on both transports: `reset`
 * after N bytes or N records, and `truncateTts` after N bytes of audio output. Bytes are what the
 * answer carries (HTTP: body bytes; Socket.IO: a record's NDJSON line, a `tts_audio` event's PCM);
 * records are records and audio units. The cut comes once N is reached: HTTP sends exactly N
 * bytes (it may stop inside a record); Socket.IO events are never split, so an event that would
 * pass N is not sent. The fault that cuts is claimed when it cuts.
 */
export class OutputMeter {
  readonly #plan: FaultPlan;
  #bytes = 0;
  #records = 0;

  constructor(plan: FaultPlan) {
    this.#plan = plan;
  }

  /** Whether a byte or record cut may still act (then output goes out one unit at a time). */
  get counting(): boolean {
    const { resetAfterBytes, resetAfterRecords, truncateTts } = this.#plan;
    return (
      resetAfterBytes?.usable === true ||
      resetAfterRecords?.usable === true ||
      (truncateTts?.usable === true && truncateTts.action.afterBytes !== undefined)
    );
  }

  /**
   * HTTP: of `n` bytes about to be written as `unit`, how many go out, and the cut that comes
   * after them (a reset after N records comes after the record's last byte, see `unitDone`).
   */
  take(n: number, unit: OutputUnit): { bytes: number; cut?: OutputCut } {
    if (unit !== 'bytes') {
      const cut = this.#recordCut();
      if (cut) return { bytes: 0, cut };
    }
    const cut = this.#byteCut(n, unit);
    if (!cut) {
      this.#bytes += n;
      return { bytes: n };
    }
    const bytes = Math.max(0, cut.at - this.#bytes);
    this.#bytes += bytes;
    return { bytes, cut: cut.how };
  }

  /** HTTP: a record or audio unit was written whole; the reset after N records, if due now. */
  unitDone(): OutputCut | undefined {
    this.#records++;
    return this.#recordCut();
  }

  /** Socket.IO: whether an event of `n` bytes goes out, and the cut that comes before or after it. */
  event(n: number, unit: Exclude<OutputUnit, 'bytes'>): { send: boolean; cut?: OutputCut } {
    const early = this.#recordCut();
    if (early) return { send: false, cut: early };
    const cut = this.#byteCut(n, unit);
    if (cut && this.#bytes + n > cut.at) return { send: false, cut: cut.how };
    this.#bytes += n;
    this.#records++;
    const after = cut?.how ?? this.#recordCut();
    return after ? { send: true, cut: after } : { send: true };
  }

  /** The byte cut that `n` more bytes reach (claimed), if any: the nearer of reset and truncation. */
  #byteCut(n: number, unit: OutputUnit): { at: number; how: OutputCut } | undefined {
    const { resetAfterBytes: reset, truncateTts: truncate } = this.#plan;
    const cuts: { at: number; how: OutputCut; fault: PlannedFault }[] = [];
    if (reset?.usable) cuts.push({ at: reset.action.afterBytes, how: 'reset', fault: reset });
    if (unit === 'audio' && truncate?.usable && truncate.action.afterBytes !== undefined)
      cuts.push({ at: truncate.action.afterBytes, how: 'end', fault: truncate });
    cuts.sort((a, b) => a.at - b.at);
    for (const cut of cuts) {
      if (this.#bytes + n < cut.at) return undefined;
      if (cut.fault.claim()) return cut;
    }
    return undefined;
  }

  /** The reset after N records, once N records went out (claimed). */
  #recordCut(): OutputCut | undefined {
    const reset = this.#plan.resetAfterRecords;
    if (reset?.usable && this.#records >= reset.action.afterRecords && reset.claim()) return 'reset';
    return undefined;
  }
}

/** Every fault action's `type`, for the message that refuses another. */
const ACTION_TYPES = [
  'status',
  'delay',
  'reset',
  'endWithoutFinal',
  'truncateTts',
  'stall',
  'slowBody',
  'fail',
] as const satisfies readonly FaultAction['type'][];
// Each action type is listed: a new one left out fails the type check here.
const _allActionTypes: readonly (typeof ACTION_TYPES)[number][] = [] as FaultAction['type'][];

const isCount = (n: unknown, min: number): n is number => Number.isSafeInteger(n) && (n as number) >= min;
const isStage = (stage: unknown) => stage === undefined || stage === 'before' || stage === 'afterEffect';

/** Refuse a rule the injector could not apply as written (RangeError; TypeError for no action). */
export function validateRule(rule: FaultRule): void {
  const a = rule?.action as FaultAction | undefined;
  if (!a || typeof a !== 'object') throw new TypeError('a fault rule needs an action');
  if (rule.operation !== '*' && !(OPERATIONS as readonly string[]).includes(rule.operation))
    throw new RangeError(
      `unknown operation ${JSON.stringify(rule.operation)}: use one of ${OPERATIONS.join(', ')}, or * for every operation`,
    );
  if (rule.nth !== undefined && !isCount(rule.nth, 1))
    throw new RangeError('fault rule nth must be an integer >= 1');
  if (rule.times !== undefined && !(isCount(rule.times, 1) || rule.times === Number.POSITIVE_INFINITY))
    throw new RangeError('fault rule times must be an integer >= 1 (or Infinity)');
  switch (a.type) {
    case 'status':
      if (!(Number.isSafeInteger(a.status) && a.status >= 100 && a.status <= 599))
        throw new RangeError('a status fault needs an HTTP status');
      if (!(isStage(a.stage) || a.stage === 'afterValidation'))
        throw new RangeError('status stage must be before, afterValidation or afterEffect');
      if (
        a.retryAfter !== undefined &&
        !(typeof a.retryAfter === 'number'
          ? Number.isFinite(a.retryAfter) && a.retryAfter >= 0
          : typeof a.retryAfter === 'string' && a.retryAfter.trim() !== '')
      )
        throw new RangeError('retryAfter must be seconds >= 0 or an HTTP date');
      return;
    case 'delay':
      if (!(Number.isFinite(a.ms) && a.ms >= 0)) throw new RangeError('delay needs finite ms >= 0');
      return;
    case 'reset': {
      if (!isStage(a.stage)) throw new RangeError('reset stage must be before or afterEffect');
      if (a.afterBytes !== undefined && !isCount(a.afterBytes, 0))
        throw new RangeError('reset afterBytes must be an integer >= 0');
      if (a.afterRecords !== undefined && !isCount(a.afterRecords, 0))
        throw new RangeError('reset afterRecords must be an integer >= 0');
      const given = [a.stage, a.afterBytes, a.afterRecords].filter((v) => v !== undefined).length;
      if (given > 1) throw new RangeError('reset takes one of stage, afterBytes, afterRecords');
      return;
    }
    case 'truncateTts':
      if (a.afterBytes !== undefined && !isCount(a.afterBytes, 0))
        throw new RangeError('truncateTts afterBytes must be an integer >= 0');
      return;
    case 'slowBody':
      if (!(Number.isFinite(a.bytesPerSecond) && a.bytesPerSecond > 0))
        throw new RangeError('slowBody needs a finite bytesPerSecond > 0');
      return;
    case 'endWithoutFinal':
    case 'stall':
    case 'fail':
      return;
    default:
      throw new RangeError(
        `unknown fault action ${JSON.stringify((a as { type?: unknown }).type)}: use one of ${ACTION_TYPES.join(', ')}`,
      );
  }
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
