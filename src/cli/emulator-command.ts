// `speechpipe emulator`: run the service emulator standalone. Prints `{url, apiKey, admin}` as
// one JSON line on stdout, serves until SIGINT or SIGTERM, then closes everything and exits 0.

import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ADMIN_PREFIX } from '../emulator/admin.ts';
import {
  type Emulator,
  type EmulatorOptions,
  type EmulatorWorkers,
  startEmulator,
  startEmulatorWorkers,
} from '../emulator/index.ts';
import {
  accountsFromJson,
  EmulatorJsonError,
  faultRulesFromJson,
  parseKeyedJson,
} from '../emulator/options-json.ts';
import { CAPABILITIES, engineWords } from '../emulator/types.ts';
import { MIN_API_KEY_LENGTH } from '../protocol/config.ts';
import { ConfigError, InvalidArgumentError } from '../protocol/errors.ts';
import { nextStopSignal } from './signals.ts';
import { badUsage, listenErrorCode, parseCommandArgs, UsageError } from './usage.ts';

/** An example file shipped with the package (examples/ beside src/ and dist/), as a path. */
const example = (name: string) => fileURLToPath(new URL(`../../examples/${name}`, import.meta.url));

export const USAGE = `usage: speechpipe emulator [--port N] [--host H] [--key K | --accounts FILE.json] [--faults FILE.json] [--workers N]
                          [--engine generated|pocketsphinx|auto] [--stop-on-stdin-end]

  --port N             port to listen on (default 0: any free port)
  --host H             address to bind (default 127.0.0.1)
  --key K              the API key to accept (default: a random key, printed)
  --accounts FILE.json keys with account, tier and capabilities, and limit overrides
                       (per-workload concurrency...): {"keys": [...], "limits": {...}};
                       the first key is printed as apiKey (example:
                       ${example('emulator-accounts.json')})
  --faults FILE.json   fault rules as the library takes them: [{"operation", "action", ...}]
                       (example: ${example('emulator-faults.json')})
  --workers N          serve the port from N threads (default 1; "auto": one per core).
                       Account limits, request rates, fault rules and statistics stay the
                       emulator's, across all threads; jobs and live streams reach the thread
                       that holds them, whichever thread a connection lands on
  --engine E           where ASR words come from: generated (default: drawn for each speech
                       region, instant), pocketsphinx (English and auto recognized by Debian's
                       PocketSphinx, one process per core; ar and codeswitch keep generated
                       words), auto (pocketsphinx when it is installed)
  --stop-on-stdin-end  also stop when standard input ends: a program that starts the
                       emulator keeps a pipe to it open, and the emulator goes when the program
                       does, however it ends (even killed with SIGKILL)

Prints {"url": ..., "apiKey": ..., "admin": ..., "engine": ...} on stdout once listening; stops on SIGINT or
SIGTERM (or at the end of standard input with --stop-on-stdin-end). The admin endpoint (loopback clients only, no key): GET admin/stats, GET admin/faults,
POST admin/faults (a rule or an array of rules, application/json), DELETE admin/faults,
DELETE admin/faults/ID.
TTS_MAX_INPUT_CHARACTERS_FREE, _STANDARD and _ENTERPRISE in the environment set the TTS text
limit per tier (the accounts file's limits win).
Exit code: 0 when stopped by SIGINT or SIGTERM (a server's normal end: it has no work to cut
short), 1 when it fails, 2 on bad usage, environment or file.
`;

/** A file the command was given that it cannot use: bad usage (exit 2), the file named. */
class BadFileError extends Error {}

/** The JSON in `file`, checked by `check`; every failure names the file. */
async function readJsonFile<T>(file: string, check: (value: unknown) => T): Promise<T> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new BadFileError(`${file}: cannot read it (${code ?? (err as Error).message})`);
  }
  let value: unknown;
  try {
    value = parseKeyedJson(text);
  } catch (err) {
    throw new BadFileError(`${file}: not valid JSON: ${(err as Error).message}`);
  }
  try {
    return check(value);
  } catch (err) {
    if (err instanceof EmulatorJsonError) throw new BadFileError(`${file}: ${err.message}`);
    throw err;
  }
}

