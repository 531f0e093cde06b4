// Child processes read from /proc (Linux), for tests that check what a command leaves running.

import { readFile } from 'node:fs/promises';

/** The pids of `pid`'s children (of its main thread); empty when it has none or is gone. */
export async function childPids(pid: number): Promise<number[]> {
  const text = await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8').catch(() => '');
  return text.trim().split(/\s+/).filter(Boolean).map(Number);
}

/** Whether this system lists children in /proc (tests that need it skip, saying so, without). */
export async function canListChildren(): Promise<boolean> {
  return readFile(`/proc/self/task/${process.pid}/children`, 'utf8').then(
    () => true,
    () => false,
  );
}
