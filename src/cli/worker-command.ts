// `speechpipe worker`: a cluster worker. Takes archive jobs from a BullMQ queue on Redis (added
// by `speechpipe transcribe --queue`), transcribes them, writes their results; stops cleanly on
// SIGTERM or SIGINT.

import { type ArchiveWorker, startArchiveWorker, type WorkerEvent } from '../archive/cluster/index.ts';
import { printable } from './archive-progress.ts';
import { openService, type Service } from './service.ts';
import { nextStopSignal } from './signals.ts';
import { badUsage, parseCommandArgs, UsageError } from './usage.ts';

export const USAGE = `usage: speechpipe worker --queue redis://HOST:PORT [options]

  --queue URL           the Redis holding the queue (the one transcribe --queue adds to)
  --queue-name NAME     default speechpipe-archive
  --concurrency N       jobs this worker runs at once (default 2); the operations in flight
                        across all workers stay within the queue's limit (transcribe
                        --account-concurrency)
  --metrics-port N      serve Prometheus metrics at http://127.0.0.1:N/metrics (0: any port)
  --metrics-host H      address for the metrics (default 127.0.0.1)
  --stall-timeout SEC   a job whose worker died is taken over by another after about this
                        long (default 30); a batch job it submitted is waited for, not
                        submitted again
  --drain-timeout SEC   on SIGTERM, how long jobs in flight may take to finish before they
                        are handed back to the queue (default 60); a second signal hands
                        them back at once

Inputs and --out must be on storage every worker sees, at the same paths. A 429 from the
service pauses the whole queue for its Retry-After; a refused key (401, 403) pauses the queue
and the transcribe command following the run reports it.

Talks to API_URL with API_KEY, or to a built-in emulator of its own when API_URL is not set.
Exit code: 0 when stopped by SIGTERM or SIGINT, 2 on bad usage or an unreachable Redis.`;

function logLine(event: WorkerEvent): string {
  switch (event.type) {
    case 'started':
      return `started ${printable(event.input)}${event.takenOver ? ' (taken over)' : ''}${event.serviceJobId ? ` waiting for job ${event.serviceJobId}` : ''}`;
    case 'submitted':
      return `submitted ${printable(event.input)}: job ${event.serviceJobId}`;
    case 'done':
      return `done ${printable(event.input)}: ${event.words} words`;
    case 'failed':
      return `failed ${printable(event.input)}: ${event.error.code}: ${printable(event.error.message)}${event.retrying ? ' (tried again)' : ''}`;
    case 'handedBack':
      return `handed back ${printable(event.input)}`;
    case 'rateLimited':
      return `429 (${event.workload}): the queue pauses for ${Math.round(event.pauseMs)} ms`;
    case 'stopped':
      return `stopped the queue: ${printable(event.reason.message)}`;
    case 'error':
      return `error: ${printable(event.message)}`;
  }
}

export async function run(args: string[]): Promise<number> {
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseCommandArgs({
      args,
      options: {
        queue: { type: 'string' },
        'queue-name': { type: 'string' },
        concurrency: { type: 'string', default: '2' },
        'metrics-port': { type: 'string' },
        'metrics-host': { type: 'string' },
        'stall-timeout': { type: 'string', default: '30' },
        'drain-timeout': { type: 'string', default: '60' },
      },
    }));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('worker', err);
  }
  const bad = (message: string) => badUsage('worker', message);
  if (!values.queue) return bad('--queue is required');
  const concurrency = Number(values.concurrency);
  if (!Number.isSafeInteger(concurrency) || concurrency < 1)
    return bad('--concurrency must be a positive integer');
  const metricsPort = values['metrics-port'] === undefined ? undefined : Number(values['metrics-port']);
  if (
    metricsPort !== undefined &&
    !(Number.isInteger(metricsPort) && metricsPort >= 0 && metricsPort < 65_536)
  )
    return bad('--metrics-port must be an integer from 0 to 65535');
  const stallSec = Number(values['stall-timeout']);
  const drainSec = Number(values['drain-timeout']);
  if (!(stallSec > 0)) return bad('--stall-timeout must be a positive number of seconds');
  if (!(drainSec >= 0)) return bad('--drain-timeout must be a number of seconds');

  const log = (line: string) => process.stderr.write(`speechpipe worker: ${line}\n`);
  let service: Service | undefined;
  let worker: ArchiveWorker;
  try {
    service = await openService(process.env, log);
    worker = await startArchiveWorker({
      queue: values.queue,
      ...(values['queue-name'] ? { queueName: values['queue-name'] } : {}),
      client: service.client,
      concurrency,
      ...(metricsPort === undefined ? {} : { metricsPort }),
      ...(values['metrics-host'] ? { metricsHost: values['metrics-host'] } : {}),
      stallTimeoutMs: stallSec * 1000,
      onEvent: (event) => log(logLine(event)),
    });
  } catch (err) {
    await service?.close();
    const code = (err as { code?: string }).code;
    if (code === 'ERR_QUEUE_UNREACHABLE' || code === 'ERR_QUEUE_URL') {
      log((err as Error).message);
      return 2;
    }
    throw err;
  }
  // Announced once it takes jobs (tests and scripts wait for this line).
  const stopped = nextStopSignal();
  log(`ready: ${concurrency} at once${worker.metricsUrl ? `; metrics at ${worker.metricsUrl}` : ''}`);
  const signal = await stopped;
  const again = () => {
    log('handing the jobs in flight back to the queue');
    worker.handBack();
  };
  // Listening before saying so: a caller may signal again as soon as it reads the line.
  process.once('SIGINT', again);
  process.once('SIGTERM', again);
  log(`${signal}: finishing the jobs in flight (a second signal hands them back)`);
  try {
    await worker.close({ handBackAfterMs: drainSec * 1000 });
    await service.close();
  } finally {
    process.off('SIGINT', again);
    process.off('SIGTERM', again);
  }
  log('stopped');
  return 0;
}
