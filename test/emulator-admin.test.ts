// The admin endpoint under /_emulator/: statistics as JSON (never an API key), fault rules
// added, listed, removed and cleared over HTTP with checked bodies; loopback peers only,
// decided by the socket's address; no API key needed, and not part of the service's counters.

import assert from 'node:assert/strict';
import { networkInterfaces } from 'node:os';
import { after, test } from 'node:test';
import { Agent } from 'undici';
import { ADMIN_BODY_LIMIT, isLoopbackAddress, REDACTED_KEY } from '../src/emulator/admin.ts';
import { type EmulatorKey, startEmulator } from '../src/emulator/index.ts';
import { call, uuid } from './helpers/emulator-fixtures.ts';

const ALL = ['batch', 'realtime_asr', 'diarization', 'tts'] as EmulatorKey['capabilities'];
const KEY_A = 'admin-test-key-a-secret';
const KEY_B = 'admin-test-key-b-secret';
const dispatcher = new Agent();
const emu = await startEmulator({
  keys: [
    { key: KEY_A, account: 'a', tier: 'standard', capabilities: ALL },
    { key: KEY_B, account: 'b', tier: 'free', capabilities: ['tts'] },
  ],
  faults: [{ operation: 'tts.http', key: KEY_B, action: { type: 'delay', ms: 1 } }],
});
after(async () => {
  await emu.close();
  await dispatcher.close();
});

const admin = (path: string, options: Parameters<typeof call>[1] = {}) =>
  call(`${emu.url}/_emulator${path}`, { key: null, dispatcher, ...options });
