// The worker's metrics, in the registry the caller owns: its function runs' stages, its writes
// to the Kubernetes API and their window, its Policy Events. The other control-plane metrics
// live with what they measure: queue/metrics.ts (jobs), watcher/metrics.ts (watches, the
// watcher), functions/policyserver-metrics.ts (certificates), lib/redis/primary.ts (failovers).
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { FunctionContext } from './functions/types.ts';

/** Counts Kubernetes API writes by verb and HTTP status code (0: no response). */
export function kubeRequestCounter(registry: Registry): (verb: string, code: number) => void {
  const counter = new Counter({
    name: 'rollcall_kube_requests_total',
    help: 'Kubernetes API write requests made by worker functions, by verb and HTTP status code (0: no response)',
    labelNames: ['verb', 'code'],
    registers: [registry],
  });
  return (verb, code) => counter.inc({ verb, code: String(code) });
}

/** Times the stages of function runs (read, compute, write), for the latency breakdown. */
export function stageTimer(registry: Registry): (fn: string) => FunctionContext['timed'] {
  const histogram = new Histogram({
    name: 'rollcall_function_stage_seconds',
    help: 'Time a function run spends reading projections, computing, and writing to the API',
    labelNames: ['function', 'stage'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [registry],
  });
  return (fn) => async (stage, run) => {
    const end = histogram.startTimer({ function: fn, stage });
    try {
      return await run();
    } finally {
      end();
    }
  };
}

/** The background Event writer's backlog (read from `pending` at each scrape) and drops. */
export function eventMetrics(registry: Registry, pending: () => number): { dropped(): void } {
  const dropped = new Counter({
    name: 'rollcall_events_dropped_total',
    help: 'Policy Events dropped because the backlog of Events to write was full',
    registers: [registry],
  });
  new Gauge({
    name: 'rollcall_events_pending',
    help: 'Policy Events waiting to be written or being written',
    registers: [registry],
    collect() {
      this.set(pending());
    },
  });
  return { dropped: () => dropped.inc() };
}

/** The window of writes in flight (queue/write-window.ts), read at each scrape. */
export function writeWindowGauge(registry: Registry, window: { readonly size: number }): void {
  new Gauge({
    name: 'rollcall_kube_write_window',
    help: 'Writes to the Kubernetes API this worker sends at once, narrowed by 429s (+Inf: no limit)',
    registers: [registry],
    collect() {
      this.set(window.size);
    },
  });
}
