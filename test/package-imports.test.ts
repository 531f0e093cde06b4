// `import 'speechpipe'` loads the library only: the Socket.IO server (socket.io) and the
// multipart parser (busboy) are the emulator's and load with `speechpipe/emulator` alone; the
// Socket.IO client (socket.io-client, ws, engine.io-client) loads on the first Socket.IO
// operation, so an HTTP-only program starts without it.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/**
 * In a fresh process, import `specifier` with a resolve hook that sees every module loaded
 * (ESM and require alike) and return the packages from node_modules that were loaded.
 */
function packagesLoadedBy(specifier: string): Promise<string[]> {
  const script = `
import { registerHooks } from 'node:module';
const loaded = new Set();
registerHooks({
  resolve(specifier, context, next) {
    const result = next(specifier, context);
    const m = /\\/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(result.url);
    if (m) loaded.add(m[1]);
    return result;
  },
});
await import(${JSON.stringify(specifier)});
console.log(JSON.stringify([...loaded].sort()));
`;
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', script], { cwd: root }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout) as string[]),
    );
  });
}

const EMULATOR_ONLY = ['busboy', 'socket.io'];
const NOT_AT_IMPORT = [...EMULATOR_ONLY, 'socket.io-client', 'ws', 'engine.io-client'];

test('the source entry (src/index.ts) loads neither socket.io, busboy nor the Socket.IO client', async () => {
  const loaded = await packagesLoadedBy('./src/index.ts');
  assert.ok(loaded.includes('undici'), loaded.join(' '));
  for (const name of NOT_AT_IMPORT)
    assert.ok(!loaded.includes(name), `${name} was loaded: ${loaded.join(' ')}`);
});

test("the built package ('speechpipe', dist/) loads neither socket.io, busboy nor the Socket.IO client", async () => {
  assert.ok(
    existsSync(`${root}/dist/index.js`),
    'dist/ is missing: `npm test` builds it; run `npm run build`',
  );
  const loaded = await packagesLoadedBy('speechpipe');
  assert.ok(loaded.includes('undici'), loaded.join(' '));
  for (const name of NOT_AT_IMPORT)
    assert.ok(!loaded.includes(name), `${name} was loaded: ${loaded.join(' ')}`);
});

test("'speechpipe/emulator' does load them (the check sees what it looks for)", async () => {
  const loaded = await packagesLoadedBy('speechpipe/emulator');
  for (const name of EMULATOR_ONLY) assert.ok(loaded.includes(name), `${name} not seen: ${loaded.join(' ')}`);
});