const postRules = (body: unknown, headers: Record<string, string> = {}) =>
  admin('/faults', {
    method: 'POST',
    body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
const getJob = (key = KEY_A) => call(`${emu.url}/v1/transcribe/${uuid()}`, { key, dispatcher });

test('GET /_emulator/stats is emulator.stats() as JSON, needs no key, and never shows an API key', async () => {
  assert.equal((await getJob()).status, 404);
  assert.equal((await getJob('wrong-key-secret')).status, 401);
  assert.equal((await getJob(KEY_B)).status, 403);
  const reply = await admin('/stats');
  assert.equal(reply.status, 200, reply.text);
  assert.match(String(reply.headers['content-type']), /^application\/json/);
  const stats = reply.json() as ReturnType<typeof emu.stats>;
  assert.deepEqual(stats, emu.stats());
  assert.equal(stats.requests['batch.get'], 3);
  assert.equal(stats.rejections.AUTH_UNAUTHORIZED, 1);
  assert.equal(stats.rejections.AUTH_FORBIDDEN, 1);
  for (const secret of [KEY_A, KEY_B, 'wrong-key-secret']) assert.ok(!reply.text.includes(secret), secret);
  // Admin requests are not the service's traffic: they are not counted.
  assert.deepEqual((await admin('/stats')).json(), stats);
});

test('a rule posted over HTTP acts on service requests, is listed (key redacted) and removed by id', async () => {
  const added = await postRules({
    operation: 'batch.get',
    key: KEY_A,
    action: { type: 'status', status: 503, code: 'SERVER_DEPENDENCY_FAILURE', retryAfter: 2 },
  });
  assert.equal(added.status, 201, added.text);
  const { id } = added.json() as { id: number };
  assert.ok(Number.isInteger(id));
  for (let i = 0; i < 2; i++) {
    const faulted = await getJob();
    assert.equal(faulted.status, 503, faulted.text);
    assert.equal((faulted.json() as { code: string }).code, 'SERVER_DEPENDENCY_FAILURE');
    assert.equal(faulted.headers['retry-after'], '2');
  }
  // Only that key's requests.
  assert.equal((await getJob(KEY_B)).status, 403);
  const listed = await admin('/faults');
  assert.equal(listed.status, 200);
  const { faults } = listed.json() as { faults: { id: number; rule: { key?: string }; applied: number }[] };
  const mine = faults.find((f) => f.id === id);
  assert.equal(mine?.rule.key, REDACTED_KEY);
  assert.equal(mine?.applied, 2);
  assert.ok(!listed.text.includes(KEY_A) && !listed.text.includes(KEY_B), 'no API key in the listing');
  const removed = await admin(`/faults/${id}`, { method: 'DELETE' });
  assert.deepEqual([removed.status, removed.json()], [200, { removed: id }]);
  assert.equal((await getJob()).status, 404);
  assert.equal((await admin(`/faults/${id}`, { method: 'DELETE' })).status, 404);
  assert.equal(emu.stats().faultsApplied.status, 2);
});

test('an array of rules is added whole or not at all; DELETE /_emulator/faults clears every rule', async () => {
  const before = (await admin('/faults')).json() as { faults: unknown[] };
  const bad = await postRules([
    { operation: 'batch.get', action: { type: 'fail' } },
    { operation: 'batch.get', action: { type: 'status', status: 42 } },
  ]);
  assert.equal(bad.status, 400);
  const body = bad.json() as { code: string; detail: string };
  assert.equal(body.code, 'VALIDATION_INVALID_FORMAT');
  assert.equal(body.detail, '[1].action.status: expected an integer from 100 to 599, got number 42');
  assert.deepEqual((await admin('/faults')).json(), before, 'the valid first rule was not added');
  const good = await postRules([
    { operation: 'batch.get', nth: 1, times: 1, action: { type: 'status', status: 500 } },
    { operation: '*', action: { type: 'delay', ms: 0 } },
  ]);
  assert.equal(good.status, 201, good.text);
  assert.equal((good.json() as { ids: number[] }).ids.length, 2);
  assert.equal((await getJob()).status, 500);
  assert.equal((await getJob()).status, 404, 'times: 1');
  const cleared = await admin('/faults', { method: 'DELETE' });
  // The two posted rules and the rule given in the options.
  assert.deepEqual(cleared.json(), { cleared: 3 });
  assert.deepEqual((await admin('/faults')).json(), { faults: [] });
});

test('bad admin requests: the field and what was expected, JSON only, a bounded body, 404 and 405', async () => {
  const cases: [unknown, string][] = [
    [{ operation: 'batch.gte', action: { type: 'fail' } }, 'operation: expected one of "*", "batch.submit"'],
    [{ operation: '*', action: { type: 'explode' } }, 'action.type: expected one of "status", "delay"'],
    [
      { operation: '*', action: { type: 'delay' } },
      'action.ms: expected a value (delay needs it), got nothing',
    ],
    [{ operation: '*', nth: 0, action: { type: 'fail' } }, 'nth: expected an integer >= 1, got number 0'],
    [{ operation: '*', action: { type: 'fail' }, tmes: 2 }, 'tmes: expected one of the fields operation'],
    [
      { operation: '*', action: { type: 'reset', stage: 'afterEffect', afterRecords: 1 } },
      'action: expected at most one of stage, afterBytes, afterRecords, got stage and afterRecords',
    ],
    ['null', '(top level): expected an object, got null'],
  ];
  for (const [rule, detail] of cases) {
    const reply = await postRules(rule);
    assert.equal(reply.status, 400, JSON.stringify(rule));
    assert.ok((reply.json() as { detail: string }).detail.startsWith(detail), reply.text);
  }
  const notJson = await postRules('{"operation": ');
  assert.equal(notJson.status, 400);
  assert.match((notJson.json() as { detail: string }).detail, /^the body is not JSON/);
  // A key left unquoted: V8 quotes the text around the unexpected token; the answer does not.
  const unquoted = await postRules('{"operation": "*", "key": sk_secret_4f9a2c, "action": {"type": "fail"}}');
  assert.equal(unquoted.status, 400);
  assert.match((unquoted.json() as { detail: string }).detail, /^the body is not JSON/);
  assert.doesNotMatch(unquoted.text, /secret/);
  const form = await admin('/faults', {
    method: 'POST',
    body: '{}',
    headers: { 'content-type': 'text/plain' },
  });
  assert.equal(form.status, 415, 'a simple cross-site form post cannot carry JSON');
  const rule = JSON.stringify({
    operation: '*',
    action: { type: 'status', status: 500, detail: 'x'.repeat(ADMIN_BODY_LIMIT) },
  });
  const declared = await postRules(rule);
  assert.equal(declared.status, 413);
  async function* chunked() {
    for (let i = 0; i < rule.length; i += 8192) yield Buffer.from(rule.slice(i, i + 8192));
  }
  const streamed = await admin('/faults', {
    method: 'POST',
    body: chunked(),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(streamed.status, 413, 'counted while reading when no length is declared');
  // The connection stays usable after a refused body.
  assert.equal((await admin('/stats')).status, 200);
  const atLimit = JSON.stringify({ operation: '*', action: { type: 'fail' } }).padEnd(ADMIN_BODY_LIMIT, ' ');
  const accepted = await postRules(atLimit);
  assert.equal(accepted.status, 201, 'a body exactly at the limit is accepted');
  await admin('/faults', { method: 'DELETE' });
  assert.deepEqual((await admin('/faults')).json(), { faults: [] });
  const wrong = await admin('/stats', { method: 'POST', body: '{}' });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.allow, 'GET');
  assert.equal((await admin('/faults/1', { method: 'GET' })).status, 405);
  assert.equal((await admin('/nothing')).status, 404);
  assert.equal((await admin('')).status, 404);
});

test('a request from a web page (Origin header) is refused, even from loopback', async () => {
  const reply = await admin('/stats', { headers: { origin: 'http://evil.example' } });
  assert.equal(reply.status, 403);
  assert.equal((reply.json() as { code: string }).code, 'ADMIN_FORBIDDEN');
  const post = await postRules({ operation: '*', action: { type: 'fail' } }, { origin: emu.url });
  assert.equal(post.status, 403);
  assert.deepEqual((await admin('/faults')).json(), { faults: [] });
});

test('loopback addresses, by the socket peer address', () => {
  for (const a of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1', '::FFFF:127.0.0.2'])
    assert.equal(isLoopbackAddress(a), true, a);
  for (const a of [
    undefined,
    '',
    '10.0.0.1',
    '192.0.2.2',
    '::ffff:10.0.0.1',
    'fd00::1',
    '0.0.0.0',
    '::',
    '128.0.0.1',
  ])
    assert.equal(isLoopbackAddress(a), false, String(a));
});

test('bound to a non-loopback address, a client there gets 403 from the admin endpoint but is served', async (t) => {
  const external = Object.values(networkInterfaces())
    .flat()
    .find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
  if (!external) {
    t.skip('no non-loopback IPv4 interface on this machine');
    return;
  }
  const remote = await startEmulator({ host: external });
  t.after(() => remote.close());
  // From the host's own external address, the peer address is that address, not loopback.
  const reply = await call(`${remote.url}/_emulator/stats`, { key: null, dispatcher });
  assert.equal(reply.status, 403, reply.text);
  assert.equal((reply.json() as { code: string }).code, 'ADMIN_FORBIDDEN');
  // A forwarding header does not make a client loopback.
  const forwarded = await call(`${remote.url}/_emulator/faults`, {
    key: null,
    method: 'POST',
    body: JSON.stringify({ operation: '*', action: { type: 'fail' } }),
    headers: { 'content-type': 'application/json', 'x-forwarded-for': '127.0.0.1', 'x-real-ip': '127.0.0.1' },
    dispatcher,
  });
  assert.equal(forwarded.status, 403);
  const served = await call(`${remote.url}/v1/transcribe/${uuid()}`, { key: remote.apiKey, dispatcher });
  assert.equal(served.status, 404, 'the service itself answers that client');
  assert.deepEqual(remote.stats().faultsApplied, {});
});

test('admin: false leaves /_emulator/ to the service (404 NOT_FOUND)', async (t) => {
  const plain = await startEmulator({ admin: false });
  t.after(() => plain.close());
  const reply = await call(`${plain.url}/_emulator/stats`, { key: null, dispatcher });
  assert.equal(reply.status, 404);
  assert.equal((reply.json() as { code: string }).code, 'NOT_FOUND');
});
