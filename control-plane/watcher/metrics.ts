// prom-client counters for reflectors, registered in a registry the caller owns (never the global one).
import { Counter, type Registry } from 'prom-client';
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
