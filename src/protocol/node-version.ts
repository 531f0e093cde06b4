// The Node.js the library and the command need, and how an older one is told. This module
// imports nothing and uses no syntax newer than Node 12's, so that the command and the package
// entries can check before anything that needs a newer Node is loaded.

/** The oldest Node.js speechpipe runs on (undici 8 needs it); package.json `engines` says so too. */
export const REQUIRED_NODE = '22.19.0';

/** Whether Node `found` (x.y.z) is older than `needed`. */
export function isOlderNode(found: string, needed: string = REQUIRED_NODE): boolean {
  const a = found.split('.').map(Number);
  const b = needed.split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x !== y) return x < y;
  }
  return false;
}

/** What is wrong with the running Node.js (`needs Node.js ...; this is ...`), or undefined when it will do. */
export function nodeVersionProblem(
  version: string = process.versions.node,
  execPath: string = process.execPath,
): string | undefined {
  if (!isOlderNode(version)) return undefined;
  return `needs Node.js ${REQUIRED_NODE} or later; this is Node.js ${version} (${execPath})`;
}
