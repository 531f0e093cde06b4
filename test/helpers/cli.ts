// The `speechpipe` command run as a user runs it, from the repository, with no API_URL or
// API_KEY in its environment: the built-in emulator answers.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ManifestEntry } from '../../src/sinks/manifest.ts';

export const CLI_CWD = new URL('../..', import.meta.url);

/** The environment of a run against the built-in emulator. */
export function cliEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.API_URL;
  delete env.API_KEY;
  return env;
}

/** Run `speechpipe ...args` to its end (`env`: added to the emulator-only environment). */
export function runCli(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['src/cli/main.ts', ...args],
      { cwd: CLI_CWD, env: { ...cliEnv(), ...env }, timeout: 120_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * Bad usage as every command reports it on stderr: the error on one line, then the line saying
 * where the help is (of `command`, or of `speechpipe` itself), and nothing more.
 */
export function assertBadUsage(stderr: string, command: string | undefined, what = ''): void {
  const who = command === undefined ? 'speechpipe' : `speechpipe ${command}`;
  const help = command === undefined ? 'speechpipe --help' : `speechpipe ${command} --help`;
  const lines = stderr.split('\n');
  assert.equal(lines.length, 3, `${what}: two lines and their ends, got:\n${stderr}`);
  assert.ok(lines[0]!.startsWith(`${who}: `), `${what}: ${lines[0]}`);
  assert.match(lines[1]!, new RegExp(`^Run "${help}" for `), what);
  assert.equal(lines[2], '', what);
}

/** The entries of `out/manifest.ndjson`, in order. */
export async function readManifest(out: string): Promise<ManifestEntry[]> {
  return (await readFile(join(out, 'manifest.ndjson'), 'utf8'))
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as ManifestEntry);
}
