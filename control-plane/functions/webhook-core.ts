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
 * its server's CA bundle and the excluded namespaces (action `refresh`: only
 * clientConfig.caBundle and rollcall's last namespaceSelector expression change), so a CA
 * rotation or a newly protected namespace never waits for a policy to become Ready again.
 *
 * The service path pins the served generation (`/validate/<policy>/<generation>`), so every
 * policy-server replica answers with exactly the generation the webhook enforces, and the
 * webhook function records that generation as a PolicyRevision before it writes the webhook
 * (revision-core.ts), so a replica started later can still load it.
 *
 * A policy whose validationActions lack Deny (Warn, Audit, or the deprecated `mode: monitor`)
 * registers the same webhook, but always with failurePolicy Ignore: a policy that may not deny
 * must not deny through an unreachable server either (`webhookFailurePolicy`). Its own
 * failurePolicy still decides what an evaluation error is, in the policy server.
 *
 * Guards for the cluster itself: every webhook excludes rollcall's own namespace and the
 * protected namespaces (kube-system and kube-node-lease unless the worker is told otherwise),
 * so no policy can lock the control plane out of the cluster; and no webhook intercepts the
 * guarded resources (`GUARDED_RESOURCES`: Nodes, Leases, token and access reviews, rollcall's
 * own kinds). The policy core refuses a Policy whose rules would (Stalled
 * InterceptsClusterCriticalResources); `planWebhook` never writes one either. A webhook an
 * older rollcall wrote over guarded resources and kept for a not-Ready Policy stays as it is
 * (deleting it would silently stop enforcing a policy that worked); the Policy is Stalled and
 * says which generation is still enforced.
 */
import type {
  V1LabelSelector,
  V1ValidatingWebhookConfiguration,
  AdmissionregistrationV1WebhookClientConfig,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  DEFAULT_PROTECTED_NAMESPACES,
  GROUP,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  POLICY_LABEL,
  SERVED_GENERATION_ANNOTATION,
  webhookConfigurationName,
} from '../../api/constants.ts';
import type { ExistingWebhook } from '../../api/kube.ts';
import {
  actionsOf,
  type LabelSelector,
  type Policy,
  type PolicyServer,
  type PolicySpec,
  type Rule,
} from '../../api/v1alpha1.ts';
import { webhookPath } from '../../api/webhook-path.ts';
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
   * The other namespaces every webhook excludes (the worker's `--protected-namespaces`);
   * default DEFAULT_PROTECTED_NAMESPACES (kube-system, kube-node-lease).
   */
  protectedNamespaces?: readonly string[];
  /**
   * Out-of-cluster development: the API server calls `${url}/validate/<policy>/<generation>`
   * (e.g. `https://host.docker.internal:8443`) instead of the in-cluster Service.
   */
  url?: string;
}

/**
 * The CA bundle the API server trusts for a server's webhooks, as the shell resolved it
 * (control-plane/functions/webhook-ca.ts, or `--webhook-ca-file` in URL mode): a base64 PEM bundle, none
 * (the API server's own trust roots), or why it cannot be had yet.
 */
export type WebhookCa = { caBundle?: string } | { blocked: string };

export type WebhookPlan =
  | { action: 'create'; webhook: V1ValidatingWebhookConfiguration }
  | { action: 'update'; webhook: V1ValidatingWebhookConfiguration }
  | { action: 'keep' }
  /**
   * Intent `keep`, but the server's CA bundle or the excluded namespaces changed: the same
   * webhook (rules, path, served generation), with the new caBundle and exclusion.
   */
  | { action: 'refresh'; webhook: V1ValidatingWebhookConfiguration }
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

/**
 * The namespaces every webhook excludes: rollcall's own first (always, whatever is configured),
 * then the protected ones, each once.
 */
export function excludedNamespaces(options: WebhookOptions): string[] {
  return [
    ...new Set([
      options.namespace,
      ...(options.protectedNamespaces ?? DEFAULT_PROTECTED_NAMESPACES),
    ]),
  ];
}

/**
 * The policy's namespaceSelector, ANDed with "none of `namespaces`" (always the last
 * expression, which is how a kept webhook's exclusion is found again).
 */
export function namespaceSelectorExcluding(
  selector: LabelSelector | undefined,
  namespaces: readonly string[],
): V1LabelSelector {
  return {
    ...(selector?.matchLabels === undefined ? {} : { matchLabels: selector.matchLabels }),
    matchExpressions: [
      ...(selector?.matchExpressions ?? []),
      { key: NAMESPACE_NAME_LABEL, operator: 'NotIn', values: [...namespaces] },
    ],
  };
}

