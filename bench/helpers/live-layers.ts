// The layers bench/live-cpu-layers.ts measures one at a time, each a step above the last: the
// bare socket.io-client loop, speechpipe's SocketTransport, its SocketLiveChannel, a LiveSession
// on that channel alone (no admission, no start deadline), a LiveSession of a client, sttStream.
// Shared with bench/live-cpu.ts, which runs them as contenders (--layers) and refuses any other
// name.

export const LIVE_LAYERS = ['bare', 'transport', 'channel', 'session-core', 'session', 'stream'] as const;
export type LiveLayer = (typeof LIVE_LAYERS)[number];

export function isLiveLayer(name: string | undefined): name is LiveLayer {
  return (LIVE_LAYERS as readonly string[]).includes(name ?? '');
}
