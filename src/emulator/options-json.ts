// Emulator options given as JSON (the `speechpipe emulator --accounts/--faults` files, rules
// posted to the admin endpoint): checked field by field, each refusal naming the field and
// what it expected, so a test written in any language learns what to fix.

import { InvalidArgumentError } from '../protocol/errors.ts';
import { COUNT_LIMITS, DEFAULT_LIMITS, type LimitOverrides, TIERS } from '../protocol/limits.ts';
import { OPERATIONS } from '../protocol/operations.ts';
import { CAPABILITIES, type EmulatorKey, type FaultRule } from './types.ts';

/** A JSON value that is not what the emulator expects at `field` (a path like `keys[1].tier`). */
export class EmulatorJsonError extends InvalidArgumentError {
  override name = 'EmulatorJsonError';
  readonly field: string;
  readonly expected: string;

  /** `got` says what was found (`describe(value)`, or words for what cannot be shown). */
  constructor(field: string, expected: string, got: string) {
    super(`${field}: expected ${expected}, got ${got}`);
    this.field = field;
    this.expected = expected;
  }
}

/**
 * `JSON.parse` for text that may hold API keys (an accounts or faults file, a fault rule posted
 * to the admin endpoint). Its `SyntaxError` keeps V8's message when that gives a position, and
 * drops it when it quotes the text instead (an unexpected token: V8 shows up to 20 characters
 * around it, or the whole text when short, and those can be a key).
 */
export function parseKeyedJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const message = (err as Error).message;
    if (!/is not valid JSON$/.test(message)) throw err;
    throw new SyntaxError('Unexpected token (the text around it is not shown: it may hold an API key)');
  }
}

/** What the accounts file gives: the keys (with account, tier, capabilities) and limit overrides. */
export interface AccountsJson {
  keys: EmulatorKey[];
  limits: LimitOverrides;
}

/**
 * The accounts file: `{"keys": [{key, account, tier, capabilities?}], "limits"?: {...}}`.
 * `capabilities` defaults to all four; `limits` takes the names of `DEFAULT_LIMITS` (per-workload
 * concurrency in `accountConcurrency`, TTS text per tier in `ttsInputCharacters`).
 */
export function accountsFromJson(value: unknown): AccountsJson {
  const top = object(value, '(top level)', ['keys', 'limits']);
  if (!Array.isArray(top.keys) || top.keys.length === 0)
    throw bad('keys', 'a nonempty array of keys', top.keys);
  const seen = new Set<string>();
  const keys = top.keys.map((entry, i): EmulatorKey => {
    const at = `keys[${i}]`;
    const k = object(entry, at, ['key', 'account', 'tier', 'capabilities']);
    const key = headerSafe(k.key, `${at}.key`);
    if (seen.has(key))
      throw new EmulatorJsonError(`${at}.key`, 'a key no earlier entry has', 'a repeated key');
    seen.add(key);
    const account = nonEmptyString(k.account, `${at}.account`);
    const tier = oneOf(k.tier, `${at}.tier`, TIERS);
    let capabilities = [...CAPABILITIES];
    if (k.capabilities !== undefined) {
      if (!Array.isArray(k.capabilities))
        throw bad(`${at}.capabilities`, `an array of ${list(CAPABILITIES)}`, k.capabilities);
      capabilities = k.capabilities.map((c, j) => oneOf(c, `${at}.capabilities[${j}]`, CAPABILITIES));
    }
    return { key, account, tier, capabilities };
  });
  return { keys, limits: top.limits === undefined ? {} : limitsFromJson(top.limits, 'limits') };
}

function limitsFromJson(value: unknown, at: string): LimitOverrides {
  const names = Object.keys(DEFAULT_LIMITS);
  const given = object(value, at, names);
  const out: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(given)) {
    const count = COUNT_LIMITS.has(name);
    const current = (DEFAULT_LIMITS as unknown as Record<string, number | Record<string, number>>)[name]!;
    if (typeof current === 'number') {
      out[name] = limitValue(v, `${at}.${name}`, count);
      continue;
    }
    const inner = object(v, `${at}.${name}`, Object.keys(current));
    out[name] = Object.fromEntries(
      Object.entries(inner).map(([k, n]) => [k, limitValue(n, `${at}.${name}.${k}`, count)]),
    );
  }
  return out as LimitOverrides;
}

