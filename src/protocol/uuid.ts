// UUIDs as the wire carries them: 36-character strings in JSON and query strings,
// 16 raw bytes at the head of live input frames and TTS service frames.

import { InvalidArgumentError } from './errors.ts';

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HEX: string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

/** Whether `value` is a 36-character UUID string (any version, either case). */
export function isUuid(value: unknown): value is string {
  return typeof value === 'string' && value.length === 36 && UUID_PATTERN.test(value);
}

/** A fresh random (version 4) UUID. */
export function randomUuid(): string {
  return globalThis.crypto.randomUUID();
}

/** The 16 raw bytes of a UUID string. Throws `InvalidArgumentError` for anything else. */
export function uuidToBytes(uuid: string): Buffer {
  if (!isUuid(uuid))
    throw new InvalidArgumentError(`not a UUID: ${JSON.stringify(String(uuid).slice(0, 64))}`);
  return Buffer.from(uuid.replaceAll('-', ''), 'hex');
}

/** The lower-case UUID string of 16 bytes starting at `offset`. */
export function bytesToUuid(bytes: Uint8Array, offset = 0): string {
  if (bytes.length - offset < 16) throw new InvalidArgumentError('a UUID needs 16 bytes');
  const h = (i: number) => HEX[bytes[offset + i]!]!;
  return (
    h(0) +
    h(1) +
    h(2) +
    h(3) +
    '-' +
    h(4) +
    h(5) +
    '-' +
    h(6) +
    h(7) +
    '-' +
    h(8) +
    h(9) +
    '-' +
    h(10) +
    h(11) +
    h(12) +
    h(13) +
    h(14) +
    h(15)
  );
}

/** A stream or request id as 16 bytes, from a UUID string or 16 bytes (copied). */
export function idToBytes(id: string | Uint8Array): Buffer {
  if (typeof id === 'string') return uuidToBytes(id);
  if (id.length !== 16) throw new InvalidArgumentError(`a UUID is 16 bytes, got ${id.length}`);
  return Buffer.from(id);
}

/** A stream or request id as a UUID string, from a string (validated) or 16 bytes. */
export function idToString(id: string | Uint8Array): string {
  if (typeof id === 'string') {
    if (!isUuid(id)) throw new InvalidArgumentError(`not a UUID: ${JSON.stringify(String(id).slice(0, 64))}`);
    return id.toLowerCase();
  }
  if (id.length !== 16) throw new InvalidArgumentError(`a UUID is 16 bytes, got ${id.length}`);
  return bytesToUuid(id);
}

/** Whether the 16 bytes at `offset` are all zero (the nil UUID, which frames must not carry). */
export function isZeroUuid(bytes: Uint8Array, offset = 0): boolean {
  for (let i = offset; i < offset + 16; i++) if (bytes[i] !== 0) return false;
  return true;
}
