// The service a command talks to: the deployment named by API_URL and API_KEY, or, when no
// API_URL is set, the built-in emulator started in this process.

import { createClient, type SpeechClient } from '../client/index.ts';
import { GENERATED_WORDS } from '../emulator/types.ts';

export interface Service {
  client: SpeechClient;
  /** `emulator` when the built-in one is running. */
  kind: 'deployment' | 'emulator';
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
    const client = createClient({ env });
    return { client, kind: 'deployment', close: () => client.close() };
  }
  // Loaded only when it runs: a command talking to API_URL never loads the server side.
  const { startEmulator } = await import('../emulator/index.ts');
  const emulator = await startEmulator();
  log(
    `no API_URL set: using the built-in emulator at ${emulator.url}${transcribes ? `; ${GENERATED_WORDS}` : ''}`,
  );
  const client = createClient({ apiUrl: emulator.url, apiKey: emulator.apiKey, env: {} });
  return {
    client,
    kind: 'emulator',
    async close() {
      await client.close();
      await emulator.close();
    },
  };
}
