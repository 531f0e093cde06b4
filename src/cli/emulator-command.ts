// `speechpipe emulator`: run the service emulator standalone. Prints `{url, apiKey}` as one JSON
// line on stdout, serves until SIGINT or SIGTERM, then closes everything and exits 0.

import { parseArgs } from 'node:util';
import { startEmulator } from '../emulator/index.ts';
import { CAPABILITIES } from '../emulator/types.ts';

const HELP = `usage: speechpipe emulator [--port N] [--host H] [--key K]

  --port N   port to listen on (default 0: any free port)
  --host H   address to bind (default 127.0.0.1)
  --key K    the API key to accept (default: a random key, printed)

Prints {"url": ..., "apiKey": ...} on stdout once listening; stops on SIGINT or SIGTERM.
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
    process.stderr.write(`speechpipe emulator: ${(err as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(HELP);
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
  const emulator = await startEmulator({
    port,
    host: values.host ?? '127.0.0.1',
    keys:
      values.key === undefined
        ? undefined
        : [{ key: values.key, account: 'default', tier: 'standard', capabilities: [...CAPABILITIES] }],
  });
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
