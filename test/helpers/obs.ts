// A real broadcast chain for the OBS caption tests: Debian's OBS Studio 29 (obs-websocket 5)
// headless under xvfb-run, with its own configuration in a temporary HOME (a scene with a colour
// source, the websocket server on a free port with a password, a custom RTMP service), streaming
// to Debian's nginx with libnginx-mod-rtmp on a free port, which records what it receives.

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readdir, stat, writeFile } from 'node:fs/promises';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { OBSWebSocket } from 'obs-websocket-js/json';
import { answers, freePort } from './ports.ts';

const RTMP_MODULE = '/usr/lib/nginx/modules/ngx_rtmp_module.so';

/** Why OBS tests cannot run here, or undefined when OBS, xvfb-run and nginx-rtmp are installed. */
export function obsMissing(): string | undefined {
  const missing: string[] = [];
  for (const [tool, args] of [
    ['obs', ['--version']],
    ['xvfb-run', ['--help']],
    ['xauth', ['version']],
    ['nginx', ['-v']],
  ] as const) {
    try {
      execFileSync(tool, args, { stdio: 'ignore', timeout: 10_000 });
    } catch (err) {
      // xvfb-run --help exits 0; obs --version too; a missing tool is ENOENT.
      if ((err as { code?: string }).code === 'ENOENT') missing.push(tool);
    }
  }
  if (!existsSync(RTMP_MODULE)) missing.push('libnginx-mod-rtmp');
  return missing.length === 0
    ? undefined
    : `${missing.join(', ')} not installed (scripts/setup.sh installs obs-studio, xvfb, xauth, nginx and libnginx-mod-rtmp)`;
}

/** A process group we started: its output kept (bounded) for a failure's message. */
interface Started {
  child: ChildProcess;
  output: () => string;
  exited: Promise<void>;
}

