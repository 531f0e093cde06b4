// Archive transcription as a library: composable streams and one call that runs the job.

export type { BreakerOptions } from './breaker.ts';
// cluster/ loads bullmq, ioredis and prom-client only when its functions run.
export {
  type ArchiveJobData,
  type ArchiveJobResult,
  type ArchiveWorker,
  type ArchiveWorkerOptions,
  archiveJobId,
  type ClusterConnectionOptions,
  DEFAULT_QUEUE_NAME,
  type EnqueueArchiveOptions,
  type EnqueuedArchive,
  enqueueArchive,
  startArchiveWorker,
  type WorkerEvent,
} from './cluster/index.ts';
export { probeDuration } from './durations.ts';
export type { ArchiveEvent, ArchiveSummary, Reason } from './events.ts';
export { isAuthFailure, isConnectionFailure } from './failures.ts';
export {
  ARCHIVE_FORMATS,
  type ArchiveFormat,
  type ArchiveMode,
  type ArchiveRunOptions,
  type ArchiveSettings,
  type ArchiveWalkOptions,
} from './settings.ts';
export {
  type ArchivePlan,
  ArchiveStore,
  type ArchiveStoreOptions,
  openArchiveStore,
  removeTemporaryFiles,
  renderResult,
} from './store.ts';
export { tcpProbe } from './tcp-probe.ts';
export { type TranscribeArchiveOptions, transcribeArchive, walkArchive } from './transcribe-archive.ts';
export { planConcurrency, type TranscribeEachOptions, transcribeEach } from './transcribe-each.ts';
export { type FileResult, type TranscribeFileOptions, transcribeFile } from './transcribe-file.ts';
export {
  type TranscriptsSink,
  type WriteTranscriptsEvents,
  type WriteTranscriptsOptions,
  writeTranscripts,
} from './write-transcripts.ts';
