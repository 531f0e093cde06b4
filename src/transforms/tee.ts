// tee(): one byte or object stream copied to several branches. A write completes only when
// every branch has room (the slowest branch sets the pace: bounded memory); the end and any
// error reach every branch.

import { PassThrough, Writable } from 'node:stream';
import { InvalidArgumentError } from '../protocol/errors.ts';

export interface Tee {
  /** Write (or pipe) the source into this. */
  input: Writable;
  /** One Readable per branch, each carrying every chunk. */
  branches: PassThrough[];
}

export function tee(count: number, options: { objectMode?: boolean; highWaterMark?: number } = {}): Tee {
  if (!Number.isSafeInteger(count) || count < 1)
    throw new InvalidArgumentError('tee needs at least one branch');
  const branches = Array.from({ length: count }, () => new PassThrough(options));
  const closedEarly = () => new InvalidArgumentError('a tee branch closed before the input ended');
  const waitForRoom = (branch: PassThrough) =>
    new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        branch.off('drain', onDrain);
        branch.off('close', onClose);
        if (err) reject(err);
        else resolve();
      };
      const onDrain = () => done();
      const onClose = () => done(closedEarly());
      branch.on('drain', onDrain);
      branch.on('close', onClose);
    });
  const input = new Writable({
    objectMode: options.objectMode ?? false,
    ...(options.highWaterMark === undefined ? {} : { highWaterMark: options.highWaterMark }),
    write(chunk, _encoding, callback) {
      // A branch its reader destroyed without an error takes no more and never drains:
      // waiting for it would hold the input for good.
      if (branches.some((branch) => branch.destroyed)) {
        callback(closedEarly());
        return;
      }
      const waits: Promise<void>[] = [];
      for (const branch of branches) if (!branch.write(chunk)) waits.push(waitForRoom(branch));
      if (waits.length === 0) callback();
      else Promise.all(waits).then(() => callback(), callback);
    },
    final(callback) {
      for (const branch of branches) branch.end();
      callback();
    },
    destroy(err, callback) {
      // Also called after a normal finish (autoDestroy): then the branches must end on their
      // own, after their readers have the last chunk. Only a failure or an early destroy spreads.
      if (err || !input.writableFinished) {
        const reason = err ?? new InvalidArgumentError('the tee input was destroyed before it ended');
        for (const branch of branches) if (!branch.destroyed) branch.destroy(reason);
      }
      callback(err);
    },
  });
  // A branch that fails fails the input (and with it the others).
  for (const branch of branches) branch.once('error', (err) => input.destroy(err));
  return { input, branches };
}
