// A small kit for runtime validators that report every problem with its path.

import { ProtocolError, type ValidationIssue } from './errors.ts';
import { isUuid } from './uuid.ts';

/** Result of a validator: the value, typed, or every issue found. */
export type Validation<T> = { ok: true; value: T } | { ok: false; issues: ValidationIssue[] };

export type Obj = Record<string, unknown>;

export function isObject(value: unknown): value is Obj {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Collects issues while checking fields; each check returns whether the field is valid. */
export class Checker {
  readonly issues: ValidationIssue[] = [];

  fail(path: string, message: string): false {
    this.issues.push({ path, message });
    return false;
  }

  object(value: unknown, path: string): value is Obj {
    return isObject(value) || this.fail(path, `expected an object, got ${describe(value)}`);
  }

  has(obj: Obj, key: string, path: string): boolean {
    return Object.hasOwn(obj, key) || this.fail(`${path}.${key}`, 'is required');
  }

  absent(obj: Obj, key: string, path: string, why: string): boolean {
    return !Object.hasOwn(obj, key) || this.fail(`${path}.${key}`, `must be absent ${why}`);
  }

  string(
    obj: Obj,
    key: string,
    path: string,
    opts: { nullable?: boolean; optional?: boolean } = {},
  ): boolean {
    return this.#typed(obj, key, path, opts, 'a string', (v) => typeof v === 'string');
  }

  number(
    obj: Obj,
    key: string,
    path: string,
    opts: { nullable?: boolean; optional?: boolean; min?: number } = {},
  ): boolean {
    const ok = this.#typed(
      obj,
      key,
      path,
      opts,
      'a finite number',
      (v) => typeof v === 'number' && Number.isFinite(v),
    );
    const v = obj[key];
    if (ok && typeof v === 'number' && opts.min !== undefined && v < opts.min) {
      return this.fail(`${path}.${key}`, `must be >= ${opts.min}, got ${v}`);
    }
    return ok;
  }

  integer(
    obj: Obj,
    key: string,
    path: string,
    opts: { nullable?: boolean; optional?: boolean } = {},
  ): boolean {
    return this.#typed(obj, key, path, opts, 'an integer', (v) => Number.isSafeInteger(v));
  }

  boolean(obj: Obj, key: string, path: string, opts: { optional?: boolean } = {}): boolean {
    return this.#typed(obj, key, path, opts, 'a boolean', (v) => typeof v === 'boolean');
  }

  uuid(obj: Obj, key: string, path: string, opts: { optional?: boolean } = {}): boolean {
    return this.#typed(obj, key, path, opts, 'a UUID string', isUuid);
  }

  oneOf<T extends string>(obj: Obj, key: string, path: string, values: readonly T[]): boolean {
    return this.#typed(obj, key, path, {}, `one of ${values.join(', ')}`, (v) => values.includes(v as T));
  }

  array(
    obj: Obj,
    key: string,
    path: string,
    item: (value: unknown, path: string) => void,
    opts: { nullable?: boolean; optional?: boolean } = {},
  ): boolean {
    const ok = this.#typed(obj, key, path, opts, 'an array', Array.isArray);
    const v = obj[key];
    if (ok && Array.isArray(v)) {
      const before = this.issues.length;
      for (let i = 0; i < v.length; i++) item(v[i], `${path}.${key}[${i}]`);
      return this.issues.length === before;
    }
    return ok;
  }

  #typed(
    obj: Obj,
    key: string,
    path: string,
    opts: { nullable?: boolean; optional?: boolean },
    expected: string,
    test: (value: unknown) => boolean,
  ): boolean {
    if (!Object.hasOwn(obj, key)) return opts.optional === true || this.fail(`${path}.${key}`, 'is required');
    const v = obj[key];
    if (v === null && opts.nullable) return true;
    return test(v) || this.fail(`${path}.${key}`, `expected ${expected}, got ${describe(v)}`);
  }

  result<T>(value: unknown): Validation<T> {
    return this.issues.length === 0 ? { ok: true, value: value as T } : { ok: false, issues: this.issues };
  }
}

export function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string')
    return `string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === 'object') return 'an object';
  return `${typeof value} ${String(value)}`;
}

/** Unwrap a validation or throw `ProtocolError` (`ERR_INVALID_RECORD`) naming every issue. */
export function unwrap<T>(kind: string, result: Validation<T>): T {
  if (result.ok) return result.value;
  const list = result.issues.map((i) => `${i.path} ${i.message}`).join('; ');
  throw new ProtocolError('ERR_INVALID_RECORD', `invalid ${kind}: ${list}`, { issues: result.issues });
}
