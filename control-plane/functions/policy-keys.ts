// What the Policy-related functions share: the key mappings of the kinds they watch (which
// Policies, or which servers' Policies, a cluster event may affect: the policy function
// re-computes their status, the webhook function their webhook), and how long a function
// waits while the projections are being rebuilt.
import { POLICY_LABEL, POLICY_SERVER_LABEL } from '../../api/constants.ts';
import { isPodReady } from '../../api/kube.ts';
import type { ReportReading } from '../../api/report.ts';
import { nameOf, type ClusterIndex, type WatchEvent } from './types.ts';

/** While the projections are being rebuilt (watcher starting, Redis restarted empty), wait. */
export const notSyncedDelayMs = 1000;

/** A pod as the watcher's informer keeps it (control-plane/projections/project.ts, `ProjectedPod`). */
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
      isPodReady(p),
    ]);
  if (rest(a) !== rest(b)) return undefined;
  const entries = ({ report }: PodView) =>
    report?.kind === 'valid' ? report.report : report?.kind === 'absent' ? {} : undefined;
  const [ra, rb] = [entries(a), entries(b)];
  if (!ra || !rb) return undefined;
  const names = new Set([...Object.keys(ra), ...Object.keys(rb)]);
  return [...names].filter((n) => JSON.stringify(ra[n]) !== JSON.stringify(rb[n]));
}

/** The object's own name: a Policy's keys for a Policy, a server's for a PolicyServer. */
export const ownName = (event: WatchEvent): (string | undefined)[] => [nameOf(event.object)];

/** True when an update changed nothing of the object but its status. */
export function statusOnlyChange(event: WatchEvent): boolean {
  if (event.type !== 'modified' || !event.old) return false;
  const rest = ({ metadata, spec }: WatchEvent['object']) =>
    JSON.stringify([{ ...metadata, resourceVersion: undefined }, spec]);
  return rest(event.old) === rest(event.object);
}

/**
 * A Policy's own name, unless the event only shows a status that rollcall itself wrote
 * (`statusByOthers`, project.ts): the run that wrote it had read all it shows, and a run
 * whose write found the Policy changed runs again (policy.ts). A status someone else wrote
 * is put right. Each status write used to cost one more run that found nothing to do.
 */
export const ownNameUnlessOwnStatus = (event: WatchEvent): (string | undefined)[] =>
  statusOnlyChange(event) && !(event.object as { statusByOthers?: boolean }).statusByOthers
    ? []
    : ownName(event);

/** A Policy's own name, unless only its status changed: functions that never read it. */
export const ownNameUnlessStatusOnly = (event: WatchEvent): (string | undefined)[] =>
  statusOnlyChange(event) ? [] : ownName(event);

/**
 * A webhook configuration's Policy, by label: the webhook's served generation shows in the
 * Policy's status, and an edited or deleted webhook is put back.
 */
export const policyOfWebhook = (event: WatchEvent): (string | undefined)[] => [
  event.object.metadata?.labels?.[POLICY_LABEL],
];

/** `reportOnlyChange` of a pod event: undefined unless it modified nothing but the report. */
const reportOnly = (event: WatchEvent): string[] | undefined =>
  event.type === 'modified' ? reportOnlyChange(event.old, event.object) : undefined;

/**
 * The Policies a pod event names: those of the pod's server whose report entries alone
 * changed. Anything else about a pod may change every Policy of its server: the fan-out's
 * (`serversOfChange`), so that the watcher's cost of a pod event does not grow with the
 * policies on its server.
 */
export function policiesOfReportChange(event: WatchEvent, index: ClusterIndex): string[] {
  const changed = reportOnly(event);
  const server = event.object.metadata?.labels?.[POLICY_SERVER_LABEL];
  if (!changed || !server) return [];
  return index.policiesOfServer(server).filter((n) => changed.includes(n));
}

/** The PolicyServers whose TLS reads a Secret: the CA, a serving certificate, a caSecretRef. */
export const serversOfSecret = (event: WatchEvent, index: ClusterIndex): string[] =>
  index.serversUsingSecret?.(nameOf(event.object) ?? '') ?? [];

/**
 * The servers every Policy of which a change of a pod, ReplicaSet or Deployment may change:
 * its server's, before and after (anything about a pod but a report-only change).
 */
export function serversOfChange(event: WatchEvent): (string | undefined)[] {
  if (event.kind === 'Pod' && reportOnly(event)) return [];
  return [event.object, event.old].map((o) => o?.metadata?.labels?.[POLICY_SERVER_LABEL]);
}
