// How long-running commands (the emulator, a worker) wait to be stopped.

/**
 * The next SIGINT or SIGTERM, once: both listeners are removed when it comes, so a command can
 * listen again for a second signal. Listening starts at the call: call it before announcing
 * that the command is ready, since a caller may signal as soon as it reads that.
 */
export function nextStopSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const stop = (s: NodeJS.Signals) => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(s);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
