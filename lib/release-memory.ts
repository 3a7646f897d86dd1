// V8 keeps the pages a garbage collection frees in a pool for reuse and gives them back to
// the OS only under memory pressure, so a process stays at the resident size of its largest
// heap. A watcher's largest heaps are a rebuild (every projection and key at once) and a burst
// of events, a worker's a burst of runs: at 10,000 pods and 5,000 policies a watcher's pool
// held ~95 MiB for good afterwards (bench/RESULTS.md). A last-resort collection once the work is over returns the pool; it
// pauses the process for one full collection of a small heap (tens of ms), once per burst.
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Collect = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
let collect: Collect | undefined;

/** Collects garbage and returns the pages V8 pooled to the OS; returns how long it took (ms). */
export function releaseFreedMemory(): number {
  if (!collect) {
    // The GC extension is installed in contexts created after the flag is set.
    setFlagsFromString('--expose-gc');
    collect = runInNewContext('gc') as Collect;
  }
  const started = performance.now();
  collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return performance.now() - started;
}

export interface AfterBurstsOptions {
  /** Work items (events, objects written) that make a burst worth a collection. Default 1,000. */
  minWork?: number;
  /** How long without work ends a burst. Default 1 s. */
  quietMs?: number;
  /** Called after each release with its pause in ms. */
  released?(ms: number): void;
}

/**
 * Releases freed memory once a burst of work is over: `noteWork(n)` counts work as it is
 * done; when at least `minWork` came and then `quietMs` passed without any, it releases.
 */
export function releaseAfterBursts(options: AfterBurstsOptions = {}): {
  noteWork(count: number): void;
  stop(): void;
} {
  const { minWork = 1000, quietMs = 1000 } = options;
  let work = 0;
  let timer: NodeJS.Timeout | undefined;
  const burstOver = () => {
    timer = undefined;
    if (work < minWork) return;
    work = 0;
    options.released?.(releaseFreedMemory());
  };
  return {
    noteWork(count) {
      work += count;
      if (timer) timer.refresh();
      else timer = setTimeout(burstOver, quietMs).unref();
    },
    stop: () => clearTimeout(timer),
  };
}
