// TTS over HTTP: POST /http/tts, a JSON body answered with the service-frame stream
// ([request UUID][final flag][PCM16LE 16 kHz]...), a final frame always last.

import { HTTP_TTS_SAMPLE_RATE } from '../../protocol/socket-events.ts';
import { encodeTtsFrame } from '../../protocol/tts-frames.ts';
import { checkTtsRequestBytes } from '../../protocol/tts-request.ts';
import { isUuid } from '../../protocol/uuid.ts';
import type { HttpExchange } from '../http-exchange.ts';
import { answeredAfterEffect } from '../http-operation.ts';
import { admitTts, beginSpeech, sendSpeech } from '../tts-service.ts';
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
    const chunks = await beginSpeech(ctx, admitted, {
      op: ex.op,
      plan: ex.plan,
      sampleRate: HTTP_TTS_SAMPLE_RATE,
      signal: ex.signal,
      gone: () => ex.gone,
    });
    if (await answeredAfterEffect(ex)) {
      await chunks.return(undefined);
      return;
    }
    ex.startStream('application/octet-stream');
    const { id, text } = admitted.body;
    await sendSpeech(chunks, text, HTTP_TTS_SAMPLE_RATE, ex.plan.truncateTts, (pcm, final) =>
      ex.write(encodeTtsFrame(id, final, pcm), 'audio'),
    );
    ex.end();
  } finally {
    admitted.release();
  }
}
