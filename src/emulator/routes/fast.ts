// Fast transcription: POST /http/stt (query id, language/lang, asr/model; one `file` part)
// answered with NDJSON fast records, one per speech region, the last with `is_final: true`.

import { isLanguage, type Language } from '../../protocol/languages.ts';
import type { FastRecord } from '../../protocol/records.ts';
import { isUuid } from '../../protocol/uuid.ts';
import type { EmulatorContext } from '../context.ts';
import { type AnalyzedAudio, fastSegments } from '../engine/recording.ts';
import type { HttpExchange } from '../http-exchange.ts';
import { answeredAfterEffect, throwIfFailing } from '../http-operation.ts';
import { reject } from '../rejection.ts';
import type { EmulatorKey } from '../types.ts';
import { checkUploadHeaders, receiveUpload, uploadRules } from '../upload.ts';

const nonEmpty = (v: string | null | undefined): string | undefined =>
  v === null || v === '' ? undefined : v;

/** Check the request id and language of a fast transcription (HTTP query or Socket.IO payload). */
export function checkFastRequest(id: unknown, language: unknown): { id: string; language: Language } {
  if (id === undefined || id === null || id === '')
    throw reject('VALIDATION_REQUIRED_FIELD', '`id` is required');
  if (!isUuid(id)) throw reject('VALIDATION_INVALID_UUID', '`id` is not a UUID');
  const lang = language === undefined || language === null || language === '' ? 'auto' : language;
  if (!isLanguage(lang)) {
    throw reject(
      'VALIDATION_INVALID_LANGUAGE',
      `unknown language ${JSON.stringify(lang)}; use en, ar, codeswitch or auto`,
    );
  }
  return { id: id.toLowerCase(), language: lang };
}

/**
 * The fast records of an analysed recording; the last carries `is_final: true`. Recognized
 * words once the recognizer has decoded them, when it kept the audio (`signal` drops that work).
 */
export async function fastRecords(
  ctx: EmulatorContext,
  id: string,
  language: Language,
  audio: AnalyzedAudio,
  signal: AbortSignal,
): Promise<FastRecord[]> {
  const recognized = await ctx.recordingWords(audio, 'fast', signal);
  const parts = fastSegments(audio, language, ctx.fileTranscript(audio), recognized);
  return parts.map((words, i) => ({
    id,
    seq: i,
    transcription: words.map((w) => w.word).join(' '),
    words,
    is_final: i === parts.length - 1,
  }));
}

export async function fastHttp(ex: HttpExchange, key: EmulatorKey): Promise<void> {
  const { ctx } = ex;
  const q = ex.url.searchParams;
  const rawId = q.get('id');
  if (isUuid(rawId)) ex.clientId = rawId;
  const { id, language } = checkFastRequest(rawId, nonEmpty(q.get('language')) ?? nonEmpty(q.get('lang')));
  ctx.asrModel(language, nonEmpty(q.get('asr')) ?? nonEmpty(q.get('model')));
  const rules = uploadRules(ctx.limits, 'fast');
  const headers = checkUploadHeaders(ex, rules);
  const release = ex.admit(() => ctx.concurrency.acquire(key.account, 'fast'));
  let audio: AnalyzedAudio | undefined;
  try {
    audio = await receiveUpload(ex, rules, headers, ctx.recognizes(language));
    await ctx.lifecycle.sleep(ctx.perRequestMs + ctx.audioDelayMs(audio.durationSec), ex.signal);
    throwIfFailing(ex);
    if (await answeredAfterEffect(ex)) return;
    let records = await fastRecords(ctx, id, language, audio, ex.signal);
    if (ctx.faults.dropFinal({ op: ex.op, key: ex.keyHeader })) records = records.filter((r) => !r.is_final);
    await ex.finishRecords(records);
  } finally {
    audio?.recording?.release();
    release();
  }
}
