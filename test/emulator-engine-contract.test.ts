// The interface's contract does not depend on the engine: the emulator's own contract tests of
// live streams, fast transcription, Socket.IO, limits and faults run again with the PocketSphinx
// engine (SPEECHPIPE_EMULATOR_ENGINE, read by their fixtures), every record, status, limit and
// fault as with the generated engine.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { findPocketSphinx } from '../src/emulator/engine/pocketsphinx.ts';
import { CLI_CWD } from './helpers/cli.ts';

const FILES = [
  'test/emulator-live.test.ts',
  'test/emulator-fast.test.ts',
  'test/emulator-socket.test.ts',
  'test/emulator-limits.test.ts',
  'test/emulator-faults.test.ts',
];

/**
 * Tests that assert what the generated engine's words make of their synthetic tones, not the
 * contract: a provisional record in the first second of a stream, or records enough to cut. A
 * recognizer finds no words in a tone, and its provisional records come when a process is idle.
 */
const GENERATED_ENGINE_ONLY = [
  'a stream: provisional records, speech-final records at pauses, one final record, then finished',
  'a non-final answer cut short (reset after N bytes) cancels its stream at once',
  'slowBody: every record still arrives in order, the final one last',
  'reset afterRecords: N records of the stream, then the socket is disconnected',
];

const literally = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

test('the contract tests pass with the PocketSphinx engine', {
  skip: findPocketSphinx()
    ? false
    : 'PocketSphinx is not installed (scripts/setup.sh: apt-get install pocketsphinx pocketsphinx-en-us)',
}, async () => {
  const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(
      process.execPath,
      [
        '--test',
        '--test-concurrency=1',
        '--import',
        './test/setup.ts',
        `--test-skip-pattern=^(${GENERATED_ENGINE_ONLY.map(literally).join('|')})$`,
        ...FILES,
      ],
      {
        cwd: CLI_CWD,
        // A run of its own, not part of this one's report (NODE_TEST_CONTEXT would make it so).
        env: { ...process.env, NODE_TEST_CONTEXT: undefined, SPEECHPIPE_EMULATOR_ENGINE: 'pocketsphinx' },
        maxBuffer: 1 << 26,
        timeout: 600_000,
      },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: `${stdout}${stderr}` }),
    );
  });
  const passed = Number(/^ℹ pass (\d+)$/m.exec(output)?.[1] ?? 0);
  assert.equal(code, 0, output.slice(output.indexOf('failing tests')));
  assert.ok(passed >= 80, `${passed} tests passed`);
});
