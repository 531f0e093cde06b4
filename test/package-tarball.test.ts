// The package as users get it: `npm pack` of a fresh copy of the sources (prepack builds
// dist/), installed into a new project, imported by name, its `speechpipe` binary run; and the
// same with `--omit=optional` (no @discordjs/opus, no ffmpeg-static).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import {
  cpSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

/** The environment of npm and the installed code: Node 24 first, nothing of an outer npm run. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!/^npm_/i.test(k)) env[k] = v;
  env.PATH = [dirname(process.execPath), join(root, 'node_modules', '.bin'), process.env.PATH].join(
    delimiter,
  );
  delete env.API_URL;
  delete env.API_KEY;
  // Not the test run's compile cache (test/setup.ts): a user's run has none, and the installed
  // copies live in new directories each time, whose code the cache would only pile up.
  delete env.NODE_COMPILE_CACHE;
  return env;
}

function run(
  file: string,
  args: string[],
  cwd: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd, env: cleanEnv(), timeout: 60_000, maxBuffer: 1 << 26 },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function ok(file: string, args: string[], cwd: string): Promise<string> {
  const r = await run(file, args, cwd);
  assert.equal(r.code, 0, `${file} ${args.join(' ')} exited ${r.code}\n${r.stderr}\n${r.stdout}`);
  return r.stdout;
}

/** The example files `speechpipe emulator --help` points to, shipped with the package. */
const EXAMPLES = ['emulator-accounts.json', 'emulator-faults.json'];

let work: string;
let tarball: string;
let packed: string[];
/** Two projects with the tarball installed: all dependencies, and without the optional ones. */
let full: string;
let lean: string;

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'speechpipe-pack-'));
  // What a fresh clone holds that the build needs, and no dist/.
  const clone = join(work, 'clone');
  mkdirSync(clone);
  for (const name of [
    'src',
    'package.json',
    'package-lock.json',
    'tsconfig.json',
    'tsconfig.build.json',
    'README.md',
    'LICENSE',
    'examples',
  ])
    cpSync(join(root, name), join(clone, name), { recursive: true });
  symlinkSync(realpathSync(join(root, 'node_modules')), join(clone, 'node_modules'), 'dir');
  const out = await ok('npm', ['pack', '--json', '--pack-destination', work], clone);
  // The JSON report follows whatever the prepack build printed.
  const report = JSON.parse(out.slice(out.search(/^\[/m))) as Array<{
    filename: string;
    files: Array<{ path: string }>;
  }>;
  tarball = join(work, report[0]!.filename);
  packed = report[0]!.files.map((f) => f.path);

  const project = async (name: string, flags: string[]) => {
    const dir = join(work, name);
    mkdirSync(dir);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, private: true, type: 'module' }));
    // Dependencies come from the npm cache when it has them. Install scripts are skipped where
    // optional dependencies are installed: @discordjs/opus would compile for a minute.
    await ok('npm', ['install', tarball, '--no-audit', '--no-fund', '--prefer-offline', ...flags], dir);
    return dir;
  };
  [full, lean] = await Promise.all([
    project('full', ['--ignore-scripts']),
    project('lean', ['--omit=optional']),
  ]);
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

test('the tarball holds dist/ (built by prepack), the LICENSE, and no sources or tests', () => {
  for (const file of [
    'dist/index.js',
    'dist/index.d.ts',
    'dist/emulator/index.js',
    'dist/cli/main.js',
    'LICENSE',
    'package.json',
  ])
    assert.ok(packed.includes(file), `${file} is packed`);
  assert.deepEqual(
    packed.filter(
      (f) =>
        !f.startsWith('dist/') &&
        !['LICENSE', 'README.md', 'package.json', ...EXAMPLES.map((e) => `examples/${e}`)].includes(f),
    ),
    [],
  );
  const license = readFileSync(join(full, 'node_modules/speechpipe/LICENSE'), 'utf8');
  assert.match(license, /^MIT License/);
  assert.match(license, /Copyright \(c\) 2026 speechpipe contributors/);
});

test('every shipped source map carries its sources', () => {
  const dist = join(full, 'node_modules/speechpipe/dist');
  const maps = (readdirSync(dist, { recursive: true }) as string[]).filter((f) => f.endsWith('.map'));
  assert.ok(maps.length > 50, `${maps.length} maps`);
  for (const file of maps) {
    const map = JSON.parse(readFileSync(join(dist, file), 'utf8')) as {
      sources: string[];
      sourcesContent?: Array<string | null>;
    };
    assert.equal(map.sourcesContent?.length, map.sources.length, `${file} has its sources`);
    for (const content of map.sourcesContent!) assert.ok(content && content.length > 0, file);
  }
});

/**
 * Imports both entry points by name, lists voices and transcribes a WAV on the emulator, and
 * resamples with the WebAssembly filters the installed dist/ assembles (asked of the module file
 * itself: the package exports no deep paths).
 */
