// Archive transcription as a library: the streams composed by hand, the one-call run with its
// events and summary, the three modes giving the same words, a refused key stopping the run at
// the first file, and a circuit breaker that waits for an unreachable service instead of
// failing every input.

import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { after, test } from 'node:test';
import { setImmediate } from 'node:timers/promises';
import {
  type ArchiveEvent,
  type ArchiveSummary,
  openArchiveStore,
  planConcurrency,
  transcribeArchive,
  transcribeEach,
  walkArchive,
  writeTranscripts,
} from '../src/archive/index.ts';
import { createClient } from '../src/client/index.ts';
import { startEmulator } from '../src/emulator/index.ts';
import { CAPABILITIES } from '../src/emulator/types.ts';
import { readManifest } from './helpers/cli.ts';
import { startService } from './helpers/service.ts';
import { speechWav } from './helpers/speech.ts';

const root = await mkdtemp(join(tmpdir(), 'speechpipe-archive-'));
after(() => rm(root, { recursive: true, force: true }));
const archive = join(root, 'archive');
await mkdir(join(archive, 'day1'), { recursive: true });
const sentences = [
  'Welcome to the archive. This is the first recording of the day.',
  'A short interview follows. It has two sentences in all.',
  'The third file talks about the weather. Rain is expected tomorrow.',
];
await writeFile(join(archive, 'day1', 'a.wav'), await speechWav(sentences[0]!, { pauseMs: 600 }));
await writeFile(join(archive, 'day1', 'b.wav'), await speechWav(sentences[1]!, { pauseMs: 600 }));
await writeFile(join(archive, 'c.wav'), await speechWav(sentences[2]!, { pauseMs: 600 }));
await writeFile(join(archive, 'notes.txt'), 'not audio');

const { emulator, client, newClient } = await startService();

async function all<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of iterable) out.push(item);
  return out;
}

test('the streams compose: walkArchive → transcribeEach → writeTranscripts', async () => {
  const out = join(root, 'out-streams');
  const store = await openArchiveStore({
    out,
    mode: 'fast',
    language: 'en',
    speakers: false,
    formats: ['txt'],
  });
  const events: ArchiveEvent[] = [];
  await pipeline(
    walkArchive([archive]),
    transcribeEach({ client, store, concurrency: 2 }),
    writeTranscripts({ store, onEvent: (e) => events.push(e) }),
  );
  const done = events.filter((e) => e.type === 'done');
  assert.deepEqual(done.map((e) => e.file.relative).sort(), ['c.wav', 'day1/a.wav', 'day1/b.wav']);
  assert.equal(events.filter((e) => e.type === 'started').length, 3);
  const text = await readFile(join(out, 'day1', 'b.wav.txt'), 'utf8');
  assert.ok(text.trim().split(/\s+/).length >= 5, text);
  const manifest = await readManifest(out);
  assert.equal(manifest.filter((e) => e.status === 'done').length, 3);
});

test('writeTranscripts: a promise onEvent returns holds the next event back until it settles', async () => {
  const store = await openArchiveStore({
    out: join(root, 'out-held'),
    mode: 'fast',
    language: 'en',
    speakers: false,
  });
  const files = ['x.wav', 'y.wav'].map((name) => ({
    path: join(root, name),
    relative: name,
    size: 1,
    mtimeMs: 1,
  }));
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const seen: string[] = [];
  const sink = writeTranscripts({
    store,
    onEvent: (e) => {
      seen.push(e.type === 'queued' ? e.file.relative : e.type);
      return seen.length === 1 ? held : undefined;
    },
  });
  const written = pipeline(Readable.from(files.map((file) => ({ type: 'queued', file }))), sink);
  for (let i = 0; i < 20; i++) await setImmediate();
  assert.deepEqual(seen, ['x.wav'], 'the second event waits for the first one taken');
  release();
  await written;
  assert.deepEqual(seen, ['x.wav', 'y.wav']);
});

test('transcribeArchive: a run of more events than it queues ends, its consumer taking them slowly', async () => {
  const many = join(root, 'many-hidden');
  await mkdir(many, { recursive: true });
  for (let i = 0; i < 150; i++) await writeFile(join(many, `.hidden-${i}.wav`), '');
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  for await (const event of transcribeArchive([many], {
    client,
    out: join(root, 'out-many'),
    mode: 'fast',
  })) {
    events.push(event);
    await setImmediate();
  }
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.type, 'summary');
  assert.equal(summary.total, 150);
  assert.equal(summary.skipped, 150);
  assert.equal(events.filter((e) => e.type === 'queued').length, 150);
  assert.equal(events.filter((e) => e.type === 'skipped').length, 150);
});

