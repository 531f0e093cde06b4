// Piscina's entry for resampling tasks, CommonJS on purpose. Piscina loads a task file with
// `require()` first, and in Node 22.12+ that is require(esm) of an ES module: a worker ended
// while it was still loading one (a pool closed, an aborted task's worker terminated) once
// aborted the whole process with a failed assertion in Node's loader
// (ModuleWrap::CreateRequiredModuleFacade). This file is required as the CommonJS it is, and
// loads the ES module task with `import()`, the asynchronous loader, on its first task.

// `.ts` beside the sources (Node's type stripping), `.js` in dist/.
const TASK_URL = require('node:url').pathToFileURL(
  `${__dirname}/resample-task${__filename.endsWith('.cts') ? '.ts' : '.js'}`,
).href as string;

let task: Promise<(input: unknown) => unknown> | undefined;

module.exports = async function resample(input: unknown): Promise<unknown> {
  task ??= import(TASK_URL).then((m: { default: (input: unknown) => unknown }) => m.default);
  return (await task)(input);
};
