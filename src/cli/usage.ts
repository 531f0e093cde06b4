// Bad usage, the same for every command: the options parsed by one wrapper of node:util's
// parseArgs whose errors say in our words what is wrong, and an error shown as one line and a
// pointer to the command's --help (the whole usage would scroll the error out of sight).

import { type ParseArgsConfig, parseArgs } from 'node:util';

/** The exit code of bad usage, for every command. */
export const USAGE_EXIT = 2;

/** Why a server cannot listen where it was told to: the address (bad usage), not the server. */
const LISTEN_ERRORS: ReadonlySet<string> = new Set([
  'EADDRINUSE',
  'EADDRNOTAVAIL',
  'EACCES',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_NONAME',
]);

/** The code of a failure to listen on the address a command was given, else undefined. */
export function listenErrorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && LISTEN_ERRORS.has(code) ? code : undefined;
}

/** A mistake in the command line: shown with {@link badUsage}, exit 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** The line that says where the help of `command` (undefined: of `speechpipe` itself) is. */
export function helpHint(command?: string): string {
  return command === undefined
    ? 'Run "speechpipe --help" for the commands.'
    : `Run "speechpipe ${command} --help" for its options.`;
}

/**
 * Report a mistake in `command`'s command line on stderr: the error on one line, then where
 * the help is. Returns the exit code of bad usage.
 */
export function badUsage(command: string | undefined, problem: unknown): number {
  const message = problem instanceof Error ? problem.message : String(problem);
  const who = command === undefined ? 'speechpipe' : `speechpipe ${command}`;
  process.stderr.write(`${who}: ${message}\n${helpHint(command)}\n`);
  return USAGE_EXIT;
}

/** An argument as parseArgs reads it (`tokens: true`). */
type Token =
  | { kind: 'option'; name: string; rawName: string; value?: string; inlineValue?: boolean }
  | { kind: 'positional'; value: string }
  | { kind: 'option-terminator' };

/**
 * node:util's parseArgs (strict), its errors as `UsageError`s that name the argument in our
 * words. Its own messages quote oddly: an unknown option with operands allowed ends in
 * `as in '-- "--bogus"`, an unbalanced quote.
 */
export function parseCommandArgs<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs<T>({ ...config, strict: true });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== 'string' || !code.startsWith('ERR_PARSE_ARGS')) throw err;
    throw new UsageError(describeParseError(config, code, err as Error));
  }
}

/** What parseArgs refused, found again from its tokens (its message is not for users). */
function describeParseError(config: ParseArgsConfig, code: string, err: Error): string {
  const tokens = parseArgs({ ...config, strict: false, tokens: true }).tokens as Token[];
  const known = config.options ?? {};
  const options = tokens.filter((t) => t.kind === 'option');
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const unknown = options.find((t) => !Object.hasOwn(known, t.name));
    if (unknown) return `unknown option ${unknown.rawName}`;
  }
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    for (const t of options) {
      const type = known[t.name]?.type;
      if (type === 'boolean' && t.value !== undefined) return `${t.rawName} takes no value`;
      if (type === 'string' && t.value === undefined) return `${t.rawName} needs a value`;
      if (type === 'string' && !t.inlineValue && t.value?.startsWith('-'))
        return `${t.rawName} needs a value (one that starts with - is written ${t.rawName}=${t.value})`;
    }
  }
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') {
    const operand = tokens.find((t) => t.kind === 'positional');
    if (operand)
      return `unexpected argument ${JSON.stringify(operand.value)}: this command takes options only`;
  }
  // A refusal not described above: parseArgs' first line.
  return err.message.split('\n')[0]!;
}
