// An input's duration from its header, without decoding it (music-metadata reads the
// container's header and index; an MP3 without one is estimated from its bitrate).

/** Seconds of audio `path` holds, or undefined when its header does not say. */
export async function probeDuration(path: string): Promise<number | undefined> {
  try {
    const { parseFile } = await import('music-metadata');
    const meta = await parseFile(path, { duration: false, skipCovers: true, skipPostHeaders: true });
    const seconds = meta.format.duration;
    return seconds !== undefined && Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
  } catch {
    return undefined;
  }
}
