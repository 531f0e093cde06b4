// Loaded into every test process (--import): fails the file when it leaves handles open
// (sockets, servers, child processes, ref'd timers, workers) after its tests and hooks end.
//
// Root `after` hooks run in registration order and this one registers first, so it cannot
// check at once: it starts an unref'd poll that lets the file's own hooks close things. If
// everything closes, the poll stops and the process exits normally; if handles are still open
// after the grace period, it names them and exits 1, which the runner reports as a failure.
// Requests still in flight (file-system work of a slow hook) restart the grace period, up to a cap.

import { enableCompileCache, getCompileCacheDir } from 'node:module';
import { after } from 'node:test';

// The sources are compiled again by every test process and every command a test runs (the CLI,
// workers, emulators): V8's code cache on disk makes each start after the first cheaper. Child
// processes inherit it through the environment. Only a cache: a failure to enable it changes
// nothing else.
enableCompileCache();
const compileCache = getCompileCacheDir();
if (compileCache !== undefined) process.env.NODE_COMPILE_CACHE ??= compileCache;

/** A positive number of milliseconds from the environment, else `fallback` (never NaN or 0). */
function envMs(name: string, fallback: number): number {
  const value = Number(process.env[name]);
  return Number.isFinite(value) && value > 0 ? value : fallback;
}

const GRACE_MS = envMs('SPEECHPIPE_LEAK_GRACE_MS', 10_000);

const count = (list: string[]) => {
  const m = new Map<string, number>();
  for (const r of list) m.set(r, (m.get(r) ?? 0) + 1);
  return m;
};

const baseline = count(process.getActiveResourcesInfo());

function leaks(): string[] {
  const out: string[] = [];
  for (const [type, n] of count(process.getActiveResourcesInfo())) {
    const extra = n - (baseline.get(type) ?? 0);
    if (extra > 0) out.push(`${type} x${extra}`);
  }
  return out;
}

// Requests in flight (a file's `after` removing a large tree issues thousands of them) are
// work that ends by itself, not a leak: while any is pending the grace period starts again,
// up to WORK_CAP_MS (never shorter than the grace period itself), so a slow hook under load is
// not reported as leaking its own requests.
const WORK_CAP_MS = Math.max(envMs('SPEECHPIPE_LEAK_WORK_CAP_MS', 120_000), GRACE_MS);
/** `FSReqCallback x3`, `FSReqPromise x1`, `GetAddrInfoReqWrap x1`: a request, not a handle. */
const isRequest = (entry: string) => /^(FSReq\w*|\w*ReqWrap) x\d+$/.test(entry);

after(() => {
  const start = Date.now();
  let deadline = start + GRACE_MS;
  const poll = () => {
    const left = leaks();
    if (left.length === 0) return;
    const now = Date.now();
    if (left.some(isRequest)) deadline = Math.min(Math.max(deadline, now + GRACE_MS), start + WORK_CAP_MS);
    if (now >= deadline) {
      console.error(`test file left handles open after its hooks: ${left.join(', ')}`);
      process.exit(1);
    }
    setTimeout(poll, 50).unref();
  };
  setTimeout(poll, 50).unref();
});
