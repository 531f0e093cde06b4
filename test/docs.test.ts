// The README and the pages under docs/ say what the code does: the README starts with the two
// commands CI runs, its library example runs as written against `speechpipe emulator`, the
// synopses name only commands and options the CLI has, the emulator page lists exactly the
// fault operation names the code accepts, and every relative link leads to a file and heading.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chosenEngine } from '../src/emulator/engine/pocketsphinx.ts';
import { engineWords } from '../src/emulator/types.ts';
import { OPERATIONS } from '../src/protocol/operations.ts';
import { speechWav } from './helpers/speech.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const run = promisify(execFile);
const read = (file: string) => readFileSync(join(root, file), 'utf8');
const README = read('README.md');
const PAGES = [
  'README.md',
  ...readdirSync(join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The fenced blocks of `markdown` whose info string is `lang`, in order. */
function fenced(markdown: string, lang: string): string[] {
  const blocks: string[] = [];
  const re = new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm');
  for (const m of markdown.matchAll(re)) blocks.push(m[1]!);
  return blocks;
}

/** The text of the section under `heading` (to the next heading of the same or a higher level). */
function section(markdown: string, heading: string): string {
  const level = /^#+/.exec(heading)![0].length;
  const start = markdown.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `no "${heading}" heading`);
  const rest = markdown.slice(start + heading.length + 2);
  const end = rest.search(new RegExp(`^#{1,${level}} `, 'm'));
  return end < 0 ? rest : rest.slice(0, end);
}

test("the README's first lines are the two commands, and CI runs the test one", () => {
  const lines = README.split('\n');
  assert.equal(lines[0], '# speechpipe');
  assert.match(lines[2]!, /^ {4}bash scripts\/setup\.sh && npm start {4}# /);
  assert.match(lines[3]!, /^ {4}bash scripts\/setup\.sh && npm test {5}# /);
  assert.match(read('.ci/run'), /^bash scripts\/setup\.sh && npm test$/m);
});

const work = mkdtempSync(join(tmpdir(), 'speechpipe-docs-'));
after(() => rmSync(work, { recursive: true, force: true }));

test("the README's library example runs as written, against the emulator's JSON line", async (t) => {
  assert.ok(
    existsSync(join(root, 'dist/index.js')),
    'dist/ is missing: `npm test` builds it; run `npm run build`',
  );
  const examples = fenced(README, 'js');
  assert.equal(examples.length, 1, 'the README has one library example');
  // A project with speechpipe installed from the checkout's path (npm links the folder).
  const project = join(work, 'project');
  mkdirSync(join(project, 'node_modules'), { recursive: true });
  symlinkSync(root, join(project, 'node_modules', 'speechpipe'), 'dir');
  writeFileSync(join(project, 'package.json'), JSON.stringify({ private: true }));
  // Saved as the README says: an ES module, `captions.mjs`.
  assert.match(README, /save it\s+as `captions\.mjs`/);
  writeFileSync(join(project, 'captions.mjs'), examples[0]!);
  writeFileSync(
    join(project, 'talk.wav'),
    await speechWav('The weather today is dry. Tomorrow it will rain in the west.', { pauseMs: 300 }),
  );

  // `npx speechpipe emulator`: the installed binary, on this Node.
  const emulator = spawn(process.execPath, [join(root, 'dist/cli/main.js'), 'emulator'], {
    cwd: project,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = once(emulator, 'exit');
  let stderr = '';
  emulator.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  t.after(async () => {
    if (emulator.exitCode === null) emulator.kill('SIGTERM');
    await exited;
  });
  const lines = createInterface({ input: emulator.stdout });
  const [line] = (await once(lines, 'line')) as [string];
  lines.close();
  const announced = JSON.parse(line) as { url: string; apiKey: string };

  const env: NodeJS.ProcessEnv = { ...process.env, API_URL: announced.url, API_KEY: announced.apiKey };
  delete env.API_PATH;
  await run(process.execPath, ['captions.mjs', 'talk.wav', 'talk.vtt'], { cwd: project, env });
  const vtt = readFileSync(join(project, 'talk.vtt'), 'utf8');
  assert.match(vtt, /^WEBVTT\n/);
  const cues = vtt.match(/^\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}$/gm) ?? [];
  assert.ok(cues.length >= 1, vtt);

  emulator.kill('SIGTERM');
  const [code] = (await exited) as [number | null];
  assert.equal(code, 0, stderr);
  // Where a newcomer meets the emulator, it says what its words are.
  assert.match(stderr, /listening at http:\/\/127\.0\.0\.1:\d+; .*not recognised from what was said/);
});

test('the main job writes what the README says, where it says, and what the emulator answered', async () => {
  // The job as the repository has it, in a copy whose out/ is its own: main-job.ts writes
  // beside the folder it lives in.
  const copy = join(work, 'checkout');
  mkdirSync(join(copy, 'examples'), { recursive: true });
  writeFileSync(join(copy, 'examples', 'main-job.ts'), read('examples/main-job.ts'));
  symlinkSync(join(root, 'src'), join(copy, 'src'), 'dir');
  const media = join(work, 'media');
  mkdirSync(join(media, 'en'), { recursive: true });
  writeFileSync(
    join(media, 'en', 'forecast.wav'),
    await speechWav('Dry today. Rain tomorrow.', { pauseMs: 700 }),
  );

  const env: NodeJS.ProcessEnv = { ...process.env, SPEECHPIPE_MEDIA: media };
  delete env.API_URL;
  delete env.API_KEY;
  const { stderr } = await run(process.execPath, [join(copy, 'examples', 'main-job.ts')], { cwd: copy, env });
  const out = join(copy, 'out', 'transcripts');
  for (const ext of ['vtt', 'srt', 'txt', 'json'])
    assert.ok(existsSync(join(out, 'en', `forecast.wav.${ext}`)), `out/transcripts/en/forecast.wav.${ext}`);
  const [entry] = readFileSync(join(out, 'manifest.ndjson'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.equal(entry.status, 'done');
  // What the README quotes from the layout and from the emulator's notice.
  assert.match(README, /`out\/transcripts\/en\/jfk\.wav\.vtt`/);
  // `npm start` takes PocketSphinx when it is installed: the notice says whose words these are.
  const words = engineWords(chosenEngine('auto'));
  const lines = stderr.split('\n');
  assert.ok(
    lines.some(
      (l) => l.startsWith('no API_URL set: using the built-in emulator at ') && l.includes(`; ${words}`),
    ),
    stderr,
  );
  assert.ok(lines.includes(`these are the built-in emulator's answers: ${words} (docs/emulator.md)`), stderr);
  assert.match(stderr, /^results: \S+\/out\/transcripts\/<input>\.vtt, \.srt, \.txt and \.json/m);

  // A SPEECHPIPE_MEDIA that is not there is a mistake to say, not a demo to transcribe instead.
  const typo = join(work, 'medai');
  const failed = await run(process.execPath, [join(copy, 'examples', 'main-job.ts')], {
    cwd: copy,
    env: { ...env, SPEECHPIPE_MEDIA: typo },
  }).then(
    () => assert.fail('a SPEECHPIPE_MEDIA that is not there must fail the job'),
    (err: { code?: number; stderr?: string }) => err,
  );
  assert.equal(failed.code, 2, failed.stderr);
  assert.match(failed.stderr ?? '', /SPEECHPIPE_MEDIA=\S+medai: no such directory/);
  assert.ok(!existsSync(join(copy, 'out', 'demo-archive')), 'no demo archive made');
});

/** Every `speechpipe <command> ...` line of a synopsis block: the command and its long options. */
function synopsisUses(block: string): Map<string, Set<string>> {
  const uses = new Map<string, Set<string>>();
  let command: string | undefined;
  for (const line of block.split('\n')) {
    const m = /^speechpipe (\w+)/.exec(line);
    if (m) command = m[1]!;
    if (!command) continue;
    const options = uses.get(command) ?? new Set<string>();
    for (const o of line.matchAll(/--[a-z][a-z-]*/g)) options.add(o[0]);
    uses.set(command, options);
  }
  return uses;
}

test('the synopses in the README and docs/cli.md name only commands and options the CLI has', async () => {
  const blocks = [
    fenced(section(README, '## The command'), ''),
    fenced(section(read('docs/cli.md'), '## Synopsis'), ''),
  ];
  const usage = new Map<string, string>();
  for (const [page, found] of [
    ['README.md', blocks[0]!],
    ['docs/cli.md', blocks[1]!],
  ] as const) {
    assert.equal(found.length, 1, `${page} has one synopsis block`);
    for (const [command, options] of synopsisUses(found[0]!)) {
      if (!usage.has(command)) {
        const { stdout } = await run(process.execPath, [join(root, 'src/cli/main.ts'), command, '--help']);
        usage.set(command, stdout);
      }
      for (const option of options)
        assert.ok(
          new RegExp(`${option}(?![a-z-])`).test(usage.get(command)!),
          `${page}: speechpipe ${command} ${option} is not in its --help`,
        );
    }
  }
  assert.deepEqual([...usage.keys()].sort(), ['bench', 'caption', 'emulator', 'transcribe', 'tts', 'worker']);
});

test('docs/emulator.md lists exactly the fault operation names the emulator accepts', () => {
  const table = section(read('docs/emulator.md'), '### Operation names');
  const listed = [...table.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1]!);
  assert.deepEqual([...listed].sort(), [...OPERATIONS, '*'].sort());
});

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

test('relative links in the README and docs/ lead to files and headings that exist', () => {
  const broken: string[] = [];
  for (const page of PAGES) {
    const text = read(page).replace(/^```[\s\S]*?^```$/gm, '');
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const [path, anchor] = target!.split('#') as [string, string | undefined];
      const file = path === '' ? join(root, page) : resolve(dirname(join(root, page)), path);
      if (!existsSync(file)) {
        broken.push(`${page}: ${target} (no file)`);
        continue;
      }
      if (anchor === undefined) continue;
      const headings = readFileSync(file, 'utf8')
        .replace(/^```[\s\S]*?^```$/gm, '')
        .match(/^#+ .*$/gm)!
        .map((h) => anchorOf(h.replace(/^#+ /, '')));
      if (!headings.includes(anchor)) broken.push(`${page}: ${target} (no such heading)`);
    }
  }
  assert.deepEqual(broken, []);
});

test('every file of the repository the docs name exists', () => {
  const missing: string[] = [];
  for (const page of PAGES)
    for (const m of read(page).matchAll(/`((?:src|bench|test|examples|scripts|tools)\/[\w./-]+)`/g))
      if (!existsSync(join(root, m[1]!))) missing.push(`${page}: ${m[1]}`);
  assert.deepEqual(missing, []);
});

test('the docs say what is, not what was: no issue numbers or "before ..." history', () => {
  const found: string[] = [];
  for (const page of PAGES)
    for (const m of read(page).matchAll(
      /[^\n]{0,40}\b(issue \d+|stops? ago|until issue|before issue)[^\n]{0,20}/gi,
    ))
      found.push(`${page}: ...${m[0]}...`);
  assert.deepEqual(found, []);
});

test('the package entries list their exports by name: no export * to publish a helper', () => {
  for (const entry of ['src/index.ts', 'src/emulator/index.ts'])
    assert.doesNotMatch(read(entry), /^export \* /m, `${entry} re-exports a whole module`);
});

/** The HTML of the API reference `npm run docs` built, by its path under docs/api. */
function apiPage(page: string): string {
  const file = join(root, 'docs', 'api', page);
  assert.ok(
    existsSync(file),
    `${file} is missing: \`npm test\` builds the reference first; run \`npm run docs\``,
  );
  return readFileSync(file, 'utf8');
}

test("the API reference opens on the README's introduction and groups each entry by what it is for", () => {
  const intro = README.split('<!-- #region intro -->\n')[1]!.split('\n<!-- #endregion intro -->')[0]!;
  const text = (html: string) =>
    html
      .replace(/<[^>]+>/g, '')
      .replace(/&#39;/g, "'")
      .replace(/\s+/g, ' ');
  assert.ok(
    text(apiPage('index.html')).includes(text(intro.replace(/`/g, ''))),
    'the landing page has the intro',
  );
  // A group's heading, or "Group - Category" for each category of a long group.
  const groups = (html: string) => [
    ...new Set([...html.matchAll(/<h2[^>]*>(?:<[^>]+>)*([^<]+)/g)].map((m) => m[1]!.split(' - ')[0]!.trim())),
  ];
  // Purpose groups only: an entry no rule placed would fall into a kind group ("Functions").
  assert.deepEqual(groups(apiPage('modules/speechpipe.html')), [
    'Client',
    'Transforms',
    'Sources and sinks',
    'Archive',
    'Errors',
    'Protocol codecs',
  ]);
  assert.deepEqual(groups(apiPage('modules/speechpipe_emulator.html')), ['Emulator']);
});

test("the API reference's source links open the defining file in this checkout", () => {
  apiPage('index.html');
  const pages = (readdirSync(join(root, 'docs', 'api'), { recursive: true }) as string[]).filter((f) =>
    f.endsWith('.html'),
  );
  let links = 0;
  const broken: string[] = [];
  for (const page of pages) {
    const html = apiPage(page);
    for (const m of html.matchAll(/Defined in <a href="([^"#]+)(?:#L\d+)?">([^<:]+):\d+/g)) {
      links++;
      const target = resolve(dirname(join(root, 'docs', 'api', page)), m[1]!);
      if (target !== join(root, m[2]!) || !existsSync(target)) broken.push(`${page}: ${m[1]}`);
    }
  }
  assert.ok(links > 500, `${links} source links`);
  assert.deepEqual(broken.slice(0, 5), []);
});
