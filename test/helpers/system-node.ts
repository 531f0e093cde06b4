// The machine as a newcomer has it after setup: the system's `node` and `npm` on the PATH (no
// node_modules/.bin, no Node 24 put first), and a Node older than the library needs when the
// machine has one (Debian's 20 here).

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { isOlderNode, REQUIRED_NODE } from '../../src/protocol/node-version.ts';

/** A Node older than {@link REQUIRED_NODE} on this machine (the system one), or undefined. */
export function findOldNode(): { path: string; version: string } | undefined {
  const candidates = new Set(['/usr/bin/node', '/usr/local/bin/node', '/bin/node']);
  try {
    for (const p of execFileSync('which', ['-a', 'node'], { encoding: 'utf8' }).split('\n'))
      if (p) candidates.add(p);
  } catch {}
  for (const path of candidates) {
    if (!existsSync(path)) continue;
    try {
      const version = execFileSync(path, ['--version'], { encoding: 'utf8' }).trim().replace(/^v/, '');
      if (isOlderNode(version, REQUIRED_NODE)) return { path, version };
    } catch {}
  }
  return undefined;
}

/**
 * The environment of a shell on this machine outside npm: the PATH without any node_modules/.bin
 * and without the directory of the Node running the tests (npm scripts put Node 24 there), the
 * old Node's directory first when there is one; no npm_* variables of an outer `npm test`.
 */
export function systemEnv(): { env: NodeJS.ProcessEnv; node: string } {
  const ours = dirname(process.execPath);
  const old = findOldNode();
  const path = (process.env.PATH ?? '')
    .split(delimiter)
    .filter((dir) => dir !== '' && dir !== ours && !dir.includes(join('node_modules', '.bin')));
  if (old) path.unshift(dirname(old.path));
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  env.PATH = path.join(delimiter);
  delete env.API_URL;
  delete env.API_KEY;
  delete env.NODE_OPTIONS;
  // A nested test runner must not believe it reports to this one.
  delete env.NODE_TEST_CONTEXT;
  const node = execFileSync('sh', ['-c', 'command -v node'], { env, encoding: 'utf8' }).trim();
  const version = execFileSync(node, ['--version'], { env, encoding: 'utf8' }).trim();
  return { env, node: `${node} ${version}` };
}
