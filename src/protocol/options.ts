// Checks of a caller's options, made when a stream, session or client is made rather than when
// the value is first used: a NaN or negative number there would otherwise act as something
// else (a NaN keepalive delay is a 1 ms timer, a negative retry count none), and a misspelt
// choice would quietly take another path.

import { InvalidArgumentError } from './errors.ts';

/** The longest delay a Node timer keeps: a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** What a numeric option may be. */
export interface NumberRule {
  /** Smallest allowed (inclusive unless `above`). Default 0. */
  min?: number;
  /** The value must be greater than `min`. */
  above?: boolean;
  /** Whole numbers only. */
  integer?: boolean;
  /** `Infinity` is allowed (no bound). */
  infinite?: boolean;
  /** Largest allowed: {@link MAX_TIMER_MS} for a delay a timer waits. */
  max?: number;
  /** Throw a `RangeError` (as `createClient` does for its numeric settings). */
  range?: boolean;
}

/**
 * Throws `InvalidArgumentError` (`caller: name must be ...`; a `RangeError` with `rule.range`)
 * unless `value` is undefined or a number the rule allows.
 */
export function checkNumberOption(caller: string, name: string, value: unknown, rule: NumberRule = {}): void {
  if (value === undefined) return;
  const min = rule.min ?? 0;
  const ok =
    typeof value === 'number' &&
    (value === Number.POSITIVE_INFINITY
      ? rule.infinite === true
      : Number.isFinite(value) &&
        (rule.above ? value > min : value >= min) &&
        (rule.max === undefined || value <= rule.max) &&
        (!rule.integer || Number.isInteger(value)));
  if (ok) return;
  const kind = rule.integer ? 'an integer' : 'a number';
  const bound = `${rule.above ? '>' : '>='} ${min}${rule.max === undefined ? '' : ` and <= ${rule.max}`}`;
  const message = `${caller}: ${name} must be ${kind} ${bound}${rule.infinite ? ' (or Infinity)' : ''}, got ${describe(value)}`;
  throw rule.range ? new RangeError(message) : new InvalidArgumentError(message);
}

/** Throws `InvalidArgumentError` unless `value` is undefined or one of `allowed`. */
export function checkChoiceOption(
  caller: string,
  name: string,
  value: unknown,
  allowed: readonly string[],
): void {
  if (value === undefined || (typeof value === 'string' && allowed.includes(value))) return;
  throw new InvalidArgumentError(
    `${caller}: ${name} must be ${allowed.map((a) => `'${a}'`).join(' or ')}, got ${describe(value)}`,
  );
}

function describe(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value.slice(0, 64)) : String(value);
}
