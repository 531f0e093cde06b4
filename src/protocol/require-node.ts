// Imported first by each package entry (`speechpipe`, `speechpipe/emulator`): on a Node.js
// older than the library needs, the import fails here, saying what it needs and found, before
// undici (loaded after it) fails deep inside with a TypeError that names neither.

import { SpeechpipeError } from './errors.ts';
import { nodeVersionProblem } from './node-version.ts';

const problem = nodeVersionProblem();
if (problem !== undefined) throw new SpeechpipeError('ERR_NODE_VERSION', `speechpipe ${problem}`);
