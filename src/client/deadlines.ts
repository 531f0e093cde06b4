// The longest each operation may take by default: one bound on its attempts, the pauses
// between them and every wait inside them together (`deadlineMs` of each call, or the client's
// `deadlines`). Past it the operation fails with `DeadlineExceededError`.

/** Overall deadlines by operation, in milliseconds (`ClientOptions.deadlines`). */
export interface OperationDeadlines {
  /** `batch.submit()`: uploads of up to 512 MiB, then the service validates them. Default 30 min. */
  batchSubmit: number;
  /** `batch.get()` and `getLegacy()`: one read and its retries. Default 2 min. */
  batchGet: number;
  /** `batch.wait()`: polling until the job is terminal (`timeoutMs` there). Default 4 h. */
  batchWait: number;
  /** `fast.transcribe()`: the upload and every record up to the final one. Default 10 min. */
  fast: number;
  /** `tts.synthesize()`: until the audio begins (the service's own deadline is 25 s). Default 60 s. */
  ttsStart: number;
  /** `tts.synthesizeToBuffer()`: the whole audio, syntheses cut short spoken again. Default 3 min. */
  ttsBuffer: number;
  /** `tts.listVoices()`. Default 30 s. */
  voices: number;
  /**
   * A live session's opening: admission refusals waited out and its first frame's attempts
   * (`startDeadlineMs` of a session). Default 2 min.
   */
  liveStart: number;
}

/** The deadlines used where neither a call nor `ClientOptions.deadlines` gives one. */
export const DEFAULT_DEADLINES: Readonly<OperationDeadlines> = Object.freeze({
  batchSubmit: 30 * 60_000,
  batchGet: 2 * 60_000,
  batchWait: 4 * 60 * 60_000,
  fast: 10 * 60_000,
  ttsStart: 60_000,
  ttsBuffer: 3 * 60_000,
  voices: 30_000,
  liveStart: 2 * 60_000,
});
