// TTS over HTTP: POST /http/tts, a JSON body answered with the service-frame stream
// ([request UUID][final flag][PCM16LE 16 kHz]...), a final frame always last.

import { HTTP_TTS_SAMPLE_RATE } from '../../protocol/socket-events.ts';
import { encodeTtsFrame } from '../../protocol/tts-frames.ts';
import { checkTtsRequestBytes, countCodePoints } from '../../protocol/tts-request.ts';
import { isUuid } from '../../protocol/uuid.ts';
import type { HttpExchange } from '../http-exchange.ts';
import { answeredAfterEffect, throwIfFailing } from '../http-operation.ts';
import { Rejection } from '../rejection.ts';
import { admitTts, PieceCutter, startSynthesis } from '../tts-service.ts';
import type { EmulatorKey } from '../types.ts';

/** The body's `id` when it is a UUID (for `job_id` on the error body of a refused request). */
function requestIdOf(raw: Buffer): string | undefined {
  try {
    const id: unknown = (JSON.parse(raw.toString('utf8')) as { id?: unknown } | null)?.id;
    return isUuid(id) ? id : undefined;
  } catch {
    return undefined;
  }
}

export async function ttsHttp(ex: HttpExchange, key: EmulatorKey): Promise<void> {
  const { ctx } = ex;
  const raw = await ex.readBody(ctx.limits.ttsRequestBytes, undefined, 'the request body');
  const check = checkTtsRequestBytes(raw, { tier: key.tier, limits: ctx.limits });
  ex.clientId = check.ok ? check.body.id : requestIdOf(raw);
  const admitted = admitTts(ctx, check, key, (acquire) => ex.admit(acquire));
  try {
    throwIfFailing(ex);
    const { body, voice } = admitted;
    ctx.stats.ttsSyntheses++;
    let chunks: AsyncGenerator<Buffer>;
    try {
      chunks = await startSynthesis(ctx, body.text, voice, HTTP_TTS_SAMPLE_RATE, ex.signal);
    } catch (err) {
      if (err instanceof Rejection || ex.gone) throw err;
      throw new Rejection('TTS_SYNTHESIS_FAILED', { detail: `synthesis failed: ${(err as Error).message}` });
    }
    if (await answeredAfterEffect(ex)) {
      await chunks.return(undefined);
      return;
    }
    const truncate = ex.plan.truncateTts;
    let written = 0;
    const write = async (final: boolean, pcm: Buffer): Promise<boolean> => {
      let frame = encodeTtsFrame(body.id, final, pcm);
      if (truncate?.afterBytes !== undefined && written + frame.length >= truncate.afterBytes) {
        frame = frame.subarray(0, Math.max(0, truncate.afterBytes - written));
        await ex.write(frame);
        return false;
      }
      written += frame.length;
      return ex.write(frame);
    };
    ex.startStream('application/octet-stream');
    const cutter = new PieceCutter(HTTP_TTS_SAMPLE_RATE);
    try {
      for await (const pcm of chunks) {
        for (const piece of cutter.push(pcm)) {
          if (!(await write(false, piece))) {
            ex.end();
            return;
          }
        }
      }
    } catch {
      // A failure after output began ends the body without its final frame (no error appended).
      if (!ex.gone) ex.end();
      return;
    }
    const rest = cutter.flush();
    // Some bodies end with PCM in the final frame, others with an empty final frame.
    const finalCarriesPcm = countCodePoints(body.text) % 2 === 0;
    if (rest.length > 0 && !finalCarriesPcm && !(await write(false, rest))) {
      ex.end();
      return;
    }
    if (truncate === undefined) await write(true, finalCarriesPcm ? rest : Buffer.alloc(0));
    ex.end();
  } finally {
    admitted.release();
  }
}
