// Phase 7, worker scale-out: a fresh Redis database makes the watcher enqueue every key; then
// k workers drain it. Runs are no-ops (statuses are current): this is reconcile throughput.
import { log, queueIdle, type Bench } from '../context.ts';
import { sleep, waitHttpOk } from '../support.ts';
import { metric } from '../../test/support/prom-text.ts';

export interface ScaleOut {
  workers: number;
  runs: number;
  seconds: number;
  runsPerSecond: number;
}

export async function scaleOut(bench: Bench): Promise<ScaleOut[]> {
  const scale: ScaleOut[] = [];
  for (const k of [1, 2, 4]) {
    const redisUrl = `${bench.redisUrl}/${++bench.phaseDb}`;
    const watcher = await bench.startRole('watcher-scale', 'watcher', redisUrl);
    await waitHttpOk(watcher.port, '/readyz', 300_000);
    const queued = await metric(watcher.port, 'rollcall_queue_depth', { state: 'waiting' });
    const ws = await bench.startWorkers('worker-scale-', k, redisUrl);
    const runsOf = async () =>
      (
        await Promise.all(ws.map((w) => metric(w.port, 'rollcall_queue_runs_total').catch(() => 0)))
      ).reduce((a, b) => a + b, 0);
    let tFirst = 0;
    for (;;) {
      const r = await runsOf();
      if (r > 0 && tFirst === 0) tFirst = performance.now();
      if (tFirst > 0 && (await queueIdle(watcher.port))) break;
      await sleep(50);
    }
    const seconds = (performance.now() - tFirst) / 1000;
    const runs = await runsOf();
    scale.push({ workers: k, runs, seconds, runsPerSecond: runs / seconds });
    log(`scale-out: ${k} workers ran ${runs} (of ${queued} queued) in ${seconds.toFixed(2)} s`);
    await bench.stopAll([watcher, ...ws]);
  }
  return scale;
}
