// speechpipe: composable Node streams for the speech service.

export * from './protocol/index.ts';
export { type DemuxTtsOptions, demuxTts } from './transforms/demux-tts.ts';
export { type ParseNdjsonOptions, parseNdjson } from './transforms/parse-ndjson.ts';