function startGroup(command: string, args: string[], env: NodeJS.ProcessEnv): Started {
  const child = spawn(command, args, { detached: true, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (d: Buffer) => {
    output = (output + d.toString()).slice(-20_000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return { child, output: () => output, exited };
}

/**
 * Stop a group we started (by its id): `signal` first, SIGKILL for what is still there after
 * 10 s. Done when no process of the group is left: xvfb-run, the leader, dies of the signal at
 * once, while OBS may still be closing (its port open).
 */
async function stopGroup(started: Started, signal: NodeJS.Signals): Promise<void> {
  const group = -started.child.pid!;
  const kill = (s: NodeJS.Signals | 0) => {
    try {
      process.kill(group, s);
      return true;
    } catch {
      return false; // no process of the group left
    }
  };
  kill(signal);
  const deadline = Date.now() + 10_000;
  while (kill(0)) {
    if (Date.now() > deadline) kill('SIGKILL');
    await new Promise((r) => setTimeout(r, 50));
  }
  await started.exited;
}

async function waitForPort(port: number, started: Started, what: string, timeoutMs = 30_000): Promise<void> {
  const began = Date.now();
  while (!(await answers(port))) {
    if (started.child.exitCode !== null || Date.now() - began > timeoutMs) {
      await stopGroup(started, 'SIGKILL');
      throw new Error(`${what} did not start:\n${started.output()}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** nginx with the RTMP module, recording every stream published to `rtmp://127.0.0.1:port/live`. */
export interface RtmpReceiver {
  /** The RTMP server URL for OBS's custom service. */
  url: string;
  /** The recordings so far (`.flv`), oldest first. */
  recordings(): Promise<string[]>;
  stop(): Promise<void>;
}

export async function startRtmpReceiver(dir: string): Promise<RtmpReceiver> {
  await mkdir(join(dir, 'recordings'), { recursive: true });
  const port = await freePort();
  const conf = join(dir, 'nginx.conf');
  await writeFile(
    conf,
    `load_module ${RTMP_MODULE};
daemon off;
master_process off;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} info;
events { worker_connections 64; }
rtmp {
  server {
    listen 127.0.0.1:${port};
    application live {
      live on;
      record all;
      record_path ${join(dir, 'recordings')};
      record_unique on;
    }
  }
}
`,
  );
  const nginx = startGroup('nginx', ['-e', join(dir, 'error.log'), '-p', dir, '-c', conf], process.env);
  await waitForPort(port, nginx, 'nginx (rtmp)');
  return {
    url: `rtmp://127.0.0.1:${port}/live`,
    async recordings() {
      const names = (await readdir(join(dir, 'recordings'))).filter((n) => n.endsWith('.flv'));
      const files = await Promise.all(
        names.map(async (n) => ({
          path: join(dir, 'recordings', n),
          at: (await stat(join(dir, 'recordings', n))).birthtimeMs,
        })),
      );
      return files.sort((a, b) => a.at - b.at || a.path.localeCompare(b.path)).map((f) => f.path);
    },
    stop: () => stopGroup(nginx, 'SIGQUIT'),
  };
}

/** OBS Studio running headless, its websocket server on `url` with `password`. */
export interface ObsStudio {
  url: string;
  password: string;
  /** An operator's own connection, to start and stop the stream as a person would. */
  operator(): Promise<OBSWebSocket>;
  /** Quit OBS (as when it crashes or is closed). */
  stop(): Promise<void>;
  /** Start it again with the same configuration and address. */
  start(): Promise<void>;
}

/**
 * OBS with a fresh configuration under `dir` (its HOME): one scene with a colour source, 320x240
 * at 15 fps, x264 ultrafast, streaming to `rtmpUrl` with stream key `key`.
 */
export async function startObs(dir: string, rtmpUrl: string, key = 'captions'): Promise<ObsStudio> {
  const port = await freePort();
  const password = `pw-${Math.random().toString(36).slice(2)}`;
  const config = join(dir, '.config', 'obs-studio');
  await mkdir(join(config, 'basic', 'profiles', 'speechpipe'), { recursive: true });
  await mkdir(join(config, 'basic', 'scenes'), { recursive: true });
  await writeFile(
    join(config, 'global.ini'),
    `[General]
FirstRun=true
[Basic]
Profile=speechpipe
ProfileDir=speechpipe
SceneCollection=speechpipe
SceneCollectionFile=speechpipe
[OBSWebSocket]
FirstLoad=false
ServerEnabled=true
ServerPort=${port}
AlertsEnabled=false
AuthRequired=true
ServerPassword=${password}
`,
  );
  await writeFile(
    join(config, 'basic', 'profiles', 'speechpipe', 'basic.ini'),
    `[General]
Name=speechpipe
[Output]
Mode=Simple
[SimpleOutput]
VBitrate=300
ABitrate=64
StreamEncoder=x264
Preset=ultrafast
[Video]
BaseCX=320
BaseCY=240
OutputCX=320
OutputCY=240
FPSType=1
FPSInt=15
[Audio]
SampleRate=48000
ChannelSetup=Mono
`,
  );
  await writeFile(
    join(config, 'basic', 'profiles', 'speechpipe', 'service.json'),
    JSON.stringify({
      type: 'rtmp_custom',
      settings: { server: rtmpUrl, key, bwtest: false, use_auth: false },
    }),
  );
  const scene = '5f1c3a52-0c6e-4c3e-9a51-0b8c8f0e7d21';
  const colour = '9d2f7a44-3b1e-4f5a-8c2d-6e4b1a9c0f13';
  await writeFile(
    join(config, 'basic', 'scenes', 'speechpipe.json'),
    JSON.stringify({
      name: 'speechpipe',
      current_scene: 'Scene',
      current_program_scene: 'Scene',
      scene_order: [{ name: 'Scene' }],
      sources: [
        {
          id: 'scene',
          versioned_id: 'scene',
          name: 'Scene',
          uuid: scene,
          settings: { id_counter: 1, items: [{ name: 'Colour', source_uuid: colour, visible: true, id: 1 }] },
        },
        {
          id: 'color_source_v3',
          versioned_id: 'color_source_v3',
          name: 'Colour',
          uuid: colour,
          settings: { color: 0xff3366cc, width: 320, height: 240 },
        },
      ],
    }),
  );
  const env = { ...process.env, HOME: dir, XDG_CONFIG_HOME: join(dir, '.config') };
  let running: Started | undefined;
  const operators: OBSWebSocket[] = [];
  const studio: ObsStudio = {
    url: `ws://127.0.0.1:${port}`,
    password,
    async operator() {
      const obs = new OBSWebSocket();
      await obs.connect(studio.url, password);
      operators.push(obs);
      return obs;
    },
    async start() {
      running = startGroup(
        'xvfb-run',
        ['-a', '-s', '-screen 0 640x480x24', 'obs', '--multi', '--disable-missing-files-check'],
        env,
      );
      await waitForPort(port, running, 'OBS (obs-websocket)');
      const mine = running;
      // OBS going away by itself is worth its last words in the test's output.
      void mine.exited.then(() => {
        if (running === mine) process.stderr.write(`OBS exited by itself:\n${mine.output().slice(-4000)}\n`);
      });
    },
    async stop() {
      for (const o of operators.splice(0)) await o.disconnect().catch(() => {});
      const stopping = running;
      running = undefined;
      if (stopping) await stopGroup(stopping, 'SIGTERM');
    },
  };
  await studio.start();
  return studio;
}

/** Start streaming through an operator connection; resolves once OBS says it streams. */
export async function startStreaming(operator: OBSWebSocket): Promise<void> {
  const started = waitForState(operator, 'OBS_WEBSOCKET_OUTPUT_STARTED');
  await operator.call('StartStream');
  await started;
}

function waitForState(operator: OBSWebSocket, state: string): Promise<void> {
  return new Promise((resolve) => {
    const on = (event: { outputState: string }) => {
      if (event.outputState !== state) return;
      operator.off('StreamStateChanged', on);
      resolve();
    };
    operator.on('StreamStateChanged', on);
  });
}

/** Stop streaming; resolves once OBS says it stopped (the recording is then complete). */
export async function stopStreaming(operator: OBSWebSocket): Promise<void> {
  const stopped = waitForState(operator, 'OBS_WEBSOCKET_OUTPUT_STOPPED');
  await operator.call('StopStream');
  await stopped;
}

/** A TCP relay to a local port that can stop passing bytes, as a network that hangs. */
export interface HangingLink {
  /** `ws://127.0.0.1:PORT` through the relay. */
  url: string;
  /** Stop passing bytes both ways (they wait), until `resume`. */
  hang(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function hangingLink(targetPort: number): Promise<HangingLink> {
  let hung = false;
  const pairs = new Set<[Socket, Socket]>();
  const server: Server = createServer((client) => {
    const upstream = createConnection(targetPort, '127.0.0.1');
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    if (hung) for (const s of pair) s.pause();
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `ws://127.0.0.1:${port}`,
    hang() {
      hung = true;
      for (const pair of pairs) for (const s of pair) s.pause();
    },
    resume() {
      hung = false;
      for (const pair of pairs) for (const s of pair) s.resume();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const pair of pairs) for (const s of pair) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A broadcast on air: nginx-rtmp recording what it receives, OBS streaming to it. */
export interface OnAir {
  rtmp: RtmpReceiver;
  studio: ObsStudio;
  /** Stop streaming: the recording is then complete. */
  stopStreaming(): Promise<void>;
  /** Stop streaming if it still does, then OBS and nginx. */
  close(): Promise<void>;
}

/** Start nginx-rtmp and OBS under `dir`, and OBS streaming; undefined when `obsMissing()`. */
export async function onAir(dir: string): Promise<OnAir | undefined> {
  if (obsMissing()) return undefined;
  const rtmp = await startRtmpReceiver(join(dir, 'nginx'));
  const studio = await startObs(join(dir, 'home'), rtmp.url);
  const operator = await studio.operator();
  await startStreaming(operator);
  let streaming = true;
  const stop = async () => {
    if (!streaming) return;
    streaming = false;
    await stopStreaming(operator);
  };
  return {
    rtmp,
    studio,
    stopStreaming: stop,
    async close() {
      await stop();
      await studio.stop();
      await rtmp.stop();
    },
  };
}
