#!/usr/bin/env node
// The `speechpipe` command: a small dispatcher to one module per subcommand.
//
// This file must parse and run on any Node.js a user may have (18, 20): its one static import
// (the version check, which imports nothing) runs there too; it checks the Node version first
// and loads everything else only after that check.

import { nodeVersionProblem } from '../protocol/node-version.ts';

/** Exit codes, the same for every command (README, docs/DECISIONS.md). */
const EXIT = { ok: 0, failed: 1, usage: 2, interrupted: 130 } as const;

interface CommandModule {
  run(args: string[]): Promise<number>;
  USAGE: string;
}

interface Command {
  summary: string;
  load: () => Promise<CommandModule>;
}

const COMMANDS: Record<string, Command> = {
  transcribe: {
    summary:
      'transcribe files or directories to captions and JSON: speechpipe transcribe <path>... --out DIR',
    load: () => import('./transcribe-command.ts'),
  },
  worker: {
    summary: 'process transcribe jobs from a queue: speechpipe worker --queue redis://HOST:PORT',
    load: () => import('./worker-command.ts'),
  },
  caption: {
    summary: 'live captions to an overlay page and SSE: speechpipe caption <url|file|-> [--port N]',
    load: () => import('./caption-command.ts'),
  },
  tts: {
    summary: 'speak text into an audio file (WAV, Ogg Opus, MP3, FLAC): speechpipe tts <text>... --out FILE',
    load: () => import('./tts-command.ts'),
  },
  bench: {
    summary:
      'benchmark a workload: speechpipe bench --workload W --transport T (--concurrency N | --rate R) --duration SEC',
    load: () => import('./bench-command.ts'),
  },
  emulator: {
    summary:
      'run the service emulator: speechpipe emulator [--port N] [--host H] [--key K | --accounts F] [--faults F] [--workers N]',
    load: () => import('./emulator-command.ts'),
  },
};

function usage(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return [
    'usage: speechpipe <command> [options]',
    '       speechpipe <command> --help',
    '       speechpipe --version',
    '',
    'commands:',
    ...lines,
    '',
    `Exit code: ${EXIT.ok} ok, ${EXIT.failed} some inputs or the operation failed, ${EXIT.usage} bad usage or environment, ${EXIT.interrupted} interrupted.`,
    '',
  ].join('\n');
}

/** A name that is no command: said on one line with the commands, then where the help is. */
async function unknownCommand(name: string): Promise<number> {
  const { badUsage } = await import('./usage.ts');
  return badUsage(
    undefined,
    `unknown command ${JSON.stringify(name)} (commands: ${Object.keys(COMMANDS).join(', ')})`,
  );
}

/** `--help` or `-h` among a command's options (not after `--`, where it would be an operand). */
function asksForHelp(args: string[]): boolean {
  for (const arg of args) {
    if (arg === '--') return false;
    if (arg === '--help' || arg === '-h') return true;
  }
  return false;
}

async function version(): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  // From src/cli/ and from dist/cli/ alike, package.json is two levels up.
  const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8'));
  return (pkg as { version: string }).version;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    process.stderr.write(usage());
    return EXIT.usage;
  }
  if (name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return EXIT.ok;
  }
  if (name === '--version') {
    process.stdout.write(`${await version()}\n`);
    return EXIT.ok;
  }
  if (name === 'help') {
    // `speechpipe help <command>`, as `speechpipe <command> --help`.
    const topic = rest[0] === undefined ? undefined : COMMANDS[rest[0]];
    if (rest[0] !== undefined && !topic) return unknownCommand(rest[0]);
    process.stdout.write(topic ? `${(await topic.load()).USAGE.trimEnd()}\n` : usage());
    return EXIT.ok;
  }
  const command = COMMANDS[name];
  if (!command) return unknownCommand(name);
  const loaded = await command.load();
  if (asksForHelp(rest)) {
    process.stdout.write(`${loaded.USAGE.trimEnd()}\n`);
    return EXIT.ok;
  }
  return loaded.run(rest);
}

/**
 * A reader that went away (`speechpipe ... | head -1`, a supervisor that read the first line and
 * closed its end) made the next write an unhandled EPIPE: a crash with a stack trace, exit 1,
 * whatever the command had done (a relay stopped, a file written reported as a failure). What
 * is left to say to it is dropped instead; any other error of the stream is thrown as before.
 */
function dropWritesToClosedReader(stream: NodeJS.WriteStream): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') return;
    throw err;
  });
}

const tooOld = nodeVersionProblem();
if (tooOld !== undefined) {
  process.stderr.write(`speechpipe: ${tooOld}\n`);
  process.exitCode = EXIT.usage;
} else {
  dropWritesToClosedReader(process.stdout);
  dropWritesToClosedReader(process.stderr);
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`speechpipe: ${err instanceof Error ? err.message : String(err)}\n`);
      // A setting the environment gives wrong (API_URL without API_KEY...) is not a failure of
      // the work: the command could not start.
      process.exitCode = (err as { code?: unknown }).code === 'ERR_CONFIG' ? EXIT.usage : EXIT.failed;
    },
  );
}
