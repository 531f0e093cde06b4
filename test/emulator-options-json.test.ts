// Emulator options as JSON (the CLI's --accounts and --faults files, admin posts): what they
// accept is what startEmulator accepts, and every refusal names the field and what it expected.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { startEmulator } from '../src/emulator/index.ts';
import { accountsFromJson, EmulatorJsonError, faultRulesFromJson } from '../src/emulator/options-json.ts';

const example = async (name: string): Promise<unknown> =>
  JSON.parse(await readFile(new URL(`../examples/${name}`, import.meta.url), 'utf8'));

test('the example files parse, and startEmulator takes what they give', async () => {
  const accounts = accountsFromJson(await example('emulator-accounts.json'));
  const faults = faultRulesFromJson(await example('emulator-faults.json'));
  assert.deepEqual(
    accounts.keys.map((k) => [k.account, k.tier, k.capabilities.length]),
    [
      ['acme', 'enterprise', 4],
      ['acme', 'enterprise', 1],
      ['hobby', 'free', 2],
    ],
  );
  assert.deepEqual(accounts.limits.accountConcurrency, { tts: 2, realtime_asr: 4 });
  assert.equal(faults.length, 3);
  const emu = await startEmulator({ ...accounts, faults });
  await emu.close();
});

test('accounts: each refusal names the field and what it expected', () => {
  const key = { key: 'k1', account: 'a', tier: 'free' };
  const cases: [unknown, string][] = [
    [[], '(top level): expected an object, got an array'],
    [{}, 'keys: expected a nonempty array of keys, got nothing'],
    [{ keys: [] }, 'keys: expected a nonempty array of keys, got an array'],
    [
      { keys: [key], accounts: [] },
      'accounts: expected one of the fields keys, limits, got an unknown field',
    ],
    [
      { keys: [{ ...key, tier: 'gold' }] },
      'keys[0].tier: expected one of "free", "standard", "enterprise", got "gold"',
    ],
    [
      { keys: [{ ...key, tier: undefined }] },
      'keys[0].tier: expected one of "free", "standard", "enterprise", got nothing',
    ],
    [
      { keys: [key, { ...key, account: '' }] },
      'keys[1].key: expected a key no earlier entry has, got a repeated key',
    ],
    [
      { keys: [key, { ...key, key: 'k2', account: ' ' }] },
      'keys[1].account: expected a nonempty string, got " "',
    ],
    [{ keys: [{ ...key, key: ' padded' }] }, 'keys[0].key: expected a nonempty string of visible ASCII'],
    [
      { keys: [{ ...key, key: 7 }] },
      'keys[0].key: expected a nonempty string of visible ASCII without surrounding spaces, got number 7',
    ],
    [
      { keys: [{ ...key, capabilities: 'tts' }] },
      'keys[0].capabilities: expected an array of one of "batch"',
    ],
    [
      { keys: [{ ...key, capabilities: ['tts', 'asr'] }] },
      'keys[0].capabilities[1]: expected one of "batch", "realtime_asr", "diarization", "tts", got "asr"',
    ],
    [
      { keys: [key], limits: { ttsRequestBytes: 1.5 } },
      'limits.ttsRequestBytes: expected a positive integer, got number 1.5',
    ],
    [
      { keys: [key], limits: { sessionIdleSec: 0 } },
      'limits.sessionIdleSec: expected a positive number, got number 0',
    ],
    [
      { keys: [key], limits: { accountConcurrency: { speech: 1 } } },
      'limits.accountConcurrency.speech: expected one of the fields batch, fast',
    ],
    [
      { keys: [key], limits: { accountConcurrency: { tts: '2' } } },
      'limits.accountConcurrency.tts: expected a positive integer, got "2"',
    ],
    [
      { keys: [key], limits: { accountConcurrency: 2 } },
      'limits.accountConcurrency: expected an object, got number 2',
    ],
    [
      { keys: [key], limits: { sessionIdle: 5 } },
      'limits.sessionIdle: expected one of the fields batchRequestBytes',
    ],
  ];
  for (const [value, message] of cases) {
    assert.throws(
      () => accountsFromJson(value),
      (err: unknown) => err instanceof EmulatorJsonError && err.message.startsWith(message),
      `${JSON.stringify(value)} -> ${message}`,
    );
  }
  // A key is never echoed in an error.
  assert.throws(
    () => accountsFromJson({ keys: [{ ...key, key: 'secret-key\u0007' }] }),
    (err: Error) => !err.message.includes('secret-key'),
  );
});

