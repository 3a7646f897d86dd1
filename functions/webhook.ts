// The webhook function: creates, updates or deletes `rollcall-<policy>` per the decision
// table, so a policy is enforced only once every replica really loaded it.
import { done, requeueAfter, terminal } from '../queue/index.ts';
import { notSyncedDelayMs } from './policy.ts';
import { computePolicy } from './policy-core.ts';
import { policyServerResourceName } from './policyserver-core.ts';
import { planWebhook, servedGenerationOf, webhookConfigurationName } from './webhook-core.ts';
import { policy as policyFunction } from './policy.ts';
import { type ReconcileFunction } from './types.ts';

export const webhook: ReconcileFunction = {
  name: 'webhook',

  keysFor(event, index) {
    // Whatever can change a Policy's readiness can change its webhook, and the webhook
    // itself (someone edited or deleted it).
    return policyFunction.keysFor(event, index).map((key) => key.replace(/^policy\//, 'webhook/'));
  },

  async handle(name, ctx) {
    const view = await ctx.store.policyView(name, policyServerResourceName);
    if (!view) return requeueAfter(notSyncedDelayMs);
    if (view.invalid) return terminal(`Policy ${name} could not be read: ${view.invalid}`);

    const intent = view.policy
      ? computePolicy({
          ...view,
          policy: view.policy,
          servedGeneration: servedGenerationOf(view.webhook, view.policy),
          now: ctx.now(),
        }).webhook
      : ({ kind: 'absent' } as const);
    const plan = planWebhook({
      policy: view.policy,
      policyServer: view.policyServer,
      intent,
      existing: view.webhook,
      options: {
        namespace: ctx.config.namespace,
        url: ctx.config.webhookUrl,
        caBundle: ctx.config.webhookCaBundle,
      },
    });
    switch (plan.action) {
      case 'keep':
        return done();
      case 'blocked':
        return terminal(plan.reason);
      case 'delete':
        await ctx.kube.deleteWebhook(plan.name);
        ctx.log.info({ webhook: plan.name }, 'webhook removed');
        return done();
      case 'create':
      case 'update':
        await ctx.kube.apply(plan.webhook);
        ctx.log.info(
          { webhook: webhookConfigurationName(name), action: plan.action },
          'webhook applied',
        );
        return done();
    }
  },
};
