// The watcher's metrics (its reflectors', its events', its leadership), registered in a
// registry the caller owns (never the global one).
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ReflectorMetrics } from '../../lib/kube/reflector.ts';

/**
 * Hooks that count a reflector's watch restarts, relists, events and failures in
 * `registry`, labelled with `resource` (e.g. `pods`). The counters are created once per
 * registry and shared by every reflector that reports into it:
 * `rollcall_watch_restarts_total{resource,reason}`, `rollcall_watch_relists_total{resource,reason}`,
 * `rollcall_watch_events_total{resource,type}`, `rollcall_watch_failures_total{resource,stage}`.
 */
export function reflectorMetrics(registry: Registry, resource: string): ReflectorMetrics {
  const restarts = counter(
    registry,
    'rollcall_watch_restarts_total',
    'Watches started again, by why the previous one ended.',
    'reason',
  );
  const relists = counter(
    registry,
    'rollcall_watch_relists_total',
    'Full lists, by reason (initial or gone).',
    'reason',
  );
  const events = counter(
    registry,
    'rollcall_watch_events_total',
    'Watch events received, by type.',
    'type',
  );
  const failures = counter(
    registry,
    'rollcall_watch_failures_total',
    'Failed list or watch requests and handler errors.',
    'stage',
  );
  return {
    watchRestarted: (reason) => restarts.inc({ resource, reason }),
    relisted: (reason) => relists.inc({ resource, reason }),
    received: (type) => events.inc({ resource, type }),
    failed: (stage) => failures.inc({ resource, stage }),
  };
}

function counter(registry: Registry, name: string, help: string, label: string): Counter<string> {
  const existing = registry.getSingleMetric(name);
  if (existing instanceof Counter) return existing;
  return new Counter({ name, help, labelNames: ['resource', label], registers: [registry] });
}

/** The watcher's own metrics; its reflectors' are `reflectorMetrics`. */
export interface WatcherMetrics {
  /** From a Policy's new generation to a status that observed it (`rollcall_policy_status_latency_seconds`). */
  convergence: Histogram;
  /** Where an event's time goes in the watcher: waiting its turn, the projection, the enqueue. */
  eventStages: Histogram<'resource' | 'stage'>;
  rebuilds: Counter<'reason'>;
}

/**
 * `rollcall_watcher_leader` (read from `isLeader` at each scrape),
 * `rollcall_policy_status_latency_seconds`, `rollcall_watcher_event_seconds{resource,stage}`
 * and `rollcall_watcher_rebuilds_total{reason}`, in `registry`.
 */
export function watcherMetrics(registry: Registry, isLeader: () => boolean): WatcherMetrics {
  const registers = [registry];
  new Gauge({
    name: 'rollcall_watcher_leader',
    help: '1 while this watcher holds the leader Lease, else 0',
    registers,
    collect() {
      this.set(isLeader() ? 1 : 0);
    },
  });
  return {
    convergence: new Histogram({
      name: 'rollcall_policy_status_latency_seconds',
      help: "From the watcher seeing a Policy's new generation to seeing a status with that observedGeneration",
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120],
      registers,
    }),
    eventStages: new Histogram({
      name: 'rollcall_watcher_event_seconds',
      help: 'Time the watcher spends on one watch event: queued behind earlier ones, writing its projection, enqueueing its keys',
      labelNames: ['resource', 'stage'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers,
    }),
    rebuilds: new Counter({
      name: 'rollcall_watcher_rebuilds_total',
      help: 'Full rewrites of the projections with every key enqueued, by reason',
      labelNames: ['reason'],
      registers,
    }),
  };
}
