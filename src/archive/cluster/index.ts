// Cluster mode: an archive's inputs as BullMQ jobs on Redis, transcribed by any number of
// worker processes. The enqueuer decides result names (as a local run would), adds one job per
// input with a deterministic id, and follows the run, writing the manifest alone; workers write
// result files. Account limits hold across workers: the queue's global concurrency bounds the
// operations in flight, a 429 rate-limits the whole queue for its Retry-After, and a batch job
// id is stored in the queue job the moment the service accepts it, so a worker that takes over
// a dead worker's job waits for that job instead of submitting again.
//
// bullmq, ioredis and prom-client are imported when used: `import 'speechpipe'` loads none.

export { type ClusterConnectionOptions, DEFAULT_QUEUE_NAME } from './connection.ts';
export { type EnqueueArchiveOptions, type EnqueuedArchive, enqueueArchive } from './enqueue.ts';
export { type ArchiveJobData, type ArchiveJobResult, archiveJobId } from './queue-jobs.ts';
export {
  type ArchiveWorker,
  type ArchiveWorkerOptions,
  startArchiveWorker,
  type WorkerEvent,
} from './worker.ts';
