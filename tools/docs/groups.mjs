// A TypeDoc plugin: each export of the package entries goes in the group of what it is for
// (Client, Transforms, Sources and sinks, Archive, Errors, Protocol codecs, Emulator), from the
// folder of the module that defines it, as if its doc comment said `@group`. An export no rule
// places is a warning (and `npm run docs` fails on warnings), so a new export gets a group.

import { CommentTag, Converter, ReflectionKind } from 'typedoc';

/** The first rule whose pattern matches the defining file's path (or the test) wins. */
const RULES = [
  {
    group: 'Errors',
    test: (_file, reflection) => reflection.kindOf(ReflectionKind.Class) && /Error$/.test(reflection.name),
  },
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

/** @param {import('typedoc').Application} app */
export function load(app) {
  app.converter.on(Converter.EVENT_RESOLVE_BEGIN, (context) => {
    for (const reflection of Object.values(context.project.reflections)) {
      if (!reflection.isDeclaration() || !reflection.parent?.kindOf(ReflectionKind.Module)) continue;
      if (reflection.kindOf(ReflectionKind.Reference)) continue;
      const comment = reflection.comment ?? reflection.signatures?.[0]?.comment;
      if (!comment || comment.blockTags.some((tag) => tag.tag === '@group')) continue;
      const file = reflection.sources?.[0]?.fullFileName ?? '';
      const rule = RULES.find((r) => r.test(file, reflection));
      if (!rule) {
        app.logger.warn(
          `${reflection.getFriendlyFullName()} (${file}) is in no group: add a rule to tools/docs/groups.mjs`,
        );
        continue;
      }
      comment.blockTags.push(new CommentTag('@group', [{ kind: 'text', text: rule.group }]));
    }
  });
}