test('transcribeArchive: every input ends in an event, then the summary; resume skips what is done', async () => {
  const out = join(root, 'out-run');
  const events = await all(
    transcribeArchive([archive], { client, out, mode: 'fast', language: 'en', formats: ['json'] }),
  );
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.type, 'summary');
  assert.equal(summary.total, 3);
  assert.equal(summary.done, 3);
  assert.equal(summary.failed, 0);
  assert.ok(summary.totalAudioSeconds > 5, `probed ${summary.totalAudioSeconds} s`);
  assert.equal(events.filter((e) => e.type === 'queued').length, 3);
  assert.equal(events.filter((e) => e.type === 'probed').length, 3);
  for (const e of events.filter((e) => e.type === 'started')) {
    const i = events.indexOf(e);
    const end = events.findIndex(
      (x, j) => j > i && (x.type === 'done' || x.type === 'failed') && x.file.path === e.file.path,
    );
    assert.ok(end > i, `${e.file.relative} ends after it starts`);
  }
  const again = await all(
    transcribeArchive([archive], {
      client,
      out,
      mode: 'fast',
      language: 'en',
      formats: ['json'],
      resume: true,
    }),
  );
  const resumed = again.at(-1) as ArchiveSummary;
  assert.equal(resumed.done, 0);
  assert.equal(resumed.alreadyDone, 3, 'done in the first run');
  assert.equal(resumed.skipped, 0, 'inputs done before are not counted as skipped');
  assert.ok(again.every((e) => e.type !== 'started'));
});

test('resume transcribes again what another service did: the manifest records which service answered', async () => {
  const out = join(root, 'out-service');
  const options = { out, mode: 'fast', language: 'en', formats: ['json'] } as const;
  const summaryOf = async (extra: { service?: string; resume?: boolean }) =>
    (await all(transcribeArchive([archive], { client, ...options, ...extra }))).at(-1) as ArchiveSummary;
  assert.equal((await summaryOf({})).done, 3);
  // By default, the client's API URL.
  const first = await readManifest(out);
  assert.deepEqual(
    first.map((e) => e.settings?.service),
    [client.config.apiUrl, client.config.apiUrl, client.config.apiUrl],
  );
  // Another service (the emulator with another engine, a deployment): every input again.
  const elsewhere = await summaryOf({ service: 'emulator:pocketsphinx', resume: true });
  assert.equal(elsewhere.done, 3);
  assert.equal(elsewhere.alreadyDone, 0);
  // The same one again: nothing to do.
  const same = await summaryOf({ service: 'emulator:pocketsphinx', resume: true });
  assert.equal(same.alreadyDone, 3);
  assert.equal(same.done, 0);
  // Entries written before the service was recorded match any service.
  const lines = (await readManifest(out)).map((e) => {
    const { service: _service, ...settings } = e.settings!;
    return JSON.stringify({ ...e, settings });
  });
  await writeFile(join(out, 'manifest.ndjson'), `${lines.join('\n')}\n`);
  const older = await summaryOf({ resume: true });
  assert.equal(older.alreadyDone, 3);
  assert.equal(older.done, 0);
});

test('live, batch and fast give every word of the same file', async () => {
  const file = join(root, 'modes');
  await mkdir(file, { recursive: true });
  await writeFile(
    join(file, 'talk.wav'),
    await speechWav(`${sentences[0]} ${sentences[1]} ${sentences[2]}`, { pauseMs: 700 }),
  );
  const counts: Record<string, number> = {};
  for (const mode of ['live', 'batch', 'fast'] as const) {
    const out = join(root, `out-mode-${mode}`);
    const events = await all(
      transcribeArchive([file], { client, out, mode, language: 'en', formats: ['json'] }),
    );
    assert.equal((events.at(-1) as ArchiveSummary).done, 1, mode);
    const json = JSON.parse(await readFile(join(out, 'talk.wav.json'), 'utf8')) as { words: unknown[] };
    counts[mode] = json.words.length;
  }
  // The emulator's words come from the audio's speech regions, the same in every mode.
  assert.ok(counts.live! > 15, JSON.stringify(counts));
  assert.equal(counts.batch, counts.live, JSON.stringify(counts));
  assert.equal(counts.fast, counts.live, JSON.stringify(counts));
});

