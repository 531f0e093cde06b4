// A TypeDoc plugin: each export of the package entries goes in the group of what it is for
// (Client, Transforms, Sources and sinks, Archive, Errors, Protocol codecs, Emulator), from the
// module that defines it, as if its doc comment said `@group`; the long groups are cut into
// categories the same way (`@category`). An export no rule places is a warning (and
// `npm run docs` fails on warnings), so a new export, or a new module, gets its place here.

import { CommentTag, Converter, ReflectionKind } from 'typedoc';

const isErrorClass = (reflection) =>
  reflection.kindOf(ReflectionKind.Class) && /Error$/.test(reflection.name);

/** The first rule whose test passes for the defining file (and the reflection) wins. */
const GROUPS = [
  { group: 'Errors', test: (_file, reflection) => isErrorClass(reflection) },
  {
    group: 'Errors',
    test: (file) => /\/src\/(protocol\/(errors|error-codes)|audio\/(media-error|ffmpeg))\.ts$/.test(file),
  },
  { group: 'Client', test: (file) => /\/src\/(client\/|protocol\/config\.ts$)/.test(file) },
  { group: 'Transforms', test: (file) => /\/src\/(transforms|audio|workers)\//.test(file) },
  // The typed streams type the transforms' events; the speaker label is alignSpeakers' output.
  { group: 'Transforms', test: (file) => /\/src\/protocol\/(typed-stream|speaker-rule)\.ts$/.test(file) },
  { group: 'Sources and sinks', test: (file) => /\/src\/(sources|sinks)\//.test(file) },
  { group: 'Archive', test: (file) => /\/src\/archive\//.test(file) },
  { group: 'Emulator', test: (file) => /\/src\/emulator\//.test(file) },
  { group: 'Protocol codecs', test: (file) => /\/src\/protocol\//.test(file) },
];

/** Categories of the groups too long to read as one list, by the defining module's name. */
const CATEGORIES = {
  Transforms: [
    ['Decoding and resampling', /\/(decode|resample|resampler|resample-pool)\.ts$/],
    ['Live transcription', /\/(to-frames|pace|live-stream|replay-buffer)\.ts$/],
    [
      'Transcripts and speakers',
      /\/(assemble-transcript|merge-diarization|align-speakers|speaker-rule)\.ts$/,
    ],
    ['Captions, WAV and SVG', /\/(to-captions|to-wav|speaker-svg)\.ts$/],
    ['Wire streams', /\/(parse-ndjson|demux-tts)\.ts$/],
    ['Typed events', /\/typed-stream\.ts$/],
  ],
  'Protocol codecs': [
    ['Live frames', /\/frame\.ts$/],
    ['NDJSON', /\/ndjson\.ts$/],
    ['TTS', /\/tts-(frames|request)\.ts$/],
    ['WAV', /\/riff\.ts$/],
    ['Records and jobs', /\/(records|jobs)\.ts$/],
    ["The service's tables", /\/(limits|languages|operations|socket-events)\.ts$/],
  ],
};

const tag = (name, text) => new CommentTag(name, [{ kind: 'text', text }]);

/** @param {import('typedoc').Application} app */
export function load(app) {
  app.converter.on(Converter.EVENT_RESOLVE_BEGIN, (context) => {
    for (const reflection of Object.values(context.project.reflections)) {
      if (!reflection.isDeclaration() || !reflection.parent?.kindOf(ReflectionKind.Module)) continue;
      if (reflection.kindOf(ReflectionKind.Reference)) continue;
      const comment = reflection.comment ?? reflection.signatures?.[0]?.comment;
      if (!comment || comment.blockTags.some((t) => t.tag === '@group')) continue;
      const file = reflection.sources?.[0]?.fullFileName ?? '';
      const where = `${reflection.getFriendlyFullName()} (${file})`;
      const rule = GROUPS.find((r) => r.test(file, reflection));
      if (!rule) {
        app.logger.warn(`${where} is in no group: add a rule to tools/docs/groups.mjs`);
        continue;
      }
      comment.blockTags.push(tag('@group', rule.group));
      const categories = CATEGORIES[rule.group];
      if (!categories) continue;
      const category = categories.find(([, pattern]) => pattern.test(file));
      if (!category) {
        app.logger.warn(`${where} is in no category of ${rule.group}: add one to tools/docs/groups.mjs`);
        continue;
      }
      comment.blockTags.push(tag('@category', category[0]));
    }
  });
}
