/**
 * How the example's processes live under `npm start`: they announce
 * themselves with one line (`LISTENING <url>` / `READY`), and they stop — in
 * order, gracefully — on SIGTERM, SIGINT, or when their supervisor goes away
 * (their stdin, a pipe from it, closes; a SIGKILLed supervisor leaves no
 * orphan behind).
 */
export function onStop(stop: () => Promise<void>): void {
  let stopping = false;
  const run = () => {
    if (stopping) return;
    stopping = true;
    stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(error);
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', run);
  process.once('SIGINT', run);
  if (process.env.STEPKEY_SUPERVISED === '1') {
    process.stdin.on('end', run);
    process.stdin.on('close', run);
    process.stdin.resume();
  }
}
