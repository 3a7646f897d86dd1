// The policyserver function: keeps the server's Deployment and Service applied and writes
// the PolicyServer's status from the Deployment's kstatus. Event driven: the Deployment
// controller sets ProgressDeadlineExceeded, whose watch event brings us back; no polling.
import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { POLICY_SERVER_LABEL } from '../api/constants.ts';
import { done, requeueAfter, terminal } from '../queue/index.ts';
import { notSyncedDelayMs } from './policy.ts';
import { planPolicyServer, policyServerResourceName } from './policyserver-core.ts';
import { nameOf, type ReconcileFunction } from './types.ts';

/** On the Deployment: a hash of the manifests rollcall last applied, to skip no-op applies. */
export const APPLIED_HASH_ANNOTATION = 'rollcall.dev/applied-hash';

export const policyServer: ReconcileFunction = {
  name: 'policyserver',

  keysFor(event) {
    switch (event.kind) {
      case 'PolicyServer':
        return [nameOf(event.object)]
          .filter((n) => n !== undefined)
          .map((n) => `policyserver/${n}`);
      case 'Deployment': {
        const server = event.object.metadata?.labels?.[POLICY_SERVER_LABEL];
        return server ? [`policyserver/${server}`] : [];
      }
      default:
        return [];
    }
  },

  async handle(name, ctx) {
    const view = await ctx.store.policyServerView(name, policyServerResourceName(name));
    if (!view) return requeueAfter(notSyncedDelayMs);
    if (view.invalid) return terminal(`PolicyServer ${name} could not be read: ${view.invalid}`);
    const server = view.policyServer;
    if (!server) return done(); // deleted: owner references remove its Deployment and Service

    const plan = planPolicyServer(
      server,
      view.deployment,
      { namespace: ctx.config.namespace },
      ctx.now(),
    );
    // Apply only when what rollcall wants changed: the Deployment carries a hash of it.
    const hash = createHash('sha256')
      .update(JSON.stringify([plan.deployment, plan.service]))
      .digest('hex')
      .slice(0, 16);
    if (view.deployment?.metadata?.annotations?.[APPLIED_HASH_ANNOTATION] !== hash) {
      const deployment = {
        ...plan.deployment,
        metadata: {
          ...plan.deployment.metadata,
          annotations: {
            ...plan.deployment.metadata?.annotations,
            [APPLIED_HASH_ANNOTATION]: hash,
          },
        },
      };
      await ctx.kube.apply(plan.service);
      await ctx.kube.apply(deployment);
    }
    if (!isDeepStrictEqual(plan.status, server.status)) {
      await ctx.kube.patchStatus('policyservers', name, plan.status, server.status);
      ctx.log.info(
        { summary: plan.status.summary, ready: plan.status.ready },
        'policy server status written',
      );
    }
    return done();
  },
};
