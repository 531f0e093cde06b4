// HLS playlists read by m3u8-parser (the parser video.js players use), for tests.

import { createRequire } from 'node:module';

export interface ParsedSegment {
  uri: string;
  duration: number;
  programDateTime?: number;
}

export interface ParsedManifest {
  segments: ParsedSegment[];
  targetDuration?: number;
  mediaSequence?: number;
  endList?: boolean;
  playlists?: { uri: string; attributes: Record<string, unknown> }[];
  mediaGroups?: {
    SUBTITLES: Record<
      string,
      Record<string, { uri: string; language?: string; default: boolean; autoselect: boolean }>
    >;
  };
}

const { Parser } = createRequire(import.meta.url)('m3u8-parser') as {
  Parser: new () => { push(text: string): void; end(): void; manifest: ParsedManifest };
};

/** A playlist as m3u8-parser reads it. */
export function parsePlaylist(text: string): ParsedManifest {
  const parser = new Parser();
  parser.push(text);
  parser.end();
  return parser.manifest;
}
