// The service a command talks to: the deployment named by API_URL and API_KEY, or, when no
// API_URL is set, the built-in emulator started in this process.

import { createClient, type SpeechClient } from '../client/index.ts';
import { engineWords } from '../emulator/types.ts';
import { ConfigError } from '../protocol/errors.ts';

export interface Service {
  client: SpeechClient;
  /** `emulator` when the built-in one is running. */
  kind: 'deployment' | 'emulator';
  /**
   * What answers, as an archive's manifest records it: the API URL, or `emulator:<engine>` for
   * the built-in emulator (whose address changes from run to run, and whose words depend on
   * its engine).
   */
  name: string;
  close(): Promise<void>;
}

/**
 * The service of `env`, else the built-in emulator, whose use is logged (with what its words
 * are, unless the command does not `transcribe`).
 */
export async function openService(
  env: NodeJS.ProcessEnv = process.env,
  log: (line: string) => void = () => {},
  { transcribes = true }: { transcribes?: boolean } = {},
): Promise<Service> {
  if (env.API_URL) {
    // Said in the command's terms (the library's message names its `apiKey` option).
    if (!env.API_KEY?.trim())
      throw new ConfigError('API_URL is set but API_KEY is not: set API_KEY to the key of that service');
    const client = createClient({ env });
    return { client, kind: 'deployment', name: client.config.apiUrl, close: () => client.close() };
  }
  // Loaded only when it runs: a command talking to API_URL never loads the server side.
  const { startEmulator } = await import('../emulator/index.ts');
  const engine = emulatorEngine(env);
  const emulator = await startEmulator({ engine });
  const missing =
    engine === 'auto' && emulator.engine === 'generated' ? ' (PocketSphinx is not installed)' : '';
  log(
    `no API_URL set: using the built-in emulator at ${emulator.url}${transcribes ? `; ${engineWords(emulator.engine)}${missing}` : ''}`,
  );
  const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
  return {
    client,
    kind: 'emulator',
    name: `emulator:${emulator.engine}`,
    async close() {
      await client.close();
      await emulator.close();
    },
  };
}

const ENGINES = ['generated', 'pocketsphinx', 'auto'] as const;

/** The built-in emulator's engine: `SPEECHPIPE_EMULATOR_ENGINE` (generated, pocketsphinx, auto), default generated. */
export function emulatorEngine(env: NodeJS.ProcessEnv): (typeof ENGINES)[number] {
  const value = env.SPEECHPIPE_EMULATOR_ENGINE;
  if (value === undefined || value === '') return 'generated';
  if (!(ENGINES as readonly string[]).includes(value))
    throw new ConfigError(
      `SPEECHPIPE_EMULATOR_ENGINE must be generated, pocketsphinx or auto, got ${JSON.stringify(value)}`,
    );
  return value as (typeof ENGINES)[number];
}
