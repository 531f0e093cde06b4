// API keys and capabilities: 401 for a missing, empty or unknown key, 403 for a key without
// the operation's capability (interface, Authentication).

import { randomBytes } from 'node:crypto';
import type { OperationName } from '../protocol/operations.ts';
import { reject } from './rejection.ts';
import { CAPABILITIES, type Capability, type EmulatorKey, type EmulatorKeyOptions } from './types.ts';

/** The capability each operation needs. Fast transcription is a Realtime HTTP operation. */
export function capabilityOf(op: OperationName): Capability {
  if (op.startsWith('batch.')) return 'batch';
  if (op.startsWith('diarization.')) return 'diarization';
  if (op.startsWith('tts.') || op === 'voices.socket') return 'tts';
  return 'realtime_asr';
}

export class KeyRegistry {
  readonly #keys = new Map<string, EmulatorKey>();
  readonly first: EmulatorKey;

  constructor(keys: readonly EmulatorKeyOptions[] | undefined) {
    const list = keys && keys.length > 0 ? keys : [defaultKey()];
    for (const k of list) {
      if (typeof k.key !== 'string' || k.key.trim() === '')
        throw new RangeError('every emulator key needs a nonempty `key`');
      // As the accounts file requires (never echoed): HTTP trims a header value and carries
      // visible ASCII, so any other key could never authenticate; and a key has one account.
      if (k.key.trim() !== k.key || !/^[\x20-\x7e]+$/.test(k.key))
        throw new RangeError('an emulator key must be visible ASCII without surrounding spaces');
      if (this.#keys.has(k.key)) throw new RangeError('an emulator key is listed twice');
      const capabilities = k.capabilities ?? CAPABILITIES;
      for (const c of capabilities) {
        if (!CAPABILITIES.includes(c)) throw new RangeError(`unknown capability ${JSON.stringify(c)}`);
      }
      this.#keys.set(k.key, { ...k, capabilities: [...capabilities] });
    }
    this.first = this.#keys.get(list[0]!.key)!;
  }

  /** The key record for a header value, or a 401 `Rejection`. */
  authenticate(header: string | string[] | undefined): EmulatorKey {
    const value = Array.isArray(header) ? header[0] : header;
    if (value === undefined || value.trim() === '') {
      throw reject('AUTH_UNAUTHORIZED', 'no API key was sent in the x-api-key header', {
        message: 'No API key found in request',
      });
    }
    const key = this.#keys.get(value);
    if (!key) throw reject('AUTH_UNAUTHORIZED', 'the API key is not valid');
    return key;
  }

  /** 403 unless `key` carries the capability of `op`. */
  authorize(key: EmulatorKey, op: OperationName): void {
    const needed = capabilityOf(op);
    if (!key.capabilities.includes(needed)) {
      throw reject('AUTH_FORBIDDEN', `the API key lacks the ${needed} capability`);
    }
  }
}

/** The key of an emulator given none: random, all four capabilities. */
export function defaultKey(): EmulatorKey {
  return {
    key: `emu_${randomBytes(18).toString('base64url')}`,
    account: 'default',
    tier: 'standard',
    capabilities: [...CAPABILITIES],
  };
}
