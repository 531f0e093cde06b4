// obsCaptions(): live captions into the stream OBS Studio broadcasts, as CEA-608 closed captions.
// A Writable of transcript events that sends each utterance's words to OBS over obs-websocket v5
// (SendStreamCaption); OBS writes them into its outgoing video as 608 caption data. Lines of at
// most 32 characters (a 608 row), shown roll-up style: each caption is the new line under the
// one before. OBS restarts are reconnected to; captions OBS cannot broadcast are counted.

import type { OBSWebSocketError } from 'obs-websocket-js/json';
import { backoffDelay } from '../client/retry.ts';
import { CEA608_COLUMNS, cea608CharacterSet, isCea608Character } from '../protocol/cea608.ts';
import { InvalidArgumentError } from '../protocol/errors.ts';
import type { CaptionWord } from '../transforms/to-captions.ts';
import {
  CaptionDelivery,
  type CaptionDeliveryStats,
  CaptionOutputError,
  type DeliveryItem,
  type DeliverySink,
  integerOption,
  SPEAKER_CHANGE,
  wordCount,
} from './caption-delivery.ts';

/** Options of {@link obsCaptions}. */
export interface ObsCaptionsOptions {
  /** obs-websocket's address, `ws://host:4455`. */
  url: string;
  /** The obs-websocket server password, when OBS asks for one (never logged). */
  password?: string;
  /** Lines per caption, 1 to 4 (608 roll-up shows 2 to 4). Default 2. */
  rows?: number;
  /**
   * Least time between two captions, in milliseconds. OBS shows each caption at least 2 s before
   * it takes the next from its own queue (which has no bound, and would delay every caption
   * after a burst); sending no faster keeps the waiting here, bounded and counted. Default 2000.
   */
  intervalMs?: number;
  /** Lines that may wait (OBS unreachable, or a burst): past it the oldest are counted `overflow`. Default 300. */
  maxQueuedLines?: number;
  /** Wait for OBS's answer to the connection and to each request. Default 5000 ms. */
  timeoutMs?: number;
  /** Reconnection delays: full jitter from `baseMs` doubling up to `maxMs`. Default 500 ms to 10 s. */
  reconnect?: { baseMs?: number; maxMs?: number };
  /**
   * At the end of the input, how long the lines still queued may wait without one being
   * delivered (OBS gone, or not streaming) before they are counted `unsent`. Default 10 s.
   */
  endTimeoutMs?: number;
}

/** What an OBS caption output has done: the delivery counts, and the connection. */
export interface ObsCaptionStats extends CaptionDeliveryStats {
  /** SendStreamCaption requests OBS accepted. */
  captions: number;
  /** Connected (and identified) to obs-websocket now. */
  connected: boolean;
  /** OBS is streaming, as last heard (`undefined` before the first answer). */
  streaming: boolean | undefined;
  /** Connections made after a lost one. */
  reconnections: number;
  /** Characters a 608 caption cannot show (outside its Latin set), left out. */
  unshownCharacters: number;
}

/**
 * A running OBS caption output: write transcript events into it. Emits `warning`
 * ({@link CaptionOutputError}) when OBS cannot be reached or was lost, is not streaming, or
 * refuses a caption (each said once until things change), and `delivered` (a
 * {@link DeliveryItem}) for each line OBS accepted.
 */
export type ObsCaptions = DeliverySink<ObsCaptionStats>;

/** obs-websocket's close code for a refused password, and for an RPC version it does not speak. */
const AUTHENTICATION_FAILED = 4009;
const UNSUPPORTED_RPC_VERSION = 4010;
/** obs-websocket's request status when the stream output is not running. */
const OUTPUT_NOT_RUNNING = 501;
/** OBS keeps at most this many bytes of a caption's text (4 x 32). */
const OBS_CAPTION_BYTES = 128;

const describe = (err: unknown) => {
  const e = err as { code?: unknown; message?: unknown };
  return `${typeof e.message === 'string' && e.message !== '' ? e.message : 'no reason given'}${e.code === undefined ? '' : ` (${String(e.code)})`}`;
};

/**
 * Text as a 608 caption can show it: a character outside its set becomes its base letter when
 * it has one (ő → o), or is left out (counted).
 */
