/**
 * The pure core of a Policy's admission webhook: one ValidatingWebhookConfiguration
 * `rollcall-<policy>` per Policy, and the decision to create, update, keep or delete it.
 *
 * How "the last fully loaded generation's rules" are remembered: by the webhook
 * configuration itself. rollcall only ever writes a webhook from the *current* spec,
 * at the moment that generation is fully loaded (intent `serve`), and stamps it with
 * the annotation `rollcall.dev/served-generation`. While a newer generation is loading
 * or has failed, the intent is `keep`: the configuration is left exactly as it is, so
 * it goes on enforcing the old generation's rules (its PolicyRevision keeps the old spec
 * for the policy servers, not for this core). Trade-offs: if someone deletes the webhook
 * while the policy is not Ready, rollcall does not rebuild the old rules and the policy
 * is unenforced (fails open) until the current generation loads. A kept webhook still follows
 * its server's CA bundle (action `rebundle`: only clientConfig.caBundle changes), so a CA
 * rotation never waits for a policy to become Ready again.
 *
 * The service path pins the served generation (`/validate/<policy>/<generation>`), so every
 * policy-server replica answers with exactly the generation the webhook enforces, and the
 * webhook function records that generation as a PolicyRevision before it writes the webhook
 * (revision-core.ts), so a replica started later can still load it.
 *
 * Mode `monitor` registers the same webhook (the policy server only logs its verdicts
 * for monitor policies), but always with failurePolicy Ignore: a policy that may not
 * deny must not deny through an unreachable server either.
 *
 * Every webhook excludes rollcall's own namespace, so no policy can lock the control
 * plane out of the cluster.
 */
import type {
  V1LabelSelector,
  V1ValidatingWebhookConfiguration,
  AdmissionregistrationV1WebhookClientConfig,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  POLICY_LABEL,
  SERVED_GENERATION_ANNOTATION,
  webhookConfigurationName,
  webhookPath,
} from '../api/constants.ts';
import type { ExistingWebhook } from '../api/kube.ts';
import type { LabelSelector, Policy, PolicyServer } from '../api/v1alpha1.ts';
import { POLICY_SERVER_SERVICE_PORT, policyServerResourceName } from './policyserver-core.ts';

/** What the Policy core wants of the webhook. */
export type WebhookIntent =
  /** Present, enforcing the current spec, whose generation is fully loaded. */
  | { kind: 'serve'; generation: number }
  /** Leave the webhook as it is (present with an older generation, or absent). */
  | { kind: 'keep' }
  /** No webhook: nothing was ever fully loaded. */
  | { kind: 'absent' };

export interface WebhookOptions {
  /** rollcall's namespace: the policy servers' Services live here, and every webhook excludes it. */
  namespace: string;
  /**
   * Out-of-cluster development: the API server calls `${url}/validate/<policy>/<generation>`
   * (e.g. `https://host.docker.internal:8443`) instead of the in-cluster Service.
   */
  url?: string;
}

/**
 * The CA bundle the API server trusts for a server's webhooks, as the shell resolved it
 * (functions/webhook-ca.ts, or `--webhook-ca-file` in URL mode): a base64 PEM bundle, none
 * (the API server's own trust roots), or why it cannot be had yet.
 */
export type WebhookCa = { caBundle?: string } | { blocked: string };

export type WebhookPlan =
  | { action: 'create'; webhook: V1ValidatingWebhookConfiguration }
  | { action: 'update'; webhook: V1ValidatingWebhookConfiguration }
  | { action: 'keep' }
  /** Intent `keep`, but the server's CA bundle changed: the same webhook, the new caBundle. */
  | { action: 'rebundle'; webhook: V1ValidatingWebhookConfiguration }
  | { action: 'delete'; name: string }
  /** A webhook is wanted but cannot be written safely; `reason` says what the operator must do. */
  | { action: 'blocked'; reason: string };

export const NAMESPACE_NAME_LABEL = 'kubernetes.io/metadata.name';

/**
 * The generation an existing webhook serves *for this Policy*. A webhook left over
 * from a deleted Policy of the same name (other owner uid), or with no readable
 * annotation, serves nothing we can vouch for.
 */
