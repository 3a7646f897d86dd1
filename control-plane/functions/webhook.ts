// The webhook function: creates, updates or deletes `rollcall-<policy>` per the decision
// table, so a policy is enforced only once every replica really loaded it. Before a webhook
// serves a generation, that generation is recorded as a PolicyRevision (revision-core.ts).
import type { Policy, PolicyServer } from '../../api/v1alpha1.ts';
import { done, requeueAfter, retry, terminal } from '../queue/index.ts';
import { computePolicy } from './policy-core.ts';
import {
  notSyncedDelayMs,
  ownNameUnlessStatusOnly,
  policyOfWebhook,
  serversOfSecret,
} from './policy-keys.ts';
import { POLICY_SERVER_RESOURCE_PREFIX } from './policyserver-core.ts';
import { planRevisions } from './revision-core.ts';
import type { FunctionContext, ReconcileFunction } from './types.ts';
import { webhookCaBundle } from './webhook-ca.ts';
import { planWebhook, servedGenerationOf, type WebhookCa } from './webhook-core.ts';

export const webhook: ReconcileFunction = {
  name: 'webhook',

  // A report change is the policy function's to judge: it enqueues the webhook when the
  // readiness it computes moves the webhook (`webhookLags`), so the many report changes that
  // do not cost no webhook run.
  watches: [
    // Its status is the policy function's: the webhook never reads it.
    { kind: 'Policy', names: ownNameUnlessStatusOnly },
    // Someone edited or deleted it.
    { kind: 'ValidatingWebhookConfiguration', names: policyOfWebhook },
    // A Secret the CA of a server's webhooks comes from.
    {
      kind: 'Secret',
      names: (event, index) =>
        serversOfSecret(event, index).flatMap((s) => index.policiesOfServer(s)),
    },
    // Read with the Policy (`policyView`); their changes reach it through the fan-out.
    { kind: 'PolicyServer' },
    { kind: 'Deployment' },
    { kind: 'ReplicaSet' },
    { kind: 'Pod' },
  ],

  async handle(name, ctx) {
    const view = await ctx.store.policyView(name, POLICY_SERVER_RESOURCE_PREFIX);
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
    // Only a webhook about to serve, or a kept one that may follow a new CA bundle, needs the
    // CA (reading it may take an API request).
    const needsCa = intent.kind === 'serve' || (intent.kind === 'keep' && view.webhook);
    const ca = needsCa && view.policyServer ? await serverCa(ctx, view.policyServer) : undefined;
    const plan = planWebhook({
      policy: view.policy,
      policyServer: view.policyServer,
      intent,
      existing: view.webhook,
      options: {
        namespace: ctx.config.namespace,
        url: ctx.config.webhookUrl,
        protectedNamespaces: ctx.config.protectedNamespaces,
      },
      ...(ca === undefined ? {} : { ca }),
    });
    switch (plan.action) {
      case 'keep':
        return done();
      case 'blocked':
        // A caSecretRef needs the operator; a CA rollcall has not issued yet comes by itself.
        return view.policyServer?.spec.caSecretRef !== undefined
          ? terminal(plan.reason)
          : retry(new Error(plan.reason));
      case 'refresh':
        // The served generation stays as it is: no revision to record.
        await ctx.kube.apply(plan.webhook);
        ctx.log.info(
          { webhook: plan.webhook.metadata?.name },
          "kept webhook's CA bundle or excluded namespaces updated",
        );
        return done();
      case 'delete':
        await ctx.kube.deleteWebhook(plan.name);
        ctx.log.info({ webhook: plan.name }, 'webhook removed');
        return done();
      case 'create':
      case 'update': {
        // Only an intent `serve` writes, and it needs a Policy: record what it serves first.
        const prune = view.policy ? await recordRevision(ctx, view.policy) : [];
        await ctx.kube.apply(plan.webhook);
        ctx.log.info(
          { webhook: plan.webhook.metadata?.name, action: plan.action },
          'webhook applied',
        );
        // Best effort: an old revision left behind is pruned the next time a webhook is written.
        for (const revision of prune) {
          await ctx.kube
            .deleteRevision(revision)
            .catch((err: unknown) =>
              ctx.log.warn({ err, revision }, 'could not prune PolicyRevision'),
            );
        }
        return done();
      }
    }
  },
};

/** The CA the API server trusts for this server's webhooks. */
async function serverCa(ctx: FunctionContext, server: PolicyServer): Promise<WebhookCa> {
  // URL mode (out-of-cluster development, the simulator): the URL's CA is --webhook-ca-file's.
  if (ctx.config.webhookUrl !== undefined) {
    const caBundle = ctx.config.webhookCaBundle ?? server.spec.caBundle;
    return caBundle === undefined ? {} : { caBundle };
  }
  return webhookCaBundle(ctx, server);
}

/**
 * Makes sure the PolicyRevision of the generation about to be served exists (so a webhook
 * never serves a generation without one), and returns the revisions to prune afterwards.
 */
async function recordRevision(ctx: FunctionContext, policy: Policy): Promise<string[]> {
  const plan = planRevisions(policy, await ctx.kube.listRevisions(policy.metadata.name));
  for (const stale of plan.clear) {
    await ctx.kube.deleteRevision(stale);
    ctx.log.info(
      { revision: stale },
      'removed the PolicyRevision of a deleted Policy of the same name',
    );
  }
  if (plan.create !== undefined) {
    if (await ctx.kube.createRevision(plan.create)) {
      ctx.log.info({ revision: plan.create.metadata.name }, 'PolicyRevision recorded');
    } else {
      // 409 after a list that did not show it: make sure it is this Policy's before serving.
      const again = planRevisions(policy, await ctx.kube.listRevisions(policy.metadata.name));
      if (again.create !== undefined)
        throw new Error(
          `PolicyRevision ${plan.create.metadata.name} exists but does not record this Policy (uid ${policy.metadata.uid}); will retry`,
        );
    }
  }
  return plan.prune;
}