function cea608Text(text: string): { text: string; unshown: number } {
  let out = '';
  let unshown = 0;
  for (const char of text) {
    if (isCea608Character(char)) out += char;
    else if (/\s/.test(char)) out += ' ';
    else {
      const base = char.normalize('NFD').replace(/\p{M}/gu, '');
      if (base !== '' && [...base].every(isCea608Character)) out += base;
      else unshown++;
    }
  }
  return { text: out, unshown };
}

/**
 * How OBS's caption encoder (libcaption's sei_from_caption_frame) writes a caption of these
 * lines as cc_data: 31 entries a message, each message after the first starting with two Resume
 * Caption Loading; each line a preamble then its characters (basic ones two to an entry, a
 * special one alone and followed by a Resume Caption Loading, an extended one after a space);
 * then End Of Caption, twice. `entries`: how many in all. `splitEnd`: the first End Of Caption
 * is a message's last entry, so the second starts the next message after two Resume Caption
 * Loading: no longer a repetition, it swaps the caption memories again, and viewers see the
 * previous caption for the next 2 s. {@link obsCaptions} never sends such a caption.
 */
export function obsCaptionEncoding(lines: readonly string[]): { entries: number; splitEnd: boolean } {
  let inMessage = 2; // erase non-displayed memory, resume caption loading
  let entries = 2;
  const entry = () => {
    if (inMessage === 31) inMessage = 0;
    if (inMessage === 0) {
      inMessage = 2;
      entries += 2;
    }
    inMessage++;
    entries++;
  };
  for (const line of lines) {
    entry(); // preamble address code
    let pending = false;
    for (const char of line) {
      const set = cea608CharacterSet(char);
      if (set === undefined) continue;
      if (set === 'basic') {
        if (pending) entry();
        pending = !pending;
        continue;
      }
      // The pending basic character (or a space) goes first, then the character itself.
      if (pending || set === 'extended') entry();
      entry();
      if (set === 'special') entry();
      pending = false;
    }
    if (pending) entry();
  }
  // The flush before End Of Caption: a full message is sent, and the next begins.
  if (inMessage === 31) {
    inMessage = 2;
    entries += 2;
  }
  const splitEnd = inMessage === 30;
  entry();
  entry();
  return { entries, splitEnd };
}

/**
 * Words laid out greedily in lines of at most `width` characters (a longer word is cut across
 * lines), each line with the end time of its last word.
 */
function layoutLines(tokens: readonly { text: string; end: number }[], width: number): DeliveryItem[] {
  const lines: DeliveryItem[] = [];
  let line = '';
  let end = 0;
  const push = () => {
    if (line !== '') lines.push({ text: line, words: wordCount(line), end });
  };
  for (const token of tokens) {
    for (let i = 0; i < token.text.length; i += width) {
      const piece = token.text.slice(i, i + width);
      if (line !== '' && line.length + 1 + piece.length <= width) line += ` ${piece}`;
      else {
        push();
        line = piece;
      }
      end = token.end;
    }
  }
  push();
  return lines;
}

/**
 * Connect to OBS (obs-websocket v5 at `url`) and return the caption output. Fails with
 * {@link CaptionOutputError} `ERR_OBS_AUTH` when OBS refuses the password (or asks for one and
 * none was given), `ERR_OBS_PROTOCOL` when the server is not obs-websocket v5. OBS not
 * reachable yet is no failure: the output keeps trying, and says so (`warning`).
 */