function limitValue(n: unknown, at: string, count: boolean): number {
  const ok = typeof n === 'number' && Number.isFinite(n) && n > 0 && (!count || Number.isSafeInteger(n));
  if (!ok) throw bad(at, count ? 'a positive integer' : 'a positive number', n);
  return n as number;
}

/** The faults file, or a POST to the admin endpoint: an array of fault rules. */
export function faultRulesFromJson(value: unknown, at = ''): FaultRule[] {
  if (!Array.isArray(value)) throw bad(at || '(top level)', 'an array of fault rules', value);
  return value.map((rule, i) => faultRuleFromJson(rule, `${at}[${i}]`));
}

const RULE_FIELDS = ['operation', 'key', 'nth', 'times', 'action'];

/** Fields of each action type beyond `type`, and the ones it requires. */
const ACTION_FIELDS: Record<string, { fields: string[]; required: string[] }> = {
  status: {
    fields: ['status', 'code', 'detail', 'retryAfter', 'rawBody', 'contentType', 'stage'],
    required: ['status'],
  },
  delay: { fields: ['ms'], required: ['ms'] },
  reset: { fields: ['stage', 'afterBytes', 'afterRecords'], required: [] },
  endWithoutFinal: { fields: [], required: [] },
  truncateTts: { fields: ['afterBytes'], required: [] },
  stall: { fields: [], required: [] },
  slowBody: { fields: ['bytesPerSecond'], required: ['bytesPerSecond'] },
  fail: { fields: [], required: [] },
};

/** One fault rule as `emulator.faults.add` takes it; `at` prefixes the field names in errors. */
export function faultRuleFromJson(value: unknown, at = ''): FaultRule {
  const field = (name: string) => (at ? `${at}.${name}` : name);
  const r = object(value, at || '(top level)', RULE_FIELDS);
  const operation = oneOf(r.operation, field('operation'), ['*', ...OPERATIONS]);
  // Built in the order a reader expects the fields, the action last.
  const rule = { operation } as FaultRule;
  if (r.key !== undefined) rule.key = headerSafe(r.key, field('key'));
  if (r.nth !== undefined) rule.nth = integer(r.nth, field('nth'), 1);
  if (r.times !== undefined) rule.times = integer(r.times, field('times'), 1);
  const actionAt = field('action');
  if (r.action === undefined) throw new EmulatorJsonError(actionAt, 'an action object', 'nothing');
  const type = (r.action as { type?: unknown } | null)?.type;
  const shape =
    typeof type === 'string' && Object.hasOwn(ACTION_FIELDS, type) ? ACTION_FIELDS[type] : undefined;
  if (!shape) {
    object(r.action, actionAt, ['type']);
    throw bad(`${actionAt}.type`, list(Object.keys(ACTION_FIELDS)), type);
  }
  const a = object(r.action, actionAt, ['type', ...shape.fields]);
  for (const name of shape.required)
    if (a[name] === undefined)
      throw new EmulatorJsonError(`${actionAt}.${name}`, `a value (${type} needs it)`, 'nothing');
  const f = (name: string) => `${actionAt}.${name}`;
  switch (type) {
    case 'status': {
      const action: Extract<FaultRule['action'], { type: 'status' }> = {
        type,
        status: integer(a.status, f('status'), 100, 599),
      };
      if (a.code !== undefined) action.code = nonEmptyString(a.code, f('code'));
      if (a.detail !== undefined) action.detail = string(a.detail, f('detail'));
      if (a.retryAfter !== undefined) {
        const ok =
          typeof a.retryAfter === 'number'
            ? Number.isFinite(a.retryAfter) && a.retryAfter >= 0
            : typeof a.retryAfter === 'string' && a.retryAfter.trim() !== '';
        if (!ok) throw bad(f('retryAfter'), 'seconds >= 0 or an HTTP date string', a.retryAfter);
        action.retryAfter = a.retryAfter as number | string;
      }
      if (a.rawBody !== undefined) action.rawBody = string(a.rawBody, f('rawBody'));
      if (a.contentType !== undefined) action.contentType = nonEmptyString(a.contentType, f('contentType'));
      if (a.stage !== undefined)
        action.stage = oneOf(a.stage, f('stage'), ['before', 'afterValidation', 'afterEffect'] as const);
      rule.action = action;
      break;
    }
    case 'delay':
      rule.action = { type, ms: number(a.ms, f('ms'), 0) };
      break;
    case 'reset': {
      const action: Extract<FaultRule['action'], { type: 'reset' }> = { type };
      if (a.stage !== undefined)
        action.stage = oneOf(a.stage, f('stage'), ['before', 'afterEffect'] as const);
      if (a.afterBytes !== undefined) action.afterBytes = integer(a.afterBytes, f('afterBytes'), 0);
      if (a.afterRecords !== undefined) action.afterRecords = integer(a.afterRecords, f('afterRecords'), 0);
      const given = ['stage', 'afterBytes', 'afterRecords'].filter((k) => a[k] !== undefined);
      if (given.length > 1)
        throw new EmulatorJsonError(
          actionAt,
          'at most one of stage, afterBytes, afterRecords',
          given.join(' and '),
        );
      rule.action = action;
      break;
    }
    case 'truncateTts':
      rule.action =
        a.afterBytes === undefined
          ? { type }
          : { type, afterBytes: integer(a.afterBytes, f('afterBytes'), 0) };
      break;
    case 'slowBody': {
      const rate = a.bytesPerSecond;
      if (!(typeof rate === 'number' && Number.isFinite(rate) && rate > 0))
        throw bad(f('bytesPerSecond'), 'a number > 0', rate);
      rule.action = { type, bytesPerSecond: rate };
      break;
    }
    default:
      rule.action = { type: type as 'endWithoutFinal' | 'stall' | 'fail' };
  }
  return rule;
}