test('fault rules: every action type converts, and every rule JSON accepts the injector accepts', async () => {
  const rules = faultRulesFromJson([
    {
      operation: 'batch.get',
      key: 'k',
      nth: 2,
      times: 3,
      action: {
        type: 'status',
        status: 429,
        code: 'X',
        detail: 'd',
        retryAfter: 'Wed, 21 Oct 2037 07:28:00 GMT',
        rawBody: '<html>',
        contentType: 'text/html',
        stage: 'afterValidation',
      },
    },
    { operation: '*', action: { type: 'delay', ms: 0 } },
    { operation: 'stt.http', action: { type: 'reset', afterRecords: 0 } },
    { operation: 'stt.http', action: { type: 'reset', stage: 'before' } },
    { operation: 'stt.http', action: { type: 'endWithoutFinal' } },
    { operation: 'tts.http', action: { type: 'truncateTts', afterBytes: 10 } },
    { operation: 'tts.socket', action: { type: 'stall' } },
    { operation: 'fast.http', action: { type: 'slowBody', bytesPerSecond: 0.5 } },
    { operation: 'voices.socket', action: { type: 'fail' } },
  ]);
  assert.equal(rules.length, 9);
  assert.equal(rules[0]!.action.type === 'status' && rules[0]!.action.stage, 'afterValidation');
  const emu = await startEmulator({ faults: rules });
  await emu.close();
});

test('fault rules: each refusal names the field and what it expected', () => {
  const cases: [unknown, string][] = [
    [{}, '(top level): expected an array of fault rules, got an object'],
    [[{ action: { type: 'fail' } }], '[0].operation: expected one of "*", "batch.submit"'],
    [[{ operation: '*' }], '[0].action: expected an action object, got nothing'],
    [[{ operation: '*', action: 'fail' }], '[0].action: expected an object, got "fail"'],
    [
      [{ operation: '*', action: { type: 'fail', ms: 3 } }],
      '[0].action.ms: expected one of the fields type, got an unknown field',
    ],
    [
      [{ operation: '*', times: 1.5, action: { type: 'fail' } }],
      '[0].times: expected an integer >= 1, got number 1.5',
    ],
    [
      [{ operation: '*', key: '', action: { type: 'fail' } }],
      '[0].key: expected a nonempty string of visible ASCII',
    ],
    [
      [{ operation: '*', action: { type: 'status', status: 503, retryAfter: -1 } }],
      '[0].action.retryAfter: expected seconds >= 0 or an HTTP date string, got number -1',
    ],
    [
      [{ operation: '*', action: { type: 'status', status: 503, stage: 'later' } }],
      '[0].action.stage: expected one of "before", "afterValidation", "afterEffect", got "later"',
    ],
    [
      [{ operation: '*', action: { type: 'reset', stage: 'afterValidation' } }],
      '[0].action.stage: expected one of "before", "afterEffect", got "afterValidation"',
    ],
    [
      [{ operation: '*', action: { type: 'reset', afterBytes: -1 } }],
      '[0].action.afterBytes: expected an integer >= 0, got number -1',
    ],
    [
      [{ operation: '*', action: { type: 'slowBody', bytesPerSecond: 0 } }],
      '[0].action.bytesPerSecond: expected a number > 0, got number 0',
    ],
    [
      [{ operation: '*', action: { type: 'delay', ms: 'soon' } }],
      '[0].action.ms: expected a number >= 0, got "soon"',
    ],
    [
      [{ operation: '*', action: { type: 'truncateTts', afterBytes: null } }],
      '[0].action.afterBytes: expected an integer >= 0, got null',
    ],
  ];
  for (const [value, message] of cases) {
    assert.throws(
      () => faultRulesFromJson(value),
      (err: unknown) => err instanceof EmulatorJsonError && err.message.startsWith(message),
      `${JSON.stringify(value)} -> ${message}`,
    );
  }
});
