// `speechpipe emulator`: run the service emulator standalone. Prints `{url, apiKey}` as one JSON
// line on stdout, serves until SIGINT or SIGTERM, then closes everything and exits 0.

import { parseArgs } from 'node:util';
import { type Emulator, startEmulator } from '../emulator/index.ts';
import { CAPABILITIES } from '../emulator/types.ts';
import { ConfigError } from '../protocol/errors.ts';

export const USAGE = `usage: speechpipe emulator [--port N] [--host H] [--key K]

  --port N   port to listen on (default 0: any free port)
  --host H   address to bind (default 127.0.0.1)
  --key K    the API key to accept (default: a random key, printed)

Prints {"url": ..., "apiKey": ...} on stdout once listening; stops on SIGINT or SIGTERM.
TTS_MAX_INPUT_CHARACTERS_FREE, _STANDARD and _ENTERPRISE in the environment set the TTS text
limit per tier.
Exit code: 0 when stopped by SIGINT or SIGTERM (a server's normal end: it has no work to cut
short), 1 when it fails, 2 on bad usage or environment.
`;

export async function run(args: string[]): Promise<number> {
  let values: { port?: string; host?: string; key?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args,
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        key: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }));
  } catch (err) {
    process.stderr.write(`speechpipe emulator: ${(err as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const port = values.port === undefined ? 0 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    process.stderr.write(`speechpipe emulator: --port must be an integer from 0 to 65535\n`);
    return 2;
  }
  if (values.key !== undefined && values.key.trim() === '') {
    process.stderr.write('speechpipe emulator: --key must not be empty\n');
    return 2;
  }
  let emulator: Emulator;
  try {
    emulator = await startEmulator({
      port,
      host: values.host ?? '127.0.0.1',
      // TTS_MAX_INPUT_CHARACTERS_* configure the deployment's text limits, as for the service.
      env: process.env,
      keys:
        values.key === undefined
          ? undefined
          : [{ key: values.key, account: 'default', tier: 'standard', capabilities: [...CAPABILITIES] }],
    });
  } catch (err) {
    // A bad setting (a TTS_MAX_INPUT_CHARACTERS_* value that is not a positive integer).
    if (!(err instanceof ConfigError || err instanceof RangeError)) throw err;
    process.stderr.write(`speechpipe emulator: ${err.message}\n`);
    return 2;
  }
  // Listen for the signals before announcing the URL: a caller may signal as soon as it reads it.
  const stopped = new Promise<NodeJS.Signals>((resolve) => {
    const stop = (s: NodeJS.Signals) => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(s);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  process.stdout.write(`${JSON.stringify({ url: emulator.url, apiKey: emulator.apiKey })}\n`);
  const signal = await stopped;
  await emulator.close();
  process.stderr.write(`speechpipe emulator: closed on ${signal}\n`);
  return 0;
}