/** A JSON object whose fields are all among `allowed` (a misspelt field is an error, not ignored). */
function object(value: unknown, at: string, allowed: readonly string[]): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad(at, 'an object', value);
  for (const name of Object.keys(value)) {
    if (!allowed.includes(name)) {
      const where = at === '(top level)' ? name : `${at}.${name}`;
      throw new EmulatorJsonError(where, `one of the fields ${allowed.join(', ')}`, 'an unknown field');
    }
  }
  return value as Record<string, unknown>;
}

function string(value: unknown, at: string): string {
  if (typeof value !== 'string') throw bad(at, 'a string', value);
  return value;
}

function nonEmptyString(value: unknown, at: string): string {
  if (typeof value !== 'string' || value.trim() === '') throw bad(at, 'a nonempty string', value);
  return value;
}

/**
 * An API key as an `x-api-key` header can carry it: visible ASCII and inner spaces, no
 * surrounding whitespace (HTTP trims it, so such a key could never match). Never echoed.
 */
function headerSafe(value: unknown, at: string): string {
  const expected = 'a nonempty string of visible ASCII without surrounding spaces';
  if (typeof value !== 'string') throw bad(at, expected, value);
  if (value === '' || value.trim() !== value || !/^[\x20-\x7e]+$/.test(value))
    throw new EmulatorJsonError(at, expected, 'a string that is not');
  return value;
}

function oneOf<T extends string>(value: unknown, at: string, allowed: readonly T[]): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value))
    throw bad(at, list(allowed), value);
  return value as T;
}

function integer(value: unknown, at: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!(Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max)) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw bad(at, `an integer ${range}`, value);
  }
  return value as number;
}

function number(value: unknown, at: string, min: number): number {
  if (!(typeof value === 'number' && Number.isFinite(value) && value >= min))
    throw bad(at, `a number >= ${min}`, value);
  return value;
}

const list = (names: readonly string[]): string => `one of ${names.map((n) => JSON.stringify(n)).join(', ')}`;

/** The error for `value` found at `at` where `expected` was wanted. */
function bad(at: string, expected: string, value: unknown): EmulatorJsonError {
  return new EmulatorJsonError(at, expected, describe(value));
}

/** A short description of a JSON value for an error message (strings cut, never long). */
function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  return `${typeof value} ${String(value)}`;
}