export async function run(args: string[]): Promise<number> {
  let values: {
    port?: string;
    host?: string;
    key?: string;
    accounts?: string;
    faults?: string;
    workers?: string;
    engine?: string;
    'stop-on-stdin-end'?: boolean;
    help?: boolean;
  };
  try {
    ({ values } = parseCommandArgs({
      args,
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        key: { type: 'string' },
        accounts: { type: 'string' },
        faults: { type: 'string' },
        workers: { type: 'string' },
        engine: { type: 'string' },
        'stop-on-stdin-end': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    return badUsage('emulator', err);
  }
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const port = values.port === undefined ? 0 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    return badUsage('emulator', '--port must be an integer from 0 to 65535');
  }
  const workers = values.workers === 'auto' ? availableParallelism() : Number(values.workers ?? 1);
  if (!(Number.isInteger(workers) && workers >= 1 && workers <= 256)) {
    return badUsage('emulator', '--workers must be an integer from 1 to 256, or auto');
  }
  if (values.key !== undefined && values.key.trim() === '') {
    return badUsage('emulator', '--key must not be empty');
  }
  if (values.key !== undefined && values.accounts !== undefined) {
    return badUsage('emulator', 'give --key or --accounts, not both (the file lists the keys)');
  }
  if (values.key !== undefined && [...values.key].length < MIN_API_KEY_LENGTH)
    return badUsage(
      'emulator',
      `--key must have at least ${MIN_API_KEY_LENGTH} characters (clients refuse a shorter key)`,
    );
  const asked = values.engine ?? 'generated';
  if (asked !== 'generated' && asked !== 'pocketsphinx' && asked !== 'auto')
    return badUsage('emulator', '--engine must be generated, pocketsphinx or auto');
  // `auto` is decided once by the emulator (by startEmulatorWorkers for all its threads), and
  // the announcement says what it chose.
  const options: EmulatorOptions = {
    port,
    host: values.host ?? '127.0.0.1',
    // TTS_MAX_INPUT_CHARACTERS_* configure the deployment's text limits, as for the service.
    env: process.env,
    engine: asked,
  };
  if (values.key !== undefined)
    options.keys = [
      { key: values.key, account: 'default', tier: 'standard', capabilities: [...CAPABILITIES] },
    ];
  let emulator: Emulator | EmulatorWorkers;
  try {
    if (values.accounts !== undefined) {
      const accounts = await readJsonFile(values.accounts, accountsFromJson);
      options.keys = accounts.keys;
      options.limits = accounts.limits;
    }
    if (values.faults !== undefined) options.faults = await readJsonFile(values.faults, faultRulesFromJson);
    emulator =
      workers > 1 ? await startEmulatorWorkers({ ...options, workers }) : await startEmulator(options);
  } catch (err) {
    // A bad file, or a bad setting (a TTS_MAX_INPUT_CHARACTERS_* value that is not a positive
    // integer), or an address it cannot listen on (a port in use or not allowed, a host that
    // does not resolve or is not this machine's): bad usage or environment.
    const code = listenErrorCode(err);
    if (code !== undefined) {
      process.stderr.write(
        `speechpipe emulator: cannot listen on ${options.host}:${port} (${code}: ${(err as Error).message})\n`,
      );
      return 2;
    }
    if (
      !(
        err instanceof BadFileError ||
        err instanceof ConfigError ||
        err instanceof InvalidArgumentError ||
        err instanceof RangeError
      )
    )
      throw err;
    process.stderr.write(`speechpipe emulator: ${err.message}\n`);
    return 2;
  }
  // Listen for the signals before announcing the URL: a caller may signal as soon as it reads it.
  const stopped = nextStopSignal();
  // An end that came while the emulator was starting is still seen (the stream was not read).
  const stdinEnded = values['stop-on-stdin-end'] ? endOfStdin() : undefined;
  const announced = {
    url: emulator.url,
    apiKey: emulator.apiKey,
    admin: `${emulator.url}${ADMIN_PREFIX}`,
    engine: emulator.engine,
  };
  process.stdout.write(`${JSON.stringify(announced)}\n`);
  process.stderr.write(
    `speechpipe emulator: listening at ${emulator.url}; ${engineWords(emulator.engine)}\n`,
  );
  const signal = await (stdinEnded ? Promise.race([stopped, stdinEnded]) : stopped);
  await emulator.close();
  process.stderr.write(`speechpipe emulator: closed on ${signal}\n`);
  // Standard input is no longer watched (a signal came first): it must not hold the process.
  if (stdinEnded) process.stdin.destroy();
  return 0;
}

/** The end of standard input (its EOF, or an error reading it: the other end is gone either way). */
function endOfStdin(): Promise<string> {
  return new Promise((resolve) => {
    const ended = () => resolve('the end of standard input');
    process.stdin.once('end', ended);
    process.stdin.once('error', ended);
    process.stdin.once('close', ended);
    process.stdin.resume();
  });
}
