// The policy function: aggregates the replicas' reports into the Policy's status, writes it
// only when it changed, and emits Events on transitions.
import { isDeepStrictEqual } from 'node:util';
import { API_VERSION, POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../api/constants.ts';
import { readReplicaReport } from '../api/report.ts';
import { done, requeueAfter, terminal } from '../queue/index.ts';
import { computePolicy } from './policy-core.ts';
import { policyServerResourceName } from './policyserver-core.ts';
import { servedGenerationOf } from './webhook-core.ts';
import { nameOf, type ReconcileFunction } from './types.ts';

interface PodView {
  metadata?: {
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    ownerReferences?: unknown;
    deletionTimestamp?: unknown;
  };
  status?: { conditions?: { type: string; status: string }[] };
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
  const read = (p: PodView) => {
    const raw = p.metadata?.annotations?.[REPORT_ANNOTATION];
    const reading = readReplicaReport(raw);
    return reading.kind === 'valid' ? reading.report : reading.kind === 'absent' ? {} : undefined;
  };
  const [ra, rb] = [read(a), read(b)];
  if (!ra || !rb) return undefined;
  const names = new Set([...Object.keys(ra), ...Object.keys(rb)]);
  return [...names].filter((n) => JSON.stringify(ra[n]) !== JSON.stringify(rb[n]));
}

/** While the projections are being rebuilt (watcher starting, Redis restarted empty), wait. */
export const notSyncedDelayMs = 1000;

export const policy: ReconcileFunction = {
  name: 'policy',

  keysFor(event, index) {
    switch (event.kind) {
      case 'Policy':
        return [nameOf(event.object)].filter((n) => n !== undefined).map((n) => `policy/${n}`);
      case 'PolicyServer':
        return index.policiesOfServer(nameOf(event.object) ?? '').map((n) => `policy/${n}`);
      case 'Pod':
      case 'Deployment':
      case 'ReplicaSet': {
        // A report-only change re-runs the policies it touches.
        const changed =
          event.kind === 'Pod' && event.type === 'modified'
            ? reportOnlyChange(event.old, event.object)
            : undefined;
        // Anything else about pods, their ReplicaSets or the Deployment may change every Policy
        // of their server.
        const servers = new Set(
          [event.object, event.old].map((o) => o?.metadata?.labels?.[POLICY_SERVER_LABEL]),
        );
        const policies = [...servers].flatMap((s) => (s ? index.policiesOfServer(s) : []));
        return (changed ? policies.filter((n) => changed.includes(n)) : policies).map(
          (n) => `policy/${n}`,
        );
      }
      case 'ValidatingWebhookConfiguration': {
        // The webhook's served generation shows in the Policy's status.
        const owner = event.object.metadata?.labels?.['rollcall.dev/policy'];
        return owner ? [`policy/${owner}`] : [];
      }
    }
  },

  async handle(name, ctx) {
    const view = await ctx.store.policyView(name, policyServerResourceName);
    if (!view) return requeueAfter(notSyncedDelayMs);
    if (view.invalid) return terminal(`Policy ${name} could not be read: ${view.invalid}`);
    if (!view.policy) return done(); // deleted: its webhook function cleans up

    const decision = computePolicy({
      ...view,
      policy: view.policy,
      servedGeneration: servedGenerationOf(view.webhook, view.policy),
      now: ctx.now(),
    });
    if (isDeepStrictEqual(decision.status, view.policy.status)) return done();

    if (!(await ctx.kube.patchStatus('policies', name, decision.status, view.policy.status)))
      return done();
    ctx.log.info(
      { summary: decision.status.summary, ready: decision.status.ready },
      'policy status written',
    );
    // Events follow status changes only, so a re-run that changes nothing stays silent. They
    // are best effort, as in Kubernetes: a lost Event is logged, never retried with the job.
    const regarding = {
      apiVersion: API_VERSION,
      kind: 'Policy',
      name,
      uid: view.policy.metadata.uid,
    };
    for (const event of decision.events) {
      await ctx.kube
        .event(regarding, event, ctx.now())
        .catch((err: unknown) =>
          ctx.log.warn({ err, reason: event.reason }, 'could not write Event'),
        );
    }
    return done();
  },
};