/** A resource as admission rules name it: `resource` or `resource/subresource`, in `group`. */
export interface GuardedResource {
  group: string;
  resource: string;
}

/**
 * What no webhook of rollcall's may intercept, whatever its failurePolicy: what keeps nodes and
 * the control plane alive (a Node's status and its heartbeat Lease, every controller's
 * leader-election Lease, the token and access reviews authentication and authorization make)
 * and rollcall's own kinds (a webhook failing on them would stop you fixing the very Policy
 * that fails, and stop rollcall recording the revision of a fixed one). Webhook
 * configurations and admission policies need no entry: the apiserver never sends them to
 * webhooks.
 */
export const GUARDED_RESOURCES: readonly GuardedResource[] = [
  { group: '', resource: 'nodes' },
  { group: '', resource: 'nodes/status' },
  { group: 'coordination.k8s.io', resource: 'leases' },
  { group: 'authentication.k8s.io', resource: 'tokenreviews' },
  { group: 'authentication.k8s.io', resource: 'selfsubjectreviews' },
  { group: 'authorization.k8s.io', resource: 'subjectaccessreviews' },
  { group: 'authorization.k8s.io', resource: 'selfsubjectaccessreviews' },
  { group: 'authorization.k8s.io', resource: 'localsubjectaccessreviews' },
  { group: 'authorization.k8s.io', resource: 'selfsubjectrulesreviews' },
  { group: GROUP, resource: 'policies' },
  { group: GROUP, resource: 'policies/status' },
  { group: GROUP, resource: 'policyservers' },
  { group: GROUP, resource: 'policyservers/status' },
  { group: GROUP, resource: 'policyrevisions' },
];

/** `pods/status` → [pods, status]; `pods` → [pods, ''] (the apiserver's splitResource). */
function splitResource(resource: string): [string, string] {
  const slash = resource.indexOf('/');
  return slash < 0 ? [resource, ''] : [resource.slice(0, slash), resource.slice(slash + 1)];
}

/**
 * Whether `rule` matches requests for `target`, as the apiserver matches webhook rules: a group
 * of `apiGroups` or `*`; a resource pattern `*` (every resource, no subresource), `*` + `/*`
 * (everything), `nodes/*` (nodes and every subresource), `*` + `/status` (every status) or the
 * name. Operations, versions and scope are not looked at: a rule over a guarded resource is
 * refused whatever it does with it.
 */
export function ruleIntercepts(rule: Rule, target: GuardedResource): boolean {
  if (!rule.apiGroups.some((group) => group === '*' || group === target.group)) return false;
  const [resource, subresource] = splitResource(target.resource);
  return rule.resources.some((pattern) => {
    const [patternResource, patternSub] = splitResource(pattern);
    return (
      (patternResource === '*' || patternResource === resource) &&
      (patternSub === '*' || patternSub === subresource)
    );
  });
}

/** One rule of a Policy that would intercept guarded resources, by index. */
export interface Interception {
  rule: number;
  resources: GuardedResource[];
}

/** The rules that would intercept guarded resources, and which; empty: none does. */
export function guardedResourcesInterceptedBy(rules: readonly Rule[]): Interception[] {
  return rules.flatMap((rule, index) => {
    const resources = GUARDED_RESOURCES.filter((target) => ruleIntercepts(rule, target));
    return resources.length === 0 ? [] : [{ rule: index, resources }];
  });
}

/** `nodes, nodes/status (core); leases (coordination.k8s.io)`: by API group, in table order. */
function describeResources(resources: readonly GuardedResource[]): string {
  const byGroup = new Map<string, string[]>();
  for (const { group, resource } of resources)
    byGroup.set(group, [...(byGroup.get(group) ?? []), resource]);
  return [...byGroup]
    .map(([group, names]) => `${names.join(', ')} (${group === '' ? 'core' : group})`)
    .join('; ');
}

/**
 * Why a Policy is refused, for its Stalled condition: each rule by its field path, with the
 * patterns that reach the guarded resources, and what to do instead.
 */
