// What the Policy-related functions share: which Policies a cluster event may affect (the
// policy function re-computes their status, the webhook function their webhook), and how
// long a function waits while the projections are being rebuilt.
import { POLICY_LABEL, POLICY_SERVER_LABEL } from '../../api/constants.ts';
import type { ReportReading } from '../../api/report.ts';
import { nameOf, type ClusterIndex, type WatchEvent } from './types.ts';

/** While the projections are being rebuilt (watcher starting, Redis restarted empty), wait. */
export const notSyncedDelayMs = 1000;

/** A pod as the watcher's informer keeps it (control-plane/projections/store.ts, `ProjectedPod`). */
interface PodView {
  metadata?: {
    labels?: Record<string, string>;
    ownerReferences?: unknown;
    deletionTimestamp?: unknown;
  };
  status?: { conditions?: { type: string; status: string }[] };
  /** The pod's report, read once when the watcher saw the pod change. */
  report?: ReportReading;
}

/**
 * When the only change to a pod is its report, the policies whose entries changed (a flip
 * of one policy re-runs one key, not every policy of the server). Undefined when anything
 * else changed or either report is unreadable: then every policy of the server may change.
 */
export function reportOnlyChange(old: unknown, now: unknown): string[] | undefined {
  const [a, b] = [old as PodView | undefined, now as PodView | undefined];
  if (!a || !b) return undefined;
  const rest = (p: PodView) =>
    JSON.stringify([
      p.metadata?.labels,
      p.metadata?.ownerReferences,
      p.metadata?.deletionTimestamp ?? null,
      p.status?.conditions?.find((c) => c.type === 'Ready')?.status,
    ]);
  if (rest(a) !== rest(b)) return undefined;
  const entries = ({ report }: PodView) =>
    report?.kind === 'valid' ? report.report : report?.kind === 'absent' ? {} : undefined;
  const [ra, rb] = [entries(a), entries(b)];
  if (!ra || !rb) return undefined;
  const names = new Set([...Object.keys(ra), ...Object.keys(rb)]);
  return [...names].filter((n) => JSON.stringify(ra[n]) !== JSON.stringify(rb[n]));
}

/**
 * The names of the Policies whose readiness, and so whose webhook, an event may change,
 * when it names them. An event that may change every Policy of a server names the server
 * instead (`serversAffectedBy`): one `server/<name>` job enqueues their keys, so that the
 * watcher's cost of a pod event does not grow with the policies on its server.
 */
export function policiesAffectedBy(event: WatchEvent, index: ClusterIndex): string[] {
  switch (event.kind) {
    case 'Policy':
      return [nameOf(event.object)].filter((n) => n !== undefined);
    case 'PolicyServer':
    case 'Deployment':
    case 'ReplicaSet':
      return [];
    case 'Pod': {
      // A report-only change re-runs the policies it touches (of the pod's server).
      const changed =
        event.type === 'modified' ? reportOnlyChange(event.old, event.object) : undefined;
      const server = event.object.metadata?.labels?.[POLICY_SERVER_LABEL];
      if (!changed || !server) return [];
      return index.policiesOfServer(server).filter((n) => changed.includes(n));
    }
    case 'ValidatingWebhookConfiguration': {
      // The webhook's served generation shows in the Policy's status; an edited or deleted
      // webhook is put back.
      const owner = event.object.metadata?.labels?.[POLICY_LABEL];
      return owner ? [owner] : [];
    }
    case 'Secret':
      // A Policy's readiness never depends on a Secret; its webhook's CA may (webhook.ts).
      return [];
  }
}

/**
 * The servers every Policy of which an event may change: the PolicyServer itself, anything
 * about its pods but a report-only change, its ReplicaSets and its Deployment.
 */
export function serversAffectedBy(event: WatchEvent): string[] {
  switch (event.kind) {
    case 'PolicyServer':
      return [nameOf(event.object)].filter((n) => n !== undefined);
    case 'Pod':
    case 'Deployment':
    case 'ReplicaSet': {
      if (
        event.kind === 'Pod' &&
        event.type === 'modified' &&
        reportOnlyChange(event.old, event.object)
      )
        return [];
      const servers = [event.object, event.old].map(
        (o) => o?.metadata?.labels?.[POLICY_SERVER_LABEL],
      );
      return [...new Set(servers)].filter((s): s is string => s !== undefined && s !== '');
    }
    default:
      return [];
  }
}
