// A real headless Chromium for tests that look at a page as a viewer does: Debian's chromium
// (scripts/setup.sh installs it), driven over the DevTools protocol by puppeteer-core, which
// never downloads a browser of its own.

import { accessSync, constants } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

/** The Chromium to drive: `CHROMIUM_PATH`, else the first of the usual names on PATH. */
export function findChromium(): string | undefined {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
      const path = join(dir, name);
      try {
        accessSync(path, constants.X_OK);
        return path;
      } catch {}
    }
  }
  return undefined;
}

/**
 * `skip` for a browser test: false where Chromium is found; where it is not, a message saying
 * why, except under CI, whose setup installs Chromium: there the test runs and fails.
 */
export function browserSkip(): string | false {
  if (findChromium() || process.env.CI) return false;
  return 'no Chromium found (install it with scripts/setup.sh, or set CHROMIUM_PATH)';
}

export async function launchBrowser(): Promise<Browser> {
  const executablePath = findChromium();
  if (!executablePath) throw new Error('no Chromium found: scripts/setup.sh installs it');
  return puppeteer.launch({
    executablePath,
    headless: true,
    pipe: true,
    // Chromium refuses to run its sandbox as root (a container's root).
    args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
  });
}

/** Where a browser test keeps what it saw when it failed. */
export const ARTIFACTS_DIR =
  process.env.SPEECHPIPE_ARTIFACTS_DIR ?? join(tmpdir(), 'speechpipe-test-artifacts');

/** Save a screenshot of `page` as `name`.png among the artifacts; its path, or why not. */
export async function keepScreenshot(page: Page | undefined, name: string): Promise<string> {
  if (!page || page.isClosed()) return 'no page to screenshot';
  try {
    await mkdir(ARTIFACTS_DIR, { recursive: true });
    const path = join(ARTIFACTS_DIR, `${name.replace(/[^\w.-]+/g, '-')}.png`);
    await writeFile(path, await page.screenshot({ type: 'png' }));
    return path;
  } catch (err) {
    return `no screenshot: ${(err as Error).message}`;
  }
}
