// One serving thread of an emulator run by `startEmulatorWorkers` (`threads.ts`): the whole
// emulator on the shared port, its admission and fault counters in the shared buffer, and the
// coordinating thread's commands (peers, fault rules, statistics, close) answered.

import { parentPort, workerData } from 'node:worker_threads';
import { startEmulatorServer } from './emulator.ts';
import { SharedState } from './shared-state.ts';
import {
  asker,
  closeForwarding,
  type ThreadMember,
  type WorkerCommand,
  type WorkerData,
  type WorkerMessage,
} from './threads.ts';

const data = workerData as WorkerData;
const port = parentPort!;
const post = (m: WorkerMessage) => port.postMessage(m);

const member: ThreadMember = {
  index: data.index,
  workers: data.workers,
  shared: new SharedState(data.layout, data.index, data.buffer),
  peers: [],
  ask: asker(port),
};

try {
  const { emulator, ctx, privateAddress } = await startEmulatorServer(
    { ...data.options, port: data.port },
    member,
  );
  for (const r of data.rules) ctx.faults.insert(r.id, r.rule, member.shared.ruleCounters(r.slot));
  port.on('message', (m: WorkerCommand) => {
    switch (m.type) {
      case 'peers':
        member.peers = m.peers;
        post({ type: 'done', seq: m.seq });
        break;
      case 'faults.insert':
        for (const r of m.rules) ctx.faults.insert(r.id, r.rule, member.shared.ruleCounters(r.slot));
        post({ type: 'done', seq: m.seq });
        break;
      case 'faults.remove':
        for (const id of m.ids) ctx.faults.remove(id);
        post({ type: 'done', seq: m.seq });
        break;
      case 'stats':
        post({ type: 'done', seq: m.seq, value: ctx.stats.snapshot() });
        break;
      case 'close':
        void emulator
          .close()
          .then(closeForwarding)
          .then(() => process.exit(0));
        break;
    }
  });
  const { port: listening } = new URL(emulator.url);
  post({ type: 'listening', url: emulator.url, port: Number(listening), private: privateAddress! });
} catch (err) {
  // Its code too (EADDRINUSE: a port in use), so the caller can tell a bad address from a fault.
  const code = (err as { code?: unknown }).code;
  post({ type: 'failed', error: (err as Error).message, ...(typeof code === 'string' ? { code } : {}) });
  process.exit(1);
}
