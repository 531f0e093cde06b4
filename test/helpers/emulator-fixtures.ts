// Fixtures for the emulator's contract tests: synthetic speech-like PCM with known pauses,
// multipart bodies built byte by byte, a plain HTTP client (undici), Socket.IO connections, and
// emulators closed when the test file ends.

import assert from 'node:assert/strict';
import { after } from 'node:test';
import { io, type Socket } from 'socket.io-client';
import { Agent, type Dispatcher, request } from 'undici';
import { type Emulator, type EmulatorOptions, startEmulator } from '../../src/emulator/index.ts';
import { encodeWav } from '../../src/protocol/riff.ts';

export const RATE = 16_000;

/** Speech-like PCM16LE 16 kHz mono: harmonic bursts for `speech` seconds, zeros for `silence`. */
export function speechPcm(parts: ({ speech: number } | { silence: number })[], rate = RATE): Buffer {
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const seconds = 'speech' in part ? part.speech : part.silence;
    const n = Math.round(seconds * rate);
    const buf = Buffer.alloc(n * 2);
    if ('speech' in part) {
      for (let i = 0; i < n; i++) {
        const t = i / rate;
        const syllable = 0.55 + 0.45 * Math.abs(Math.sin(Math.PI * 4 * t));
        const v = Math.sin(2 * Math.PI * 150 * t) + 0.5 * Math.sin(2 * Math.PI * 300 * t);
        buf.writeInt16LE(Math.round(9000 * syllable * v), i * 2);
      }
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}

export const wavOf = (pcm: Buffer, rate = RATE): Buffer => encodeWav(pcm, rate);

export interface Part {
  name: string;
  filename?: string;
  contentType?: string;
  data: Buffer | string;
}

export const BOUNDARY = 'speechpipe-test-boundary';

/** A multipart/form-data body with the given parts (in order), and optional preamble/epilogue. */
export function multipart(parts: Part[], options: { epilogue?: string } = {}): Buffer {
  const chunks: Buffer[] = [];
  for (const p of parts) {
    const disposition = `form-data; name="${p.name}"${p.filename !== undefined ? `; filename="${p.filename}"` : ''}`;
    const type = p.contentType ?? (p.filename !== undefined ? 'application/octet-stream' : undefined);
    chunks.push(
      Buffer.from(
        `--${BOUNDARY}\r\ncontent-disposition: ${disposition}\r\n${type ? `content-type: ${type}\r\n` : ''}\r\n`,
      ),
    );
    chunks.push(Buffer.isBuffer(p.data) ? p.data : Buffer.from(p.data));
    chunks.push(Buffer.from('\r\n'));
  }
  chunks.push(Buffer.from(`--${BOUNDARY}--\r\n${options.epilogue ?? ''}`));
  return Buffer.concat(chunks);
}

export const MULTIPART_TYPE = `multipart/form-data; boundary=${BOUNDARY}`;

export const filePart = (data: Buffer, filename = 'audio.wav'): Part => ({ name: 'file', filename, data });

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  text: string;
  json: () => unknown;
}

export interface CallOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  key?: string | null;
  headers?: Record<string, string>;
  body?: Buffer | string | AsyncIterable<Buffer>;
  dispatcher?: Dispatcher;
  signal?: AbortSignal;
}

/** One HTTP call; the body is read whole. `key: null` sends no x-api-key header. */
export async function call(url: string, options: CallOptions = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key !== null && options.key !== undefined) headers['x-api-key'] = options.key;
  const res = await request(url, {
    method: options.method ?? (options.body === undefined ? 'GET' : 'POST'),
    headers,
    body: options.body as never,
    dispatcher: options.dispatcher,
    signal: options.signal,
  });
  const body = Buffer.from(await res.body.arrayBuffer());
  const text = body.toString('utf8');
  return { status: res.statusCode, headers: res.headers, body, text, json: () => JSON.parse(text) };
}

/** The lines of an NDJSON body, parsed. */
export function ndjson(text: string): Record<string, unknown>[] {
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Connect a Socket.IO client with the service's handshake headers; resolves once connected. */
export async function connectSocket(
  url: string,
  key: string | undefined,
  options: { path?: string; origin?: string | null } = {},
): Promise<Socket> {
  const headers: Record<string, string> = {};
  if (key !== undefined) headers['x-api-key'] = key;
  if (options.origin !== null) headers.origin = options.origin ?? url;
  const socket = io(url, {
    path: options.path ?? '/socket.io',
    transports: ['websocket'],
    extraHeaders: headers,
    reconnection: false,
    forceNew: true,
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', (err) => {
      socket.close();
      reject(err);
    });
  });
  return socket;
}

/** Wait until `predicate` holds, checking after each turn of the event loop (no timing). */
export async function until(predicate: () => boolean | Promise<boolean>, what = 'condition'): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await predicate()) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new Error(`gave up waiting for ${what}`);
}

/** A 4-byte-aligned random UUID string. */
export const uuid = (): string => globalThis.crypto.randomUUID();

/** The body of an error answer, after checking its status and code. */
export function expectError(
  reply: { status: number; text: string },
  status: number,
  code: string,
): Record<string, unknown> {
  assert.equal(reply.status, status, reply.text);
  const body = JSON.parse(reply.text) as Record<string, unknown>;
  assert.equal(body.code, code);
  return body;
}

/**
 * The engine the contract tests run against: the generated one unless
 * `SPEECHPIPE_EMULATOR_ENGINE` names another (`pocketsphinx` runs the same tests with recognized
 * words, to show the contract does not depend on the engine).
 */
export function engineFromEnv(): Pick<EmulatorOptions, 'engine'> {
  const engine = process.env.SPEECHPIPE_EMULATOR_ENGINE;
  return engine === 'pocketsphinx' || engine === 'auto' || engine === 'generated' ? { engine } : {};
}

/** Emulators (with `defaults`) and an HTTP agent for one test file, all closed when it ends. */
export function emulatorsForFile(defaults: EmulatorOptions = {}) {
  const dispatcher = new Agent();
  const started: Emulator[] = [];
  after(async () => {
    await Promise.all(started.map((e) => e.close()));
    await dispatcher.close();
  });
  const emulator = async (options: EmulatorOptions = {}): Promise<Emulator> => {
    const emu = await startEmulator({ ...engineFromEnv(), ...defaults, ...options });
    started.push(emu);
    return emu;
  };
  return { dispatcher, emulator };
}

/** Socket.IO events collected until one with `is_final: true`. */
export function collectUntilFinal<T extends { is_final?: unknown }>(
  socket: Socket,
  event: string,
): { events: T[]; done: Promise<void> } {
  const events: T[] = [];
  const done = new Promise<void>((resolve) =>
    socket.on(event, (e: T) => {
      events.push(e);
      if (e.is_final) resolve();
    }),
  );
  return { events, done };
}
