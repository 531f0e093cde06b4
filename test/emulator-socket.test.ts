// The emulator's Socket.IO server: the transport it accepts (websocket only, as the interface's
// handshake says) and the per-key request rate over events.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { call, connectSocket, emulatorsForFile } from './helpers/emulator-fixtures.ts';

const { dispatcher, emulator } = emulatorsForFile({ tts: { engine: 'synthetic' } });

describe('Socket.IO transport', () => {
  test('a long-polling handshake is refused; websocket connects', async () => {
    const emu = await emulator();
    for (const path of ['/socket.io', '/realtime/socket.io']) {
      const polling = await call(`${emu.url}${path}/?EIO=4&transport=polling`, {
        key: emu.apiKey,
        headers: { origin: emu.url },
        dispatcher,
      });
      assert.equal(polling.status, 400, polling.text);
      assert.doesNotMatch(polling.text, /"sid"/, 'no engine.io session was opened');
    }
    const socket = await connectSocket(emu.url, emu.apiKey);
    socket.close();
    assert.equal(emu.stats().socketConnections.opened, 1);
  });
});
