// An in-process emulator and a client pointed at it, closed when the test file ends.

import { after } from 'node:test';
import { type ClientOptions, createClient, type SpeechClient } from '../../src/client/index.ts';
import { type Emulator, type EmulatorOptions, startEmulator } from '../../src/emulator/index.ts';
import { engineFromEnv } from './emulator-fixtures.ts';

export interface Service {
  emulator: Emulator;
  client: SpeechClient;
  /** Another client on the same emulator (closed with the file). */
  newClient(options?: ClientOptions): SpeechClient;
}

export async function startService(
  emulatorOptions: EmulatorOptions = {},
  clientOptions: ClientOptions = {},
): Promise<Service> {
  const emulator = await startEmulator({ ...engineFromEnv(), ...emulatorOptions });
  const clients: SpeechClient[] = [];
  const newClient = (options: ClientOptions = {}) => {
    const client = createClient({
      apiUrl: emulator.url,
      apiKey: emulator.apiKey,
      env: {},
      retry: { baseMs: 10, maxMs: 200 },
      ...clientOptions,
      ...options,
    });
    clients.push(client);
    return client;
  };
  const client = newClient();
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await emulator.close();
  });
  return { emulator, client, newClient };
}