export async function obsCaptions(options: ObsCaptionsOptions): Promise<ObsCaptions> {
  const name = 'obsCaptions';
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    throw new InvalidArgumentError(`${name}: url must be ws://host:port, got ${JSON.stringify(options.url)}`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:')
    throw new InvalidArgumentError(`${name}: url must be ws://host:port or wss://, got ${url.protocol}`);
  if (url.username !== '' || url.password !== '')
    throw new InvalidArgumentError(`${name}: give the password as the password option, not in the url`);
  const address = url.href;
  const password = options.password;
  const rows = integerOption(name, 'rows', options.rows, 2, 1, 4);
  const intervalMs = integerOption(name, 'intervalMs', options.intervalMs, 2000, 0);
  const maxQueued = integerOption(name, 'maxQueuedLines', options.maxQueuedLines, 300, 1);
  const timeoutMs = integerOption(name, 'timeoutMs', options.timeoutMs, 5000, 1);
  const endTimeoutMs = integerOption(name, 'endTimeoutMs', options.endTimeoutMs, 10_000, 0);
  const reconnectBase = integerOption(name, 'reconnect.baseMs', options.reconnect?.baseMs, 500, 1);
  const reconnectMax = integerOption(name, 'reconnect.maxMs', options.reconnect?.maxMs, 10_000, 1);

  const delivery = new CaptionDelivery<DeliveryItem>('obs', {
    maxQueued,
    endTimeoutMs,
    saying: {
      overflow: [
        'ERR_CAPTIONS_UNDELIVERED',
        `OBS: more than ${maxQueued} lines waiting; the oldest are dropped (and counted)`,
      ],
      'not-streaming': [
        'ERR_OBS_NOT_STREAMING',
        'OBS is not streaming: captions are not sent, and are counted, until it streams',
      ],
    },
  });
  const { queue } = delivery;
  // Loaded here, not with the package: a program without OBS never loads it (nor ws).
  const { EventSubscription, OBSWebSocket } = await import('obs-websocket-js/json');
  const obs = new OBSWebSocket();
  let connected = false;
  let streaming: boolean | undefined;
  let captions = 0;
  let reconnections = 0;
  let unshown = 0;
  let everConnected = false;
  /** The first connection attempt is over: later failures are the output's to report. */
  let started = false;
  /** Lines of the caption on screen, for the next one to roll up under. */
  let shown: string[] = [];
  /** Lines of the caption sent and not answered yet. */
  let inFlight = 0;
  let nextSendAt = 0;
  let sendTimer: NodeJS.Timeout | undefined;
  let reconnectTimer: NodeJS.Timeout | undefined;
  let reconnectAttempt = 0;
  let connecting: Promise<CaptionOutputError | undefined> | undefined;
  /** The speaker of the last word laid out, to mark a change. */
  let lastSpeaker: string | undefined;
  let sink: ObsCaptions;

  const unreachable = (message: string) =>
    delivery.warn('ERR_OBS_UNREACHABLE', `${message}; retrying (captions wait, up to ${maxQueued} lines)`);

  /**
   * Close the socket at once. obs-websocket-js only closes cleanly, and a hung OBS never answers
   * the close: its next connect() would first wait for that (ws gives up after 30 s).
   */
  const drop = () => (obs as unknown as { socket?: { terminate?: () => void } }).socket?.terminate?.();

  /** Answer of one request, or a failure when the connection drops or OBS does not answer in time. */
  const callWithin = <T>(request: () => Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const onClosed = () =>
        finish(new CaptionOutputError('obs', 'ERR_OBS_UNREACHABLE', 'OBS connection lost'));
      const timer = setTimeout(
        () =>
          finish(
            new CaptionOutputError('obs', 'ERR_OBS_UNREACHABLE', `OBS did not answer in ${timeoutMs} ms`),
          ),
        timeoutMs,
      );
      function finish(err: Error | undefined, value?: T) {
        clearTimeout(timer);
        obs.off('ConnectionClosed', onClosed);
        if (err) reject(err);
        else resolve(value as T);
      }
      obs.once('ConnectionClosed', onClosed);
      request().then(
        (value) => finish(undefined, value),
        (err: Error) => finish(err),
      );
    });

  const connectOnce = async (): Promise<void> => {
    let asked = false;
    const onHello = (hello: { authentication?: unknown }) => {
      asked = hello.authentication !== undefined;
    };
    obs.on('Hello', onHello);
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(() => {
          reject(
            new CaptionOutputError(
              'obs',
              'ERR_OBS_UNREACHABLE',
              `no answer from OBS at ${address} in ${timeoutMs} ms`,
            ),
          );
          drop();
        }, timeoutMs);
        obs
          .connect(address, password, { rpcVersion: 1, eventSubscriptions: EventSubscription.Outputs })
          .then(() => resolve(), reject);
      });
    } catch (err) {
      const code = (err as OBSWebSocketError).code;
      if (code === AUTHENTICATION_FAILED)
        throw new CaptionOutputError(
          'obs',
          'ERR_OBS_AUTH',
          asked && password === undefined
            ? `OBS at ${address} asks for a password (obs-websocket's server password) and none was given`
            : `OBS at ${address} refused the password`,
        );
      if (code === UNSUPPORTED_RPC_VERSION)
        throw new CaptionOutputError(
          'obs',
          'ERR_OBS_PROTOCOL',
          `OBS at ${address} does not speak obs-websocket v5`,
        );
      if (err instanceof CaptionOutputError) throw err;
      throw new CaptionOutputError(
        'obs',
        'ERR_OBS_UNREACHABLE',
        `cannot reach OBS at ${address}: ${describe(err)}`,
      );
    } finally {
      clearTimeout(timer);
      obs.off('Hello', onHello);
    }
    try {
      const status = await callWithin(() => obs.call('GetStreamStatus'));
      streaming = status.outputActive;
    } catch (err) {
      drop();
      if (err instanceof CaptionOutputError) throw err;
      throw new CaptionOutputError(
        'obs',
        'ERR_OBS_PROTOCOL',
        `OBS at ${address} answered GetStreamStatus: ${describe(err)}`,
      );
    }
  };

  const scheduleReconnect = () => {
    if (delivery.closed || reconnectTimer || connecting) return;
    const delay = Math.max(
      100,
      backoffDelay(reconnectAttempt++, { baseMs: reconnectBase, maxMs: reconnectMax }),
    );
    reconnectTimer = setTimeout(() => {
      reconnectTimer = undefined;
      connect();
    }, delay);
  };

  /**
   * One connection attempt: on success the queue moves; on failure another is scheduled, or
   * (a refused password, not obs-websocket v5) the output fails. Resolves with the failure.
   */
  const connect = (): Promise<CaptionOutputError | undefined> => {
    connecting ??= connectOnce().then(
      () => {
        connecting = undefined;
        if (delivery.closed) {
          drop();
          return undefined;
        }
        connected = true;
        if (everConnected) reconnections++;
        everConnected = true;
        reconnectAttempt = 0;
        delivery.forgive('ERR_OBS_UNREACHABLE');
        shown = [];
        move();
        return undefined;
      },
      (err: CaptionOutputError) => {
        connecting = undefined;
        if (delivery.closed) return err;
        if (err.code === 'ERR_OBS_AUTH' || err.code === 'ERR_OBS_PROTOCOL') {
          if (started) sink.destroy(err);
          return err;
        }
        // The first failure is said once someone can listen (obsCaptions has not returned yet).
        if (started) unreachable(err.message);
        else setImmediate(() => unreachable(err.message));
        scheduleReconnect();
        move();
        return err;
      },
    );
    return connecting;
  };

  /** The connection is gone, or OBS stopped answering on it: say so once, and connect again. */
  const lost = (why: string) => {
    if (!connected) return;
    connected = false;
    if (delivery.closed) return;
    unreachable(`lost the connection to OBS at ${address} (${why})`);
    drop();
    scheduleReconnect();
    move();
  };
  // A failed attempt is its own handler's: `connected` is set only once one succeeded.
  obs.on('ConnectionClosed', (err) => lost(describe(err)));

  obs.on('StreamStateChanged', (event) => {
    // Starting and reconnecting change nothing yet; stopping already refuses captions.
    const state = event.outputState;
    if (state === 'OBS_WEBSOCKET_OUTPUT_STARTED' || state === 'OBS_WEBSOCKET_OUTPUT_RECONNECTED') {
      streaming = true;
      delivery.forgive('ERR_OBS_NOT_STREAMING');
    } else if (state === 'OBS_WEBSOCKET_OUTPUT_STOPPING' || state === 'OBS_WEBSOCKET_OUTPUT_STOPPED') {
      streaming = false;
    } else return;
    shown = [];
    move();
  });

  /** The next caption: new lines (at most `rows`) under the lines still on screen, within OBS's bytes. */
  const nextCaption = (): { lines: string[]; fresh: DeliveryItem[] } => {
    const bytes = (lines: string[]) => Buffer.byteLength(lines.join('\n'));
    let fresh = queue.peek(rows);
    while (fresh.length > 1 && bytes(fresh.map((i) => i.text)) > OBS_CAPTION_BYTES)
      fresh = fresh.slice(0, -1);
    const room = rows - fresh.length;
    let context = room > 0 ? shown.slice(-room) : [];
    while (context.length > 0 && bytes([...context, ...fresh.map((i) => i.text)]) > OBS_CAPTION_BYTES)
      context = context.slice(1);
    // A caption OBS would encode with its second End Of Caption in a message of its own would
    // flip back to the previous caption on viewers' screens: fewer lines (one never does).
    const lines = () => [...context, ...fresh.map((i) => i.text)];
    while (obsCaptionEncoding(lines()).splitEnd) {
      if (context.length > 0) context = context.slice(1);
      else fresh = fresh.slice(0, -1);
    }
    return { lines: lines(), fresh };
  };

  const send = () => {
    const { lines, fresh } = nextCaption();
    queue.take(fresh.length);
    inFlight = fresh.length;
    callWithin(() => obs.call('SendStreamCaption', { captionText: lines.join('\n') })).then(
      () => {
        inFlight = 0;
        captions++;
        shown = lines;
        nextSendAt = Date.now() + intervalMs;
        delivery.forgive('ERR_OBS_REFUSED');
        delivery.deliver(fresh);
        move();
      },
      (err: unknown) => {
        inFlight = 0;
        const code = (err as { code?: unknown }).code;
        if (delivery.closed) {
          delivery.lose(fresh, 'unsent');
        } else if (code === OUTPUT_NOT_RUNNING) {
          streaming = false;
          delivery.lose(fresh, 'not-streaming');
        } else if (typeof code === 'number' && code >= 100) {
          // OBS answered, and refused this caption: sending it again would be refused again.
          delivery.lose(fresh, 'refused');
          delivery.warn('ERR_OBS_REFUSED', `OBS refused a caption: ${describe(err)}`);
          delivery.progress();
        } else {
          // The connection went, or OBS hung: the lines go again once OBS is back.
          delivery.lose(queue.unshift(fresh), 'overflow');
          lost(describe(err));
        }
        move();
      },
    );
  };

  /** Send when connected, streaming and due; what cannot go (OBS not streaming) is counted. */
  function move(): void {
    if (delivery.closed || inFlight > 0) return;
    if (connected && streaming === false) delivery.lose(queue.take(queue.length), 'not-streaming');
    if (queue.length === 0) {
      delivery.idle();
      return;
    }
    if (!connected || streaming !== true || sendTimer) return;
    const wait = nextSendAt - Date.now();
    if (wait > 0) {
      sendTimer = setTimeout(() => {
        sendTimer = undefined;
        move();
      }, wait);
      return;
    }
    send();
  }

  /** A committed utterance as 608 lines: Latin text only, speaker changes marked, 32 columns. */
  const linesOf = (words: readonly CaptionWord[]): DeliveryItem[] => {
    const tokens: { text: string; end: number }[] = [];
    for (const w of words) {
      const speaker = w.speaker ?? null;
      if (speaker !== null) {
        if (lastSpeaker !== undefined && speaker !== lastSpeaker)
          tokens.push({ text: SPEAKER_CHANGE, end: w.end_time });
        lastSpeaker = speaker;
      }
      const shownText = cea608Text(String(w.word));
      unshown += shownText.unshown;
      for (const text of shownText.text.split(' ')) if (text !== '') tokens.push({ text, end: w.end_time });
    }
    if (unshown > 0)
      delivery.warn(
        'ERR_OBS_UNSHOWN_CHARACTERS',
        'OBS: CEA-608 shows Latin script only; characters outside it are left out of the captions (counted)',
      );
    return layoutLines(tokens, CEA608_COLUMNS);
  };

  sink = delivery.writable(
    name,
    {
      itemsOf: linesOf,
      move,
      inFlight: () => inFlight,
      release: async () => {
        clearTimeout(sendTimer);
        clearTimeout(reconnectTimer);
        sendTimer = undefined;
        reconnectTimer = undefined;
        connected = false;
        // A clean close if OBS answers it soon; cut otherwise (and a connection on its way with it).
        let closeTimer: NodeJS.Timeout | undefined;
        await Promise.race([
          obs.disconnect().catch(() => {}),
          new Promise((resolve) => {
            closeTimer = setTimeout(resolve, 1000);
          }),
        ]);
        clearTimeout(closeTimer);
        drop();
        await connecting;
        drop();
      },
    },
    () => ({
      ...delivery.stats(),
      captions,
      connected,
      streaming,
      reconnections,
      unshownCharacters: unshown,
    }),
  );

  const failure = await connect();
  started = true;
  if (failure?.code === 'ERR_OBS_AUTH' || failure?.code === 'ERR_OBS_PROTOCOL') {
    await delivery.stop();
    throw failure;
  }
  return sink;
}
