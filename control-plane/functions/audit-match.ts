// Which existing objects a Policy's audit judges, as admission would pick the requests it sees:
// its rules (a CREATE of the resource), its namespaceSelector and objectSelector, and the
// namespaces every webhook excludes. Pure; the watcher uses it to pick what to watch, the
// audit core to pick the pairs to judge. matchConditions are the policy server's (it judges
// a pair they exclude as `skip`).
import { actionsOf, type LabelSelector, type Policy, type Rule } from '../../api/v1alpha1.ts';
import { groupVersionPath } from '../../lib/kube/api.ts';
import { selects } from '../../lib/kube/label-selector.ts';
import { GROUP } from '../../api/constants.ts';
import { OPENREPORTS_GROUP } from '../../api/audit.ts';
import { GUARDED_RESOURCES, ruleIntercepts } from './webhook-core.ts';

/** A resource the audit watches, at the version the apiserver prefers (from discovery). */
export interface AuditedResource {
  group: string;
  version: string;
  resource: string;
  kind: string;
  namespaced: boolean;
}

/** `apps/v1/deployments`, `/v1/configmaps` (the core group is empty). */
export function resourceId(r: Pick<AuditedResource, 'group' | 'version' | 'resource'>): string {
  return `${r.group}/${r.version}/${r.resource}`;
}

/** The collection path of a resource, in `namespace` when given. */
export function collectionPath(r: AuditedResource, namespace: string | undefined): string {
  const base = groupVersionPath(apiVersionOf(r));
  return namespace === undefined
    ? `${base}/${r.resource}`
    : `${base}/namespaces/${namespace}/${r.resource}`;
}

/** The apiVersion of a resource's objects (`v1`, `apps/v1`). */
export function apiVersionOf(r: Pick<AuditedResource, 'group' | 'version'>): string {
  return r.group === '' ? r.version : `${r.group}/${r.version}`;
}

/**
 * Never audited, whatever a rule says: what webhooks may not intercept, Events (they are
 * records, not state), and the reports and rollcall objects themselves (judging the audit's
 * own output would feed it back into itself).
 */
export function isAuditable(r: Pick<AuditedResource, 'group' | 'resource'>): boolean {
  if (r.group === GROUP || r.group === OPENREPORTS_GROUP) return false;
  if (r.resource === 'events' && (r.group === '' || r.group === 'events.k8s.io')) return false;
  return !GUARDED_RESOURCES.some((g) => g.group === r.group && g.resource === r.resource);
}

/**
 * Whether `rule` would see a CREATE of `r`'s objects. Versions are not compared: webhooks
 * match equivalent versions of a resource (matchPolicy Equivalent), and the audit reads each
 * resource at one version.
 */
export function ruleAudits(rule: Rule, r: AuditedResource): boolean {
  if (!rule.operations.some((op) => op === '*' || op === 'CREATE')) return false;
  if (rule.scope === 'Namespaced' && !r.namespaced) return false;
  if (rule.scope === 'Cluster' && r.namespaced) return false;
  return ruleIntercepts(rule, { group: r.group, resource: r.resource });
}

/** The fields of a Policy the audit reads, for the version of it that is served. */
export interface AuditedPolicy {
  name: string;
  uid: string;
  /** The served generation: the results are that generation's. */
  generation: number;
  policyServer: string;
  actions: string[];
  rules: Rule[];
  namespaceSelector?: LabelSelector;
  objectSelector?: LabelSelector;
}

/**
 * The Policy as audited, or undefined while it has nothing to audit with: its current
 * generation is not the one its webhook serves yet (the results keep the last audited one),
 * or its code is a simulator module (`sim://`: the simulator judges no existing objects).
 */
export function auditedPolicy(policy: Policy): AuditedPolicy | undefined {
  const { metadata, spec, status } = policy;
  const served = status?.servedGeneration;
  if (served === undefined || served !== metadata?.generation || spec?.module !== undefined)
    return undefined;
  if (!Array.isArray(spec.rules) || typeof spec.policyServer !== 'string') return undefined;
  return {
    name: metadata.name,
    uid: metadata.uid ?? '',
    generation: served,
    policyServer: spec.policyServer,
    actions: actionsOf(spec),
    rules: spec.rules,
    ...(spec.namespaceSelector && { namespaceSelector: spec.namespaceSelector }),
    ...(spec.objectSelector && { objectSelector: spec.objectSelector }),
  };
}

/** Namespaces themselves (core group). */
export const isNamespaces = (r: Pick<AuditedResource, 'group' | 'resource'>): boolean =>
  r.group === '' && r.resource === 'namespaces';

/** Whether the Policy judges an object of `r` with `labels`, in a namespace with `namespaceLabels`. */
export function judges(
  policy: AuditedPolicy,
  r: AuditedResource,
  labels: Readonly<Record<string, string>> | undefined,
  namespaceLabels: Readonly<Record<string, string>> | undefined,
): boolean {
  if (!policy.rules.some((rule) => ruleAudits(rule, r))) return false;
  // As admission does: a namespaceSelector looks at a namespaced object's namespace, at a
  // Namespace's own labels, and never skips another cluster-scoped object.
  const scope = r.namespaced ? namespaceLabels : isNamespaces(r) ? labels : undefined;
  if ((r.namespaced || isNamespaces(r)) && !selects(policy.namespaceSelector, scope)) return false;
  return selects(policy.objectSelector, labels);
}
