/**
 * Which resource a kind is requested as. The apiserver knows it from discovery; offline the
 * authoring commands know the common kinds from this table, the kinds a suite declares
 * (`kinds:` in rollcall-test.yaml, `--resource` for eval), and otherwise guess as
 * client-go's `meta.UnsafeGuessKindToResource` does (lowercase, plural), saying so.
 */

export type Scope = 'Namespaced' | 'Cluster';

/** A kind's resource: `{group, resource, scope}`; the version is the object's. */
export interface KindResource {
  group: string;
  kind: string;
  resource: string;
  scope: Scope;
}

const row = (group: string, kind: string, resource: string, scope: Scope = 'Namespaced') => ({
  group,
  kind,
  resource,
  scope,
});

/** The built-in kinds policies are usually written for, plus rollcall's own. */
export const KNOWN_KINDS: readonly KindResource[] = [
  row('', 'Pod', 'pods'),
  row('', 'ConfigMap', 'configmaps'),
  row('', 'Secret', 'secrets'),
  row('', 'Service', 'services'),
  row('', 'ServiceAccount', 'serviceaccounts'),
  row('', 'Endpoints', 'endpoints'),
  row('', 'Event', 'events'),
  row('', 'PersistentVolumeClaim', 'persistentvolumeclaims'),
  row('', 'ReplicationController', 'replicationcontrollers'),
  row('', 'ResourceQuota', 'resourcequotas'),
  row('', 'LimitRange', 'limitranges'),
  row('', 'PodTemplate', 'podtemplates'),
  row('', 'Namespace', 'namespaces', 'Cluster'),
  row('', 'Node', 'nodes', 'Cluster'),
  row('', 'PersistentVolume', 'persistentvolumes', 'Cluster'),
  row('apps', 'Deployment', 'deployments'),
  row('apps', 'ReplicaSet', 'replicasets'),
  row('apps', 'StatefulSet', 'statefulsets'),
  row('apps', 'DaemonSet', 'daemonsets'),
  row('apps', 'ControllerRevision', 'controllerrevisions'),
  row('batch', 'Job', 'jobs'),
  row('batch', 'CronJob', 'cronjobs'),
  row('autoscaling', 'HorizontalPodAutoscaler', 'horizontalpodautoscalers'),
  row('policy', 'PodDisruptionBudget', 'poddisruptionbudgets'),
  row('networking.k8s.io', 'Ingress', 'ingresses'),
  row('networking.k8s.io', 'NetworkPolicy', 'networkpolicies'),
  row('networking.k8s.io', 'IngressClass', 'ingressclasses', 'Cluster'),
  row('discovery.k8s.io', 'EndpointSlice', 'endpointslices'),
  row('coordination.k8s.io', 'Lease', 'leases'),
  row('rbac.authorization.k8s.io', 'Role', 'roles'),
  row('rbac.authorization.k8s.io', 'RoleBinding', 'rolebindings'),
  row('rbac.authorization.k8s.io', 'ClusterRole', 'clusterroles', 'Cluster'),
  row('rbac.authorization.k8s.io', 'ClusterRoleBinding', 'clusterrolebindings', 'Cluster'),
  row('storage.k8s.io', 'StorageClass', 'storageclasses', 'Cluster'),
  row('scheduling.k8s.io', 'PriorityClass', 'priorityclasses', 'Cluster'),
  row('apiextensions.k8s.io', 'CustomResourceDefinition', 'customresourcedefinitions', 'Cluster'),
  row(
    'admissionregistration.k8s.io',
    'ValidatingWebhookConfiguration',
    'validatingwebhookconfigurations',
    'Cluster',
  ),
  row(
    'admissionregistration.k8s.io',
    'MutatingWebhookConfiguration',
    'mutatingwebhookconfigurations',
    'Cluster',
  ),
  row('gateway.networking.k8s.io', 'Gateway', 'gateways'),
  row('gateway.networking.k8s.io', 'HTTPRoute', 'httproutes'),
  row('rollcall.dev', 'Policy', 'policies', 'Cluster'),
  row('rollcall.dev', 'PolicyServer', 'policyservers', 'Cluster'),
  row('rollcall.dev', 'PolicyRevision', 'policyrevisions', 'Cluster'),
];

/** `apps/v1` → {group: apps, version: v1}; `v1` → {group: '', version: v1}. */
export function splitApiVersion(apiVersion: string): { group: string; version: string } {
  const slash = apiVersion.lastIndexOf('/');
  return slash < 0
    ? { group: '', version: apiVersion }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1) };
}

/** client-go's UnsafeGuessKindToResource: `Widget` → widgets, `Policy` → policies, `Class` → classes. */
export function guessResource(kind: string): string {
  const singular = kind.toLowerCase();
  if (singular.endsWith('endpoints')) return singular;
  if (singular.endsWith('s')) return `${singular}es`;
  if (singular.endsWith('y')) return `${singular.slice(0, -1)}ies`;
  return `${singular}s`;
}

export type ResolvedKind = KindResource & {
  /** How the resource was found: the table, a declaration, or a guess. */
  from: 'table' | 'declared' | 'guessed';
};

/**
 * The resource of `kind` in `group`: a declared kind first (a suite may correct the table),
 * then the table, then a guess (scope from whether the object has a namespace).
 */
export function resolveKind(
  group: string,
  kind: string,
  hasNamespace: boolean,
  declared: readonly KindResource[] = [],
): ResolvedKind {
  const same = (k: KindResource) => k.group === group && k.kind === kind;
  const mine = declared.find(same);
  if (mine) return { ...mine, from: 'declared' };
  const known = KNOWN_KINDS.find(same);
  if (known) return { ...known, from: 'table' };
  return {
    group,
    kind,
    resource: guessResource(kind),
    scope: hasNamespace ? 'Namespaced' : 'Cluster',
    from: 'guessed',
  };
}