export function interceptionMessage(
  rules: readonly Rule[],
  interceptions: readonly Interception[],
): string {
  const each = interceptions.map(({ rule, resources }) => {
    const { apiGroups = [], resources: patterns = [] } = rules[rule] ?? {};
    return `spec.rules[${rule}] (apiGroups ${JSON.stringify(apiGroups)}, resources ${JSON.stringify(patterns)}) would intercept ${describeResources(resources)}`;
  });
  return (
    `${each.join('; ')}: rollcall registers no webhook over what keeps nodes and the control plane alive ` +
    `or over its own kinds, where a failing policy server could take the cluster down or lock you out of fixing the policy; ` +
    `list the resources you mean explicitly, leaving these out`
  );
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
 * What the apiserver does when the policy server cannot answer: the policy's failurePolicy when
 * it may deny (Deny among its actions), otherwise Ignore.
 */
export function webhookFailurePolicy(
  spec: Pick<PolicySpec, 'failurePolicy' | 'mode' | 'validationActions'>,
): 'Fail' | 'Ignore' {
  return actionsOf(spec).includes('Deny') ? spec.failurePolicy : 'Ignore';
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
        failurePolicy: webhookFailurePolicy(spec),
        matchPolicy: 'Equivalent',
        timeoutSeconds: spec.timeoutSeconds,
        rules: spec.rules.map((rule) => ({
          operations: [...rule.operations],
          apiGroups: [...rule.apiGroups],
          apiVersions: [...rule.apiVersions],
          resources: [...rule.resources],
          scope: rule.scope,
        })),
        namespaceSelector: namespaceSelectorExcluding(
          spec.namespaceSelector,
          excludedNamespaces(options),
        ),
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
    return existing && managed ? refresh(existing, policyServer, options, ca) : { action: 'keep' };
  }
  if (policyServer === undefined) return { action: 'keep' };
  // The policy core never asks to serve such rules (it stalls the Policy); this is the last
  // line, in the one place that writes webhooks.
  if (guardedResourcesInterceptedBy(policy.spec.rules).length > 0) return { action: 'keep' };
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
  namespaceSelector?: V1LabelSelector;
}

/** The CA bundle a kept webhook should trust, or undefined to leave its own. */
function keptCaBundle(
  entries: readonly ExistingEntry[],
  server: PolicyServer | undefined,
  options: WebhookOptions,
  ca: WebhookCa,
): string | undefined {
  if (server === undefined || 'blocked' in ca || options.url !== undefined) return undefined;
  const service = policyServerResourceName(server.metadata.name);
  const ours = entries.every(
    (e) =>
      e.clientConfig?.service?.name === service &&
      e.clientConfig.service.namespace === options.namespace,
  );
  return ours ? ca.caBundle : undefined;
}

/**
 * `selector` with its exclusion (rollcall's last expression, `NotIn` on the namespace name)
 * excluding `namespaces`, or undefined when it already does.
 */
function withExclusion(
  selector: V1LabelSelector | undefined,
  namespaces: readonly string[],
): V1LabelSelector | undefined {
  const expressions = selector?.matchExpressions ?? [];
  const last = expressions.at(-1);
  const isExclusion = last?.key === NAMESPACE_NAME_LABEL && last.operator === 'NotIn';
  if (isExclusion && isSubset([...namespaces], last.values ?? [])) return undefined;
  return {
    ...selector,
    matchExpressions: [
      ...(isExclusion ? expressions.slice(0, -1) : expressions),
      { key: NAMESPACE_NAME_LABEL, operator: 'NotIn', values: [...namespaces] },
    ],
  };
}

/**
 * A kept webhook with the server's new CA bundle and the current excluded namespaces,
 * everything else as it is (the older generation's rules stay). The CA only when it calls this
 * server's Service: a Policy moved to another server in a generation not served yet keeps the
 * old server and its old CA.
 */
function refresh(
  existing: ExistingWebhook,
  server: PolicyServer | undefined,
  options: WebhookOptions,
  ca: WebhookCa,
): WebhookPlan {
  const entries = (Array.isArray(existing.webhooks) ? existing.webhooks : []) as ExistingEntry[];
  if (entries.length === 0) return { action: 'keep' };
  const caBundle = keptCaBundle(entries, server, options, ca);
  const excluded = excludedNamespaces(options);
  let changed = false;
  const refreshed = entries.map((e) => {
    const namespaceSelector = withExclusion(e.namespaceSelector, excluded);
    const newCa = caBundle !== undefined && e.clientConfig?.caBundle !== caBundle;
    if (namespaceSelector === undefined && !newCa) return e;
    changed = true;
    return {
      ...e,
      ...(newCa ? { clientConfig: { ...e.clientConfig, caBundle } } : {}),
      ...(namespaceSelector === undefined ? {} : { namespaceSelector }),
    };
  });
  if (!changed) return { action: 'keep' };
  const meta = existing.metadata ?? {};
  const served = meta.annotations?.[SERVED_GENERATION_ANNOTATION];
  return {
    action: 'refresh',
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
      webhooks: refreshed as V1ValidatingWebhookConfiguration['webhooks'],
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
