// V8 keeps the pages a garbage collection frees in a pool for reuse and gives them back to
// the OS only under memory pressure, so a process stays at the resident size of its largest
// heap. A watcher's largest heap is a rebuild (every projection and every key at once): at
// 10,000 pods and 5,000 policies its pool held ~95 MiB for good afterwards (bench/RESULTS.md).
// A last-resort collection after a rebuild returns the pool; it pauses the process for one
// full collection of a small heap, and rebuilds are rare (start, resync, Redis loss).
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
