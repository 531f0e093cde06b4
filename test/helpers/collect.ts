// Run inputs through a stream and gather what comes out (objects, or bytes as one Buffer).

import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

export async function collectObjects<T>(
  inputs: Iterable<unknown>,
  stream: NodeJS.ReadWriteStream,
): Promise<T[]> {
  const out: T[] = [];
  await pipeline(
    Readable.from(inputs),
    stream,
    new Writable({
      objectMode: true,
      write(value: T, _encoding, callback) {
        out.push(value);
        callback();
      },
    }),
  );
  return out;
}

export async function collectBytes(
  inputs: Iterable<unknown>,
  stream: NodeJS.ReadWriteStream,
): Promise<Buffer> {
  const out = await collectObjects<Buffer | string>(inputs, stream);
  return Buffer.concat(out.map((c) => (typeof c === 'string' ? Buffer.from(c) : c)));
}
