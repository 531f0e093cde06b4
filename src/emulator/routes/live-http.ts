// Framed live streams over HTTP: POST /http/stt-stream (alias /http/realtime-asr) and
// POST /http/diarization-stream, one live frame per POST, NDJSON records on the response.
// POSTs of one ASR stream are answered in arrival order; diarization allows one at a time,
// counted from the moment a POST's frame header names the stream.

import { decodeFrame } from '../../protocol/frame.ts';
import { bytesToUuid, isZeroUuid } from '../../protocol/uuid.ts';
import { NOTHING, type Release } from '../admission.ts';
import type { HttpExchange } from '../http-exchange.ts';
import { answerFailure, answerFault } from '../http-operation.ts';
import { Rejection } from '../rejection.ts';
import {
  type Released,
  type ServerSession,
  type ServerSessions,
  type SessionKind,
  type SessionRecord,
  type SessionScope,
  sessionScope,
} from '../sessions.ts';
import type { EmulatorKey } from '../types.ts';

/**
 * HTTP streams live in their account's namespace: another account's key cannot feed or read a
 * stream it does not own (its frames name an id that, for it, was never started).
 */
const httpScope = (key: EmulatorKey): SessionScope => {
  let scope = HTTP_SCOPES.get(key.account);
  if (!scope) {
    scope = sessionScope('http', `account:${key.account}`);
    HTTP_SCOPES.set(key.account, scope);
  }
  return scope;
};
/** One scope object per account, made once: every live frame needs its account's. */
const HTTP_SCOPES = new Map<string, SessionScope>();

/**
 * A live frame: read its body, then answer it, in the body's callback and with no promise made
 * when its records are out at once (every frame without a latency model or faults). Failures
 * are answered here (`answerFailure`), not returned.
 */
export function liveHttp(
  ex: HttpExchange,
  key: EmulatorKey,
  kind: SessionKind,
  sessions: ServerSessions,
): undefined {
  const { limits } = ex.ctx;
  const scope = httpScope(key);
  let post: Release = NOTHING;
  /** The stream the frame names, once its first 16 bytes have arrived (read only if it fails). */
  let streamHead: Buffer | undefined;
  const head = {
    bytes: 16,
    seen: (bytes: Buffer) => {
      if (!isZeroUuid(bytes)) streamHead = bytes;
      // Diarization: one POST in flight per stream, from the moment the header names it.
      if (kind === 'diarization') post = sessions.claimDiarizationPost(bytes, scope);
    },
  };
  const failed = (err: unknown) => {
    post();
    void answerFailure(ex, err);
  };
  const onBody = (err: unknown, body?: Buffer) => {
    if (!body) {
      // The client went away while its frame was arriving: that aborted POST cancels the stream.
      if (!(err instanceof Rejection) && streamHead !== undefined) {
        const live = sessions.find(kind, bytesToUuid(streamHead), scope);
        if (live) sessions.end(live, 'cancelled');
      }
      failed(err);
      return;
    }
    let answering: Promise<void> | undefined;
    try {
      answering = answerBody(ex, key, scope, kind, sessions, body);
    } catch (err) {
      failed(err);
      return;
    }
    if (answering) answering.then(post, failed);
    else post();
  };
  const [limit, bound] =
    kind === 'stt'
      ? [limits.realtimeAsrFrameBytes, 'realtime_asr_frame_bytes']
      : [limits.realtimeDiarizationFrameBytes, 'realtime_diarization_frame_bytes'];
  ex.readBodyThen(limit, bound, 'the frame body', head, onBody);
  return undefined;
}

/** Decode the frame and answer it in its stream's turn (POSTs of a stream in arrival order). */
function answerBody(
  ex: HttpExchange,
  key: EmulatorKey,
  scope: SessionScope,
  kind: SessionKind,
  sessions: ServerSessions,
  body: Buffer,
): Promise<void> | undefined {
  const frame = decodeFrame(body);
  const existing = frame.isStart ? undefined : sessions.find(kind, frame.streamId, scope);
  if (!existing) return answerFrame(ex, key, scope, kind, sessions, frame);
  sessions.beginPost(existing);
  let answering: Promise<void> | undefined;
  try {
    answering = existing.inTurn(() => {
      // A stream the recognizer is behind on is answered late: its frame waits to be taken.
      const behind = existing.backlogWait();
      const answer = () => answerFrame(ex, key, scope, kind, sessions, frame);
      return behind ? behind.then(answer) : answer();
    });
  } finally {
    if (!answering) sessions.endPost(existing);
  }
  return answering?.finally(() => sessions.endPost(existing));
}

