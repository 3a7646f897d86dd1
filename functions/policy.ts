// The policy function: aggregates the replicas' reports into the Policy's status, writes it
// only when it changed, and emits Events on transitions.
import { isDeepStrictEqual } from 'node:util';
import { API_VERSION } from '../api/constants.ts';
import { done, requeueAfter, terminal } from '../queue/index.ts';
import { computePolicy } from './policy-core.ts';
import { policyServerResourceName } from './policyserver-core.ts';
import { servedGenerationOf } from './webhook-core.ts';
import { nameOf, type ReconcileFunction } from './types.ts';

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
      case 'Deployment':
      case 'ReplicaSet':
      case 'Pod': {
        // Pods, their ReplicaSets and the Deployment decide every Policy of their server.
        const servers = new Set([event.object, event.old].map((o) => o?.metadata?.labels?.['rollcall.dev/policy-server']));
        return [...servers].flatMap((s) => (s ? index.policiesOfServer(s) : [])).map((n) => `policy/${n}`);
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

    const decision = computePolicy({ ...view, policy: view.policy, servedGeneration: servedGenerationOf(view.webhook, view.policy), now: ctx.now() });
    if (isDeepStrictEqual(decision.status, view.policy.status)) return done();

    if (!(await ctx.kube.patchStatus('policies', name, decision.status, view.policy.status))) return done();
    ctx.log.info({ summary: decision.status.summary, ready: decision.status.ready }, 'policy status written');
    // Events follow status changes only, so a re-run that changes nothing stays silent. They
    // are best effort, as in Kubernetes: a lost Event is logged, never retried with the job.
    const regarding = { apiVersion: API_VERSION, kind: 'Policy', name, uid: view.policy.metadata.uid };
    for (const event of decision.events) {
      await ctx.kube.event(regarding, event, ctx.now()).catch((err: unknown) => ctx.log.warn({ err, reason: event.reason }, 'could not write Event'));
    }
    return done();
  },
};
