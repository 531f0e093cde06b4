// Whether the service answers at all: a TCP connection to its host and port, the circuit
// breaker's default probe.

import { Socket } from 'node:net';

/** A TCP connection to the service's address. */
export function tcpProbe(url: string, timeoutMs = 5000): (signal: AbortSignal) => Promise<boolean> {
  const target = new URL(url);
  const port = Number(target.port || (target.protocol === 'https:' ? 443 : 80));
  const host = target.hostname.replace(/^\[|\]$/g, '');
  return (signal) =>
    new Promise((resolve) => {
      const socket = new Socket();
      const done = (ok: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        socket.destroy();
        resolve(ok);
      };
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), timeoutMs);
      signal.addEventListener('abort', onAbort, { once: true });
      socket.once('connect', () => done(true));
      socket.once('error', () => done(false));
      socket.connect(port, host);
    });
}