/**
 * Accept the frame and answer it: at once when its records are out at once (every live frame
 * without a latency model or faults; no promise is made), else the promise of the answer.
 */
function answerFrame(
  ex: HttpExchange,
  key: EmulatorKey,
  scope: SessionScope,
  kind: SessionKind,
  sessions: ServerSessions,
  frame: ReturnType<typeof decodeFrame>,
): Promise<void> | undefined {
  if (ex.gone) {
    // The client gave up while its POST waited for its turn: that aborted POST cancels the stream.
    const waiting = sessions.find(kind, frame.streamId, scope);
    if (waiting) sessions.end(waiting, 'cancelled');
    return;
  }
  const { session, records, after } = sessions.acceptFrame(
    frame,
    kind,
    scope,
    key,
    (acquire) => ex.admit(acquire),
    ex.op,
    ex.plan,
  );
  // The frame was accepted; its records are lost with this answer.
  if (after) return answerFault(ex, after);
  if (Array.isArray(records) && !frame.isFinal) {
    // The records are out at once: answered now, with no window to wait through. An answer
    // that could not be completed (the client went away, a reset fault) cancels the stream.
    const out = session.pending.length > 0 ? [...session.pending.splice(0), ...records] : records;
    const done = ex.finishRecords(out);
    if (done === true) return undefined;
    if (done === false) {
      sessions.end(session, 'cancelled');
      return undefined;
    }
    sessions.beginPost(session);
    return done
      .then((ok) => {
        if (!ok) sessions.end(session, 'cancelled');
      })
      .finally(() => sessions.endPost(session));
  }
  return answerLater(ex, session, sessions, frame, records);
}

/** A frame whose records come later (a latency model) or the final frame: its answer waits for them. */
async function answerLater(
  ex: HttpExchange,
  session: ServerSession,
  sessions: ServerSessions,
  frame: ReturnType<typeof decodeFrame>,
  records: Released,
): Promise<void> {
  sessions.beginPost(session);
  const ready = Promise.resolve(records);
  // An aborted POST (the client went away before its answer was complete) cancels the stream.
  const onAbort = () => sessions.end(session, 'cancelled');
  ex.signal.addEventListener('abort', onAbort, { once: true });
  try {
    if (frame.isFinal) await answerFinal(ex, session, sessions, ready);
    else if (!(await answerWithinWindow(ex, session, ready))) sessions.end(session, 'cancelled');
  } finally {
    ex.signal.removeEventListener('abort', onAbort);
    sessions.endPost(session);
  }
}

/**
 * A non-final frame: records released within the window go on this answer, later ones wait.
 * False when the answer could not be completed (the client went away, a reset or truncation).
 */
async function answerWithinWindow(
  ex: HttpExchange,
  session: ServerSession,
  ready: Promise<SessionRecord[]>,
): Promise<boolean> {
  const { ctx } = ex;
  const result = await ctx.lifecycle
    .within(ready, ctx.limits.nonFinalResponseWindowMs, ex.signal)
    .catch(() => 'stopped' as const);
  const out: SessionRecord[] = session.pending.splice(0);
  if (typeof result === 'object') out.push(...result.value);
  else
    void ready.then(
      (late) => session.pending.push(...late),
      () => {},
    );
  return ex.finishRecords(out);
}

/** The final frame: every record up to the final one, then the stream is finished. */
async function answerFinal(
  ex: HttpExchange,
  session: ServerSession,
  sessions: ServerSessions,
  ready: Promise<SessionRecord[]>,
): Promise<void> {
  const { ctx } = ex;
  const result = await ctx.lifecycle
    .within(ready, ctx.limits.sessionExpirySec * 1000, ex.signal)
    .catch(() => 'stopped' as const);
  if (typeof result !== 'object') {
    // The final answer timed out: the stream is cancelled and the answer ends without a final record.
    sessions.end(session, 'cancelled');
    await ex.finishRecords(session.pending.splice(0));
    return;
  }
  let out = [...session.pending.splice(0), ...result.value];
  if (ctx.faults.dropFinal({ op: ex.op, key: ex.keyHeader })) {
    // The answer ends without its final record: for the service the stream is lost.
    out = out.filter((record) => !record.is_final);
    sessions.end(session, 'cancelled');
  }
  // An answer that could not be completed (the client went away, a reset fault) cancels it.
  sessions.end(session, (await ex.finishRecords(out)) ? 'finished' : 'cancelled');
}
