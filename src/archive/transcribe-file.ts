// One input of an archive, transcribed in one of three modes: live (decode → toFrames →
// sttStream → assembleTranscript, diarization alongside), batch (a job, recorded the moment the
// service accepts it, waited for), or fast (every record of the file).

import { PassThrough, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { BatchResultLostError } from '../client/batch.ts';
import type { SpeechClient } from '../client/index.ts';
import { SpeechpipeError, SpeechServiceError } from '../protocol/errors.ts';
import type { JobV2 } from '../protocol/jobs.ts';
import { LIVE_BYTES_PER_SECOND } from '../protocol/socket-events.ts';
import { type AudioFile, fromFile } from '../sources/files.ts';
import { alignSpeakers, type SpeakerWord } from '../transforms/align-speakers.ts';
import {
  assembleTranscript,
  type FinalEvent,
  type TranscriptEvent,
} from '../transforms/assemble-transcript.ts';
import { decode } from '../transforms/decode.ts';
import { diarizationStream, sttStream } from '../transforms/live-stream.ts';
import {
  type DiarizationEvent,
  mergeDiarization,
  type SpeakerSegment,
} from '../transforms/merge-diarization.ts';
import { tee } from '../transforms/tee.ts';
import { toFrames } from '../transforms/to-frames.ts';
import type { ArchiveSettings } from './settings.ts';

/** One input's transcript. */
export interface FileResult {
  words: SpeakerWord[];
  transcript: string;
  audioSeconds?: number;
  /** The batch job that made it (batch mode). */
  jobId?: string;
  /** Input the decoder skipped (ffmpeg's words): recorded, since the output stands without it. */
  warnings?: Array<{ code: string; message: string }>;
}

/**
 * Options of {@link transcribeFile}: the settings, the client, and what batch and live modes report.
 */
export interface TranscribeFileOptions extends ArchiveSettings {
  /** The client that transcribes. */
  client: SpeechClient;
  /** Aborts the transcription. */
  signal?: AbortSignal;
  /** Batch: stop waiting for a job after this long. Default 4 h. */
  jobTimeoutMs?: number;
  /** Batch: the job an earlier run submitted for this input, waited for instead of submitting. */
  pendingJob?: string;
  /** Batch: the service accepted the job (recorded before it is waited for). */
  onSubmitted?: (jobId: string) => Promise<void>;
  /**
   * Batch: set to the job that holds the input's work while it is waited for, so a failure can
   * be recorded with it and a later resume waits for that job again.
   */
  job?: { id?: string };
  /** Live: how long a failing session is restarted before the input fails. Default 60 s. */
  restartWithinMs?: number;
  /** Live: audio seconds sent so far (at most once a second). */
  onProgress?: (audioSeconds: number) => void;
}

/**
 * Transcribe one input in `options.mode`: live (decode, 16 kHz frames to realtime ASR, with
 * diarization alongside when `speakers`), batch (a job submitted, or `pendingJob`, waited for) or
 * fast. Rejects with what failed it (a speechpipe error, or the signal's reason).
 */
export function transcribeFile(file: AudioFile, options: TranscribeFileOptions): Promise<FileResult> {
  if (options.mode === 'batch') return transcribeBatch(file, options);
  if (options.mode === 'fast') return transcribeFast(file, options);
  return transcribeLive(file, options);
}

/**
 * Waits for every one of `work` to settle, then rejects with the first failure, if any. A
 * failure reaches the other pipelines (through the tee, or the abort), and each must have let go
 * of what it holds before the input ends: the decoder closes only after its ffmpeg child exited,
 * later than a live stream fails, and Promise.all would reject while that child still ran.
 */
async function allSettled(work: ReadonlyArray<Promise<unknown> | undefined>): Promise<void> {
  let failure: { error: unknown } | undefined;
  await Promise.all(
    work.map((p) =>
      p?.catch((error: unknown) => {
        failure ??= { error };
      }),
    ),
  );
  if (failure !== undefined) throw failure.error;
}

function collect<T>(into: T[]): Writable {
  return new Writable({
    objectMode: true,
    write(chunk: T, _encoding, callback) {
      into.push(chunk);
      callback();
    },
  });
}

async function transcribeLive(file: AudioFile, options: TranscribeFileOptions): Promise<FileResult> {
  const { client, signal } = options;
  const events: TranscriptEvent[] = [];
  const diarization: DiarizationEvent[] = [];
  const warnings: Array<{ code: string; message: string }> = [];
  const decoder = decode(signal ? { signal } : {});
  decoder.on('warning', (w: SpeechpipeError) => warnings.push({ code: w.code, message: w.message }));
  let audioBytes = 0;
  // The first audio is reported at once, then at most once a second.
  let reported = Number.NEGATIVE_INFINITY;
  const counted = new PassThrough();
  counted.on('data', (chunk: Buffer) => {
    audioBytes += chunk.length;
    const now = performance.now();
    if (options.onProgress && now - reported >= 1000) {
      reported = now;
      options.onProgress(audioBytes / LIVE_BYTES_PER_SECOND);
    }
  });
  const opts = signal ? { signal } : {};
  const restart = options.restartWithinMs === undefined ? {} : { restartWithinMs: options.restartWithinMs };
  // The decoded audio feeds both streams; the slower one sets the pace.
  const split = tee(options.speakers ? 2 : 1);
  const [forAsr, forSpeakers] = split.branches;
  await allSettled([
    pipeline(fromFile(file.path), decoder, counted, split.input, opts),
    pipeline(
      forAsr!,
      toFrames({ language: options.language }),
      sttStream({ client, ...restart }),
      assembleTranscript(),
      collect(events),
      opts,
    ),
    forSpeakers
      ? pipeline(
          forSpeakers,
          toFrames({ language: options.language }),
          diarizationStream({ client, ...restart }),
          mergeDiarization(),
          collect(diarization),
          opts,
        )
      : undefined,
  ]);
  const final = events.findLast((e): e is FinalEvent => e.type === 'final');
  if (!final)
    throw new SpeechpipeError('ERR_INCOMPLETE_STREAM', 'the transcript ended without its final event');
  const timeline = diarization.findLast((e) => e.type === 'timeline') as
    | { segments: SpeakerSegment[] }
    | undefined;
  return {
    words: alignSpeakers(final.words, timeline?.segments ?? [], {}),
    transcript: final.text,
    audioSeconds: audioBytes / LIVE_BYTES_PER_SECOND,
    ...(warnings.length > 0 ? { warnings } : {}),
  };
}

async function transcribeBatch(file: AudioFile, options: TranscribeFileOptions): Promise<FileResult> {
  const { client, signal } = options;
  const ref = options.job ?? {};
  const wait = (id: string) => {
    ref.id = id;
    // A job can be done within a fraction of a second: the first look comes soon, and the pause
    // grows to 5 s (a poll is a small GET; a slot waits on the answer).
    return client.batch.wait(id, {
      signal,
      timeoutMs: options.jobTimeoutMs ?? 4 * 3600_000,
      initialIntervalMs: 100,
      factor: 1.5,
      maxIntervalMs: 5_000,
    });
  };
  let job: JobV2 | undefined;
  if (options.pendingJob !== undefined) {
    try {
      job = await wait(options.pendingJob);
    } catch (err) {
      // The earlier job is gone, or its result was lost: submit again.
      const gone =
        (err instanceof SpeechServiceError && err.code === 'TRANSCRIPTION_JOB_NOT_FOUND') ||
        err instanceof BatchResultLostError;
      if (!gone) throw err;
    }
    if (job?.status === 'cleared') job = undefined;
  }
  if (job === undefined) {
    ref.id = undefined;
    const ack = await client.batch.submit(file.path, {
      language: options.language,
      diarization: options.speakers,
      signal,
    });
    ref.id = ack.jobId;
    await options.onSubmitted?.(ack.jobId);
    job = await wait(ack.jobId);
  }
  if (job.status !== 'done')
    throw new SpeechpipeError('ERR_JOB_NOT_DONE', `batch job ${ref.id} ended ${job.status}`);
  return {
    words: alignSpeakers(job.final_word_segments, job.diarization_segments, { mode: 'v1' }),
    transcript: job.final_result,
    audioSeconds: job.audio_duration,
    jobId: ref.id!,
  };
}

async function transcribeFast(file: AudioFile, options: TranscribeFileOptions): Promise<FileResult> {
  const final = await options.client.fast.transcribeFinal(file.path, {
    language: options.language,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return {
    words: final.words.map((w) => ({ ...w, speaker: null })),
    transcript: final.transcription,
  };
}
