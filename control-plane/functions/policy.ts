// The policy function: aggregates the replicas' reports into the Policy's status, writes it
// only when it changed, and emits Events on transitions.
import { isDeepStrictEqual } from 'node:util';
import { API_VERSION } from '../../api/constants.ts';
import type { Policy } from '../../api/v1alpha1.ts';
import { done, requeueAfter, terminal, type Outcome } from '../queue/index.ts';
import { computePolicy, type PolicyDecision } from './policy-core.ts';
import {
  notSyncedDelayMs,
  ownNameUnlessOwnStatus,
  policiesOfReportChange,
  policyOfWebhook,
} from './policy-keys.ts';
import { POLICY_SERVER_RESOURCE_PREFIX } from './policyserver-core.ts';
import { servedGenerationOf, webhookLags } from './webhook-core.ts';
import type { FunctionContext, ReconcileFunction } from './types.ts';

/** How long a run whose status write was refused waits for the watcher to catch up. */
export const rereadDelayMs = 100;
/** How long progress waits while writes are congested (a new event runs it at once). */
export const progressDelayMs = 5000;

export const policy: ReconcileFunction = {
  name: 'policy',

  watches: [
    { kind: 'Policy', names: ownNameUnlessOwnStatus },
    { kind: 'Pod', names: policiesOfReportChange },
    { kind: 'ValidatingWebhookConfiguration', names: policyOfWebhook },
    // Read with the Policy (`policyView`); their changes reach it through the fan-out.
    { kind: 'PolicyServer' },
    { kind: 'Deployment' },
    { kind: 'ReplicaSet' },
  ],

  async handle(name, ctx) {
    const view = await ctx.timed('read', () =>
      ctx.store.policyView(name, POLICY_SERVER_RESOURCE_PREFIX),
    );
    if (!view) return requeueAfter(notSyncedDelayMs);
    if (view.invalid) return terminal(`Policy ${name} could not be read: ${view.invalid}`);
    if (!view.policy) return done(); // deleted: its webhook function cleans up

    const policy = view.policy;
    const decision = await ctx.timed('compute', () =>
      computePolicy({
        ...view,
        policy,
        servedGeneration: servedGenerationOf(view.webhook, policy),
        now: ctx.now(),
      }),
    );
    // Report changes enqueue this function only (webhook.ts): the webhook runs when it must move.
    if (webhookLags(decision.webhook, view.webhook, policy)) await ctx.enqueue([`webhook/${name}`]);
    if (isDeepStrictEqual(decision.status, policy.status)) return done();
    // Adaptive coalescing: while the API server is the bottleneck, progress waits and a later
    // run writes fresher progress or the end state; Ready and Stalled are never held back.
    if (decision.status.summary === 'Reconciling' && ctx.writesCongested())
      return requeueAfter(progressDelayMs);
    return ctx.timed('write', () => write(name, policy, decision, ctx));
  },
};

/** The status, then the Events of its transition. */
async function write(
  name: string,
  policy: Policy,
  decision: PolicyDecision,
  ctx: FunctionContext,
): Promise<Outcome> {
  // Conditional on the version read: a projection that lags behind the last write would
  // otherwise repeat that write's Events. Refused, it runs again on a newer read: the change
  // it ran into may be only a status of rollcall's, which enqueues nothing (policy-keys.ts).
  if (!(await ctx.kube.patchStatus('policies', name, decision.status, policy)))
    return requeueAfter(rereadDelayMs);
  ctx.log.info(
    { summary: decision.status.summary, ready: decision.status.ready },
    'policy status written',
  );
  // Events follow status changes only, so a re-run that changes nothing stays silent. They
  // are best effort, as in Kubernetes: written after the run, a lost one is logged, never
  // retried with the job.
  const regarding = { apiVersion: API_VERSION, kind: 'Policy', name, uid: policy.metadata.uid };
  for (const event of decision.events) ctx.events.record(regarding, event, ctx.now());
  return done();
}
