#!/usr/bin/env node
// The `speechpipe` command: a small dispatcher to one module per subcommand.

interface Command {
  summary: string;
  load: () => Promise<{ run(args: string[]): Promise<number> }>;
}

const COMMANDS: Record<string, Command> = {
  transcribe: {
    summary:
      'transcribe files or directories to captions and JSON: speechpipe transcribe <path>... --out DIR',
    load: () => import('./transcribe-command.ts'),
  },
  caption: {
    summary: 'live captions to an overlay page and SSE: speechpipe caption <url|file|-> [--port N]',
    load: () => import('./caption-command.ts'),
  },
  tts: {
    summary: 'speak text into a WAV file: speechpipe tts <text>... --out FILE.wav',
    load: () => import('./tts-command.ts'),
  },
  emulator: {
    summary: 'run the service emulator: speechpipe emulator [--port N] [--host H] [--key K]',
    load: () => import('./emulator-command.ts'),
  },
};

function usage(): string {
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(10)} ${c.summary}`);
  return ['usage: speechpipe <command> [options]', '', 'commands:', ...lines, ''].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`speechpipe: unknown command ${JSON.stringify(name)}\n\n${usage()}`);
    return 2;
  }
  return (await command.load()).run(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`speechpipe: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
