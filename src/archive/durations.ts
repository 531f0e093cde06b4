// An input's duration from its header, without decoding it (music-metadata reads the
// container's header and index; an MP3 without one is estimated from its bitrate).

import type { AudioFile } from '../sources/files.ts';
import type { ArchiveEvent } from './events.ts';

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

/**
 * Every input's duration from its header, four at a time, in walk order, each as a `probed`
 * event. Stops taking inputs when `stop()` says so (the run was aborted, or has nothing left).
 */
export async function probeAll(
  files: readonly AudioFile[],
  stop: () => boolean,
  emit: (event: ArchiveEvent) => void | Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < files.length && !stop()) {
      const file = files[next++]!;
      if (file.skipped || file.unreadable) continue;
      const durationSec = await probeDuration(file.path);
      if (durationSec !== undefined && !stop()) await emit({ type: 'probed', file, durationSec });
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
}
