// The WER table of docs/emulator.md: for each English recording of ../shared/media with a
// reference text, the word error rate through the whole pipeline (live, batch, fast) against
// the emulator's PocketSphinx engine, beside PocketSphinx run directly (pocketsphinx_continuous
// on a 16 kHz mono WAV that ffmpeg made). Prints a Markdown table.
//
//   node bench/wer-table.ts [name-filter]

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { createClient } from '../src/client/index.ts';
import { findPocketSphinx } from '../src/emulator/engine/pocketsphinx.ts';
import { startEmulator } from '../src/emulator/index.ts';
import {
  englishReferences,
  ffmpegWav16k,
  MEDIA_DIR,
  normalizeWords,
  type PipelineMode,
  pipelineTranscript,
  pocketSphinxDirect,
  wordEdits,
} from '../test/helpers/wer.ts';

if (!findPocketSphinx()) {
  console.error('PocketSphinx is not installed (apt-get install pocketsphinx pocketsphinx-en-us)');
  process.exit(2);
}
const filter = process.argv[2];
const recordings = englishReferences().filter((r) => !filter || r.file.includes(filter));
if (recordings.length === 0) {
  console.error(`no English recordings with a reference text in ${MEDIA_DIR}`);
  process.exit(2);
}

const emulator = await startEmulator({ engine: 'pocketsphinx' });
const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
const dir = await mkdtemp(join(tmpdir(), 'speechpipe-wer-'));
const modes: PipelineMode[] = ['live', 'batch', 'fast'];
const columns = ['direct', ...modes] as const;
const totals = Object.fromEntries(columns.map((c) => [c, 0])) as Record<(typeof columns)[number], number>;
let referenceWords = 0;
const rows: string[] = [];
try {
  for (const { file, text } of recordings) {
    const path = join(MEDIA_DIR, file);
    const wav = join(dir, `${basename(file)}.16k.wav`);
    await ffmpegWav16k(path, wav);
    const reference = normalizeWords(text);
    const edits: Record<string, number> = {
      direct: wordEdits(reference, normalizeWords(await pocketSphinxDirect(wav))),
    };
    for (const mode of modes)
      edits[mode] = wordEdits(reference, normalizeWords(await pipelineTranscript(client, path, mode)));
    referenceWords += reference.length;
    for (const c of columns) totals[c] += edits[c]!;
    const rate = (c: string) => (edits[c]! / reference.length).toFixed(2);
    rows.push(`| ${file} | ${reference.length} | ${rate('direct')} | ${modes.map(rate).join(' | ')} |`);
    console.error(rows.at(-1));
  }
} finally {
  await client.close();
  await emulator.close();
  await rm(dir, { recursive: true, force: true });
}
const all = (c: (typeof columns)[number]) => (totals[c] / referenceWords).toFixed(3);
console.log('| recording | words | PocketSphinx alone | live | batch | fast |');
console.log('|---|---:|---:|---:|---:|---:|');
for (const row of rows) console.log(row);
console.log(
  `| all (${recordings.length} recordings) | ${referenceWords} | ${all('direct')} | ${modes.map(all).join(' | ')} |`,
);
