// An archive worker's Prometheus metrics (prom-client, loaded when asked for): inputs done and
// failed, audio seconds done, operations in flight and 429s, served at /metrics.

import { createServer, type Server } from 'node:http';

export interface Metrics {
  url: string;
  filesDone: import('prom-client').Counter;
  audioSecondsDone: import('prom-client').Counter;
  filesFailed: import('prom-client').Counter<'code'>;
  inFlight: import('prom-client').Gauge;
  rateLimited: import('prom-client').Counter;
  close(): Promise<void>;
}

export async function startMetrics(port: number, host: string): Promise<Metrics> {
  const prom = await import('prom-client');
  const registry = new prom.Registry();
  const metrics = {
    filesDone: new prom.Counter({
      name: 'speechpipe_files_done_total',
      help: 'Inputs transcribed and written',
      registers: [registry],
    }),
    audioSecondsDone: new prom.Counter({
      name: 'speechpipe_audio_seconds_done_total',
      help: 'Audio seconds of the inputs done',
      registers: [registry],
    }),
    filesFailed: new prom.Counter({
      name: 'speechpipe_files_failed_total',
      help: 'Input failures by error code (a failure retried later counts too)',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
    inFlight: new prom.Gauge({
      name: 'speechpipe_operations_in_flight',
      help: 'Inputs this worker is transcribing now',
      registers: [registry],
    }),
    rateLimited: new prom.Counter({
      name: 'speechpipe_rate_limited_total',
      help: '429 answers (the queue paused for their Retry-After)',
      registers: [registry],
    }),
  };
  const server: Server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404).end();
      return;
    }
    registry.metrics().then(
      (text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (err: unknown) => res.writeHead(500).end(String(err)),
    );
  });
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolveListen());
  });
  const address = server.address() as { port: number };
  return {
    ...metrics,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${address.port}/metrics`,
    close: () =>
      new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      }),
  };
}
