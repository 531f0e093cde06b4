// Service configuration from options or the environment (`API_KEY`, `API_URL`, `API_PATH`).
// The key is wrapped so that it never shows in strings, JSON, util.inspect or error messages.

import { ConfigError } from './errors.ts';
import { SOCKET_PATHS } from './socket-events.ts';

const INSPECT = Symbol.for('nodejs.util.inspect.custom');

/**
 * Fewest characters an API key has. Errors carry text from the service and the network, and the
 * key is taken out of it as a token (`redactSecrets`): a key this long is no part of an ordinary
 * word, where a key such as `k` would take every word with a k in it out of every message.
 */
export const MIN_API_KEY_LENGTH = 8;

/** An API key that prints as `[redacted]`; `reveal()` is the only way to read it. */
export class ApiKey {
  readonly #value: string;

  constructor(value: string) {
    if (typeof value !== 'string' || value.trim() === '')
      throw new ConfigError('the API key must be a nonempty string');
    if (/[\r\n]/.test(value)) throw new ConfigError('the API key must not contain line breaks');
    const length = [...value].length;
    if (length < MIN_API_KEY_LENGTH)
      throw new ConfigError(
        `the API key must have at least ${MIN_API_KEY_LENGTH} characters, not ${length}: a shorter one could not be kept out of the words of error messages`,
      );
    this.#value = value;
  }

  /** The key itself, for the `x-api-key` header only. */
  reveal(): string {
    return this.#value;
  }

  /** Always `[redacted]`, so the key never appears in string conversions. */
  toString(): string {
    return '[redacted]';
  }

  /** Always `[redacted]`, so the key never appears in `JSON.stringify` output. */
  toJSON(): string {
    return '[redacted]';
  }

  /** `ApiKey([redacted])` for `util.inspect` and `console.log`. */
  [INSPECT](): string {
    return 'ApiKey([redacted])';
  }
}

/** Options of `resolveConfig`; each falls back to the environment or a default. */
export interface ConfigOptions {
  /** Service address; else `API_URL`. */
  apiUrl?: string | URL | undefined;
  /** Credential; else `API_KEY`. */
  apiKey?: string | ApiKey | undefined;
  /** Socket.IO path; else `API_PATH`, else `/socket.io` (empty counts as unset). */
  apiPath?: string | undefined;
  /** Use the legacy, not yet consolidated Socket.IO endpoint `/realtime/socket.io`. */
  legacySocketPath?: boolean | undefined;
  /**
   * Prefix of the Realtime HTTP operations. The operation reference lists them as
   * `/http/<name>` under the realtime base; the guides spell the full path
   * `{base_url}/realtime/http/<name>`. Default `/realtime/http`.
   */
  realtimeHttpPrefix?: string | undefined;
  /** Environment to read; default `process.env`. */
  env?: Record<string, string | undefined> | undefined;
}

/** Resolved, validated and frozen service configuration, as `resolveConfig` returns it. */
export interface ServiceConfig {
  /** Service address without a trailing slash. */
  readonly apiUrl: string;
  /** Credential, sent only as the `x-api-key` header. */
  readonly apiKey: ApiKey;
  /** Socket.IO path. */
  readonly socketPath: string;
  /** Scheme and host of the service address, sent as `Origin` on the Socket.IO handshake. */
  readonly origin: string;
  /** Prefix of the Realtime HTTP operations without a trailing slash; empty when configured as `/`. */
  readonly realtimeHttpPrefix: string;
}

/** Default `ConfigOptions.realtimeHttpPrefix`: the full path the guides spell, `{base_url}/realtime/http/<name>`. */
export const DEFAULT_REALTIME_HTTP_PREFIX = '/realtime/http';

/** Resolve options, else environment. Throws `ConfigError` (never containing the key). */
export function resolveConfig(options: ConfigOptions = {}): ServiceConfig {
  const env = options.env ?? (globalThis.process?.env as Record<string, string | undefined>) ?? {};
  const rawUrl = options.apiUrl ?? env.API_URL;
  if (rawUrl === undefined || String(rawUrl).trim() === '') {
    throw new ConfigError('no service address: pass apiUrl or set API_URL');
  }
  const url = parseServiceUrl(String(rawUrl));
  const rawKey = options.apiKey ?? env.API_KEY;
  if (rawKey === undefined || (typeof rawKey === 'string' && rawKey.trim() === '')) {
    throw new ConfigError('no API key: pass apiKey or set API_KEY');
  }
  const apiKey = rawKey instanceof ApiKey ? rawKey : new ApiKey(rawKey);
  const socketPath = options.legacySocketPath
    ? SOCKET_PATHS.legacy
    : normalizePath(nonEmpty(options.apiPath) ?? nonEmpty(env.API_PATH) ?? SOCKET_PATHS.default, 'API_PATH');
  const realtimeHttpPrefix = normalizePath(
    options.realtimeHttpPrefix ?? DEFAULT_REALTIME_HTTP_PREFIX,
    'realtimeHttpPrefix',
  );
  return Object.freeze({
    apiUrl: url.href.replace(/\/+$/, ''),
    apiKey,
    socketPath,
    origin: url.origin,
    realtimeHttpPrefix: realtimeHttpPrefix === '/' ? '' : realtimeHttpPrefix,
  });
}

function parseServiceUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError('the service address is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ConfigError(`the service address must be http or https, got ${url.protocol}`);
  }
  // Keys never travel in URLs; refuse anything that could carry one.
  if (url.username || url.password) throw new ConfigError('the service address must not contain credentials');
  if (url.search || url.hash)
    throw new ConfigError('the service address must not contain a query or fragment');
  return url;
}

/** Set but empty means unset, as for `API_URL` and `API_KEY`. */
function nonEmpty(value: string | undefined): string | undefined {
  return typeof value === 'string' && value.trim() === '' ? undefined : value;
}

function normalizePath(path: string, name: string): string {
  if (typeof path !== 'string' || !path.startsWith('/') || /[?#\s]/.test(path)) {
    throw new ConfigError(`${name} must be an absolute path such as /socket.io`);
  }
  return path.length > 1 ? path.replace(/\/+$/, '') : path;
}