test('a refused key stops the run at the first file; the rest is left for resume, not failed', async () => {
  const out = join(root, 'out-401');
  const bad = newClient({ apiKey: 'not-a-key-of-this-emulator' });
  const before = emulator.stats().requests['fast.http'] ?? 0;
  const events = await all(
    transcribeArchive([archive], { client: bad, out, mode: 'fast', formats: ['txt'], concurrency: 1 }),
  );
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.stopped?.code, 'AUTH_UNAUTHORIZED', JSON.stringify(summary.stopped));
  assert.equal(summary.failed, 0);
  assert.equal(summary.done, 0);
  assert.equal(summary.notAttempted, 3);
  assert.equal(
    (emulator.stats().requests['fast.http'] ?? 0) - before,
    1,
    'one request, then the run stopped',
  );
  assert.equal(events.filter((e) => e.type === 'stopped').length, 1);
  const manifest = await readFile(join(out, 'manifest.ndjson'), 'utf8').catch(() => '');
  assert.equal(manifest.trim(), '', 'nothing recorded: a resumed run attempts every input');
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test('an unreachable service pauses the run; it goes on when the service answers, nothing failed', async () => {
  const port = await freePort();
  const key = 'archive-breaker-key';
  const down = createClient({
    apiUrl: `http://127.0.0.1:${port}`,
    apiKey: key,
    env: {},
    retry: { baseMs: 10, maxMs: 50 },
  });
  after(() => down.close());
  const out = join(root, 'out-breaker');
  let service: Awaited<ReturnType<typeof startEmulator>> | undefined;
  after(() => service?.close());
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  for await (const event of transcribeArchive([archive], {
    client: down,
    out,
    mode: 'fast',
    formats: ['txt'],
    breaker: { probeIntervalMs: 50 },
  })) {
    events.push(event);
    // The service comes up once the run has paused for it.
    if (event.type === 'paused')
      setTimeout(async () => {
        service = await startEmulator({
          port,
          keys: [
            {
              key,
              account: 'a',
              tier: 'standard' as const,
              capabilities: [...CAPABILITIES],
            },
          ],
        });
      }, 300);
  }
  const summary = events.at(-1) as ArchiveSummary;
  assert.ok(events.some((e) => e.type === 'paused'));
  assert.ok(events.some((e) => e.type === 'resumed'));
  assert.equal(summary.failed, 0, JSON.stringify(events.filter((e) => e.type === 'failed')));
  assert.equal(summary.done, 3);
});

test('a service that stays unreachable stops the run within its bound; nothing is recorded failed', async () => {
  const port = await freePort();
  const down = createClient({
    apiUrl: `http://127.0.0.1:${port}`,
    apiKey: 'test-key',
    env: {},
    retry: { baseMs: 10, maxMs: 50 },
  });
  after(() => down.close());
  const out = join(root, 'out-unreachable');
  const started = performance.now();
  const events = await all(
    transcribeArchive([archive], {
      client: down,
      out,
      mode: 'batch',
      formats: ['txt'],
      breaker: { probeIntervalMs: 50, maxOutageMs: 500 },
    }),
  );
  const summary = events.at(-1) as ArchiveSummary;
  assert.ok(performance.now() - started < 30_000);
  assert.equal(summary.stopped?.code, 'ERR_SERVICE_UNREACHABLE');
  assert.equal(summary.failed, 0);
  assert.equal(summary.notAttempted, 3);
  assert.ok(
    events.every((e) => e.type !== 'started'),
    'no file started while the service was down',
  );
});

test('a service that goes down mid-run: inputs that failed on the connection run again, none lost', async () => {
  const port = await freePort();
  const key = 'archive-restart-key';
  const keys = [
    {
      key,
      account: 'a',
      tier: 'standard' as const,
      capabilities: [...CAPABILITIES],
    },
  ];
  // Slow enough that the next input is under way when the first one's done event is seen.
  let service = await startEmulator({ port, keys, latency: { perRequestMs: 300 } });
  after(() => service.close());
  const flaky = createClient({
    apiUrl: `http://127.0.0.1:${port}`,
    apiKey: key,
    env: {},
    retry: { baseMs: 10, maxMs: 50 },
  });
  after(() => flaky.close());
  const out = join(root, 'out-flaky');
  const events: Array<ArchiveEvent | ArchiveSummary> = [];
  let restarted: Promise<void> | undefined;
  for await (const event of transcribeArchive([archive], {
    client: flaky,
    out,
    // Fast: the emulator keeps batch jobs in memory, and a restart would lose them.
    mode: 'fast',
    formats: ['txt'],
    concurrency: 1,
    breaker: { probeIntervalMs: 50 },
  })) {
    events.push(event);
    // Down after the first input is done; up again once the run has paused for it.
    if (event.type === 'done' && restarted === undefined) restarted = service.close();
    if (event.type === 'paused')
      restarted = (async () => {
        await restarted;
        service = await startEmulator({ port, keys });
      })();
  }
  await restarted;
  const summary = events.at(-1) as ArchiveSummary;
  assert.equal(summary.failed, 0, JSON.stringify(events.filter((e) => e.type === 'failed')));
  assert.equal(summary.done, 3);
  assert.ok(
    events.some((e) => e.type === 'started' && e.attempt > 0),
    'an input ran again',
  );
});

test('by default the largest inputs start first, and as many at once as the plan allows', async () => {
  const out = join(root, 'out-order');
  const events = await all(
    transcribeArchive([archive], { client, out, mode: 'fast', formats: ['txt'], concurrency: 1 }),
  );
  const sizes = events.filter((e) => e.type === 'started').map((e) => e.file.size);
  assert.equal(sizes.length, 3);
  assert.deepEqual(
    sizes,
    [...sizes].sort((a, b) => b - a),
  );
  const planned = newClient({ concurrency: { fast: 3, batch: 2, realtime_asr: 5, diarization: 4 } });
  const settings = { language: 'auto' as const, speakers: false };
  assert.equal(planConcurrency(planned, { ...settings, mode: 'fast' }), 6, 'ready for each slot as it frees');
  assert.equal(planConcurrency(planned, { ...settings, mode: 'batch' }), 8, 'waiting jobs hold no slot');
  assert.equal(planConcurrency(planned, { ...settings, mode: 'live' }), 5);
  assert.equal(planConcurrency(planned, { ...settings, mode: 'live', speakers: true }), 4);
});