export function servedGenerationOf(
  existing: ExistingWebhook | undefined,
  policy: Policy,
): number | undefined {
  if (existing === undefined) return undefined;
  const owner = existing.metadata?.ownerReferences?.find((ref) => ref.kind === 'Policy');
  if (owner === undefined || owner.uid !== policy.metadata.uid) return undefined;
  const raw = existing.metadata?.annotations?.[SERVED_GENERATION_ANNOTATION];
  if (raw === undefined || !/^[0-9]+$/.test(raw)) return undefined;
  return Number(raw);
}

/**
 * True when the webhook is not what `intent` asks for: it serves another generation than the
 * one to serve, or exists while it should not. A kept webhook never lags (what it serves may
 * only change with the readiness).
 */
export function webhookLags(
  intent: WebhookIntent,
  existing: ExistingWebhook | undefined,
  policy: Policy,
): boolean {
  if (intent.kind === 'serve') return servedGenerationOf(existing, policy) !== intent.generation;
  return intent.kind === 'absent' && existing !== undefined;
}

/** The policy's namespaceSelector, ANDed with "not rollcall's namespace". */
export function namespaceSelectorExcluding(
  selector: LabelSelector | undefined,
  namespace: string,
): V1LabelSelector {
  return {
    ...(selector?.matchLabels === undefined ? {} : { matchLabels: selector.matchLabels }),
    matchExpressions: [
      ...(selector?.matchExpressions ?? []),
      { key: NAMESPACE_NAME_LABEL, operator: 'NotIn', values: [namespace] },
    ],
  };
}

function clientConfig(
  policy: Policy,
  server: PolicyServer,
  options: WebhookOptions,
  caBundle: string | undefined,
): AdmissionregistrationV1WebhookClientConfig {
  const path = webhookPath(policy.metadata.name, policy.metadata.generation ?? 0);
  const ca = caBundle === undefined ? {} : { caBundle };
  if (options.url !== undefined) return { url: `${options.url.replace(/\/+$/, '')}${path}`, ...ca };
  return {
    service: {
      namespace: options.namespace,
      name: policyServerResourceName(server.metadata.name),
      path,
      port: POLICY_SERVER_SERVICE_PORT,
    },
    ...ca,
  };
}

/**
 * The webhook configuration enforcing the policy's current spec, trusting `caBundle`. Fields
 * the API server would default are set explicitly, so a re-read compares equal.
 */
export function buildWebhookConfiguration(
  policy: Policy,
  server: PolicyServer,
  options: WebhookOptions,
  caBundle?: string,
): V1ValidatingWebhookConfiguration {
  const name = policy.metadata.name;
  const { spec } = policy;
  return {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata: {
      name: webhookConfigurationName(name),
      labels: { [MANAGED_BY_LABEL]: MANAGED_BY, [POLICY_LABEL]: name },
      annotations: { [SERVED_GENERATION_ANNOTATION]: String(policy.metadata.generation ?? 0) },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: 'Policy',
          name,
          uid: policy.metadata.uid ?? '',
          controller: true,
        },
      ],
    },
    webhooks: [
      {
        name: `${name}.policies.rollcall.dev`,
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        failurePolicy: spec.mode === 'monitor' ? 'Ignore' : spec.failurePolicy,
        matchPolicy: 'Equivalent',
        timeoutSeconds: spec.timeoutSeconds,
        rules: spec.rules.map((rule) => ({
          operations: [...rule.operations],
          apiGroups: [...rule.apiGroups],
          apiVersions: [...rule.apiVersions],
          resources: [...rule.resources],
          scope: rule.scope,
        })),
        namespaceSelector: namespaceSelectorExcluding(spec.namespaceSelector, options.namespace),
        objectSelector: spec.objectSelector ?? {},
        clientConfig: clientConfig(policy, server, options, caBundle),
      },
    ],
  };
}

export interface WebhookPlanInput {
  /** undefined: the Policy was deleted. */
  policy: Policy | undefined;
  policyServer: PolicyServer | undefined;
  intent: WebhookIntent;
  /** The webhook configuration named `rollcall-<policy>`, if it exists. */
  existing: ExistingWebhook | undefined;
  options: WebhookOptions;
  /** The server's CA; intents `serve` and `keep` read it (the shell resolves it only then). */
  ca?: WebhookCa;
}