const USE_LIBRARY = `
import { createClient, encodeWav, Resampler } from 'speechpipe';
import { startEmulator } from 'speechpipe/emulator';
import { resamplerBackend } from './node_modules/speechpipe/dist/audio/resampler.js';
const r = new Resampler({ sampleRate: 48000, channels: 2 }, { sampleRate: 16000, channels: 1 });
const head = r.push(new Int16Array(2 * 4800).fill(1000));
const resampler = { backend: resamplerBackend(), frames: head.length + r.end().length, middle: head[800] };
const emulator = await startEmulator();
const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey });
try {
  const voices = await client.tts.listVoices();
  const pcm = Buffer.alloc(16000 * 2);
  for (let i = 0; i < 16000; i++) pcm.writeInt16LE(Math.round(8000 * Math.sin(i * 0.2)), i * 2);
  const record = await client.fast.transcribeFinal(encodeWav(pcm, 16000, 1), { language: 'en' });
  console.log(JSON.stringify({ voices: voices.length, final: record.is_final, resampler }));
} finally {
  await client.close();
  await emulator.close();
}
`;

for (const [name, dir] of [
  ['installed with its optional dependencies', () => full],
  ['installed with --omit=optional', () => lean],
] as const) {
  test(`${name}: speechpipe and speechpipe/emulator import by name and work`, async () => {
    writeFileSync(join(dir(), 'use.mjs'), USE_LIBRARY);
    const result = JSON.parse(await ok(process.execPath, ['use.mjs'], dir())) as {
      voices: number;
      final: boolean;
      resampler: { backend: string; frames: number; middle: number };
    };
    assert.ok(result.voices > 0);
    assert.equal(result.final, true);
    assert.deepEqual(result.resampler, { backend: 'wasm-simd', frames: 1600, middle: 1000 });
  });

  test(`${name}: the speechpipe binary runs`, async () => {
    const bin = join(dir(), 'node_modules', '.bin', 'speechpipe');
    assert.equal((await ok(bin, ['--version'], dir())).trim(), version);
    assert.match(await ok(bin, ['tts', '--help'], dir()), /usage: speechpipe tts/);
  });
}

test('emulator --help names example files the installed package holds, and the emulator starts with them', async () => {
  const bin = join(full, 'node_modules', '.bin', 'speechpipe');
  const help = await ok(bin, ['emulator', '--help'], full);
  const installed = realpathSync(join(full, 'node_modules', 'speechpipe'));
  const named = EXAMPLES.map((name) => {
    const path = join(installed, 'examples', name);
    assert.ok(help.includes(path), `--help names ${path}:\n${help}`);
    return path;
  });
  // Started as the help says, with both files; it stops at the end of its standard input.
  const child = execFile(
    bin,
    ['emulator', '--accounts', named[0]!, '--faults', named[1]!, '--stop-on-stdin-end'],
    {
      cwd: full,
      env: cleanEnv(),
      timeout: 60_000,
    },
  );
  let stdout = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk;
    if (stdout.includes('\n')) child.stdin!.end();
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  assert.equal(code, 0, stdout);
  const accounts = JSON.parse(readFileSync(named[0]!, 'utf8')) as { keys: Array<{ key: string }> };
  assert.equal((JSON.parse(stdout.split('\n')[0]!) as { apiKey: string }).apiKey, accounts.keys[0]!.key);
});

test('the docs say how to install the package today: the tarball npm pack writes, by the name it writes', () => {
  const pages = [
    join(root, 'README.md'),
    ...readdirSync(join(root, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => join(root, 'docs', f)),
  ];
  const lines = pages.flatMap((page) =>
    readFileSync(page, 'utf8')
      .split('\n')
      .filter((line) => /\bnpm install\b.*\.tgz\b/.test(line))
      .map((line) => ({ page, line })),
  );
  assert.ok(lines.length > 0, 'a page of the docs installs the packed tarball');
  const name = tarball.slice(tarball.lastIndexOf('/') + 1);
  for (const { page, line } of lines)
    assert.ok(line.includes(`/${name}`), `${page}: ${line} (npm pack writes ${name})`);
});

test('installed with --omit=optional: no @discordjs/opus, and Ogg Opus decodes through ffmpeg with a warning', async () => {
  assert.throws(() => readdirSync(join(lean, 'node_modules/@discordjs/opus')), { code: 'ENOENT' });
  const script = `
import { execFileSync } from 'node:child_process';
import { Readable } from 'node:stream';
import { decode } from 'speechpipe';
const ogg = execFileSync('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-f', 'lavfi', '-i',
  'sine=frequency=440:sample_rate=48000:duration=0.3', '-c:a', 'libopus', '-f', 'ogg', 'pipe:1']);
const warnings = [];
process.on('warning', (w) => warnings.push(w.code));
const stream = Readable.from([ogg]).pipe(decode());
let decoder;
stream.on('format', (f) => { decoder = f.decoder; });
let bytes = 0;
for await (const chunk of stream) bytes += chunk.length;
await new Promise((r) => setImmediate(r));
console.log(JSON.stringify({ decoder, bytes, warnings }));
`;
  writeFileSync(join(lean, 'opus.mjs'), script);
  const r = await run(process.execPath, ['opus.mjs'], lean);
  assert.equal(r.code, 0, r.stderr);
  const result = JSON.parse(r.stdout) as { decoder: string; bytes: number; warnings: string[] };
  assert.equal(result.decoder, 'ffmpeg');
  assert.ok(result.bytes > 8000, `${result.bytes} bytes`);
  assert.deepEqual(result.warnings, ['SPEECHPIPE_OPUS_FFMPEG']);
  assert.match(r.stderr, /Opus is decoded by ffmpeg/);
});