/** Turns the Policy core's intent into one action on the webhook configuration. */
export function planWebhook({
  policy,
  policyServer,
  intent,
  existing,
  options,
  ca = {},
}: WebhookPlanInput): WebhookPlan {
  const managed = existing?.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY;
  const remove = (): WebhookPlan =>
    existing !== undefined && managed && existing.metadata?.name !== undefined
      ? { action: 'delete', name: existing.metadata.name }
      : { action: 'keep' };

  // Owner references delete it too, but only once the garbage collector gets there.
  if (policy === undefined) return remove();
  if (intent.kind === 'absent') return remove();
  // A webhook of a deleted namesake Policy enforces rules nobody asked for.
  if (intent.kind === 'keep') {
    if (existing && servedGenerationOf(existing, policy) === undefined) return remove();
    return existing && managed && policyServer
      ? rebundle(existing, policyServer, options, ca)
      : { action: 'keep' };
  }
  if (policyServer === undefined) return { action: 'keep' };
  // A webhook without the right CA fails every TLS handshake, which under failurePolicy Fail
  // rejects every matching request. Write nothing instead.
  if ('blocked' in ca)
    return {
      action: 'blocked',
      reason: `${ca.blocked} The webhook of Policy ${policy.metadata.name} is left unchanged.`,
    };

  const desired = buildWebhookConfiguration(policy, policyServer, options, ca.caBundle);
  if (existing === undefined) return { action: 'create', webhook: desired };
  return isSubset(desired, existing) ? { action: 'keep' } : { action: 'update', webhook: desired };
}

interface ExistingEntry {
  clientConfig?: { caBundle?: string; service?: { name?: string; namespace?: string } };
}

/**
 * A kept webhook with the server's new CA bundle, everything else as it is (the older
 * generation's rules stay). Only when it calls this server's Service: a Policy moved to
 * another server in a generation not served yet keeps the old server and its old CA.
 */
function rebundle(
  existing: ExistingWebhook,
  server: PolicyServer,
  options: WebhookOptions,
  ca: WebhookCa,
): WebhookPlan {
  if ('blocked' in ca || ca.caBundle === undefined || options.url !== undefined)
    return { action: 'keep' };
  const entries = (Array.isArray(existing.webhooks) ? existing.webhooks : []) as ExistingEntry[];
  const service = policyServerResourceName(server.metadata.name);
  const ours = entries.every(
    (e) =>
      e.clientConfig?.service?.name === service &&
      e.clientConfig.service.namespace === options.namespace,
  );
  if (
    entries.length === 0 ||
    !ours ||
    entries.every((e) => e.clientConfig?.caBundle === ca.caBundle)
  )
    return { action: 'keep' };
  const meta = existing.metadata ?? {};
  const served = meta.annotations?.[SERVED_GENERATION_ANNOTATION];
  return {
    action: 'rebundle',
    webhook: {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: {
        name: meta.name,
        labels: {
          [MANAGED_BY_LABEL]: MANAGED_BY,
          ...(meta.labels?.[POLICY_LABEL] === undefined
            ? {}
            : { [POLICY_LABEL]: meta.labels[POLICY_LABEL] }),
        },
        ...(served === undefined
          ? {}
          : { annotations: { [SERVED_GENERATION_ANNOTATION]: served } }),
        ownerReferences: meta.ownerReferences,
      },
      webhooks: entries.map((e) => ({
        ...e,
        clientConfig: { ...e.clientConfig, caBundle: ca.caBundle },
      })) as V1ValidatingWebhookConfiguration['webhooks'],
    },
  };
}

/**
 * True when every field of `desired` has the same value in `actual`; extra fields in
 * `actual` (set by the API server or other managers) are ignored, but lists must
 * match in length and order.
 */
export function isSubset(desired: unknown, actual: unknown): boolean {
  if (desired === undefined) return true;
  if (Array.isArray(desired)) {
    return (
      Array.isArray(actual) &&
      desired.length === actual.length &&
      desired.every((item, index) => isSubset(item, actual[index]))
    );
  }
  if (typeof desired === 'object' && desired !== null) {
    if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return false;
    const fields = actual as Record<string, unknown>;
    return Object.entries(desired).every(([key, value]) => isSubset(value, fields[key]));
  }
  return Object.is(desired, actual);
}
