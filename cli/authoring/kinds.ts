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

/**
 * The built-in kinds policies are usually written for, plus rollcall's own: a line a kind
 * (kind, resource, scope) under its API group's name (`core` is the group '').
 */
const TABLE = `
core
  Pod                             pods                             Namespaced
  ConfigMap                       configmaps                       Namespaced
  Secret                          secrets                          Namespaced
  Service                         services                         Namespaced
  ServiceAccount                  serviceaccounts                  Namespaced
  Endpoints                       endpoints                        Namespaced
  Event                           events                           Namespaced
  PersistentVolumeClaim           persistentvolumeclaims           Namespaced
  ReplicationController           replicationcontrollers           Namespaced
  ResourceQuota                   resourcequotas                   Namespaced
  LimitRange                      limitranges                      Namespaced
  PodTemplate                     podtemplates                     Namespaced
  Namespace                       namespaces                       Cluster
  Node                            nodes                            Cluster
  PersistentVolume                persistentvolumes                Cluster
apps
  Deployment                      deployments                      Namespaced
  ReplicaSet                      replicasets                      Namespaced
  StatefulSet                     statefulsets                     Namespaced
  DaemonSet                       daemonsets                       Namespaced
  ControllerRevision              controllerrevisions              Namespaced
batch
  Job                             jobs                             Namespaced
  CronJob                         cronjobs                         Namespaced
autoscaling
  HorizontalPodAutoscaler         horizontalpodautoscalers         Namespaced
policy
  PodDisruptionBudget             poddisruptionbudgets             Namespaced
networking.k8s.io
  Ingress                         ingresses                        Namespaced
  NetworkPolicy                   networkpolicies                  Namespaced
  IngressClass                    ingressclasses                   Cluster
discovery.k8s.io
  EndpointSlice                   endpointslices                   Namespaced
coordination.k8s.io
  Lease                           leases                           Namespaced
rbac.authorization.k8s.io
  Role                            roles                            Namespaced
  RoleBinding                     rolebindings                     Namespaced
  ClusterRole                     clusterroles                     Cluster
  ClusterRoleBinding              clusterrolebindings              Cluster
storage.k8s.io
  StorageClass                    storageclasses                   Cluster
scheduling.k8s.io
  PriorityClass                   priorityclasses                  Cluster
apiextensions.k8s.io
  CustomResourceDefinition        customresourcedefinitions        Cluster
admissionregistration.k8s.io
  ValidatingWebhookConfiguration  validatingwebhookconfigurations  Cluster
  MutatingWebhookConfiguration    mutatingwebhookconfigurations    Cluster
gateway.networking.k8s.io
  Gateway                         gateways                         Namespaced
  HTTPRoute                       httproutes                       Namespaced
rollcall.dev
  Policy                          policies                         Cluster
  PolicyServer                    policyservers                    Cluster
  PolicyRevision                  policyrevisions                  Cluster
`;

export const KNOWN_KINDS: readonly KindResource[] = parseTable(TABLE);

function parseTable(text: string): KindResource[] {
  const kinds: KindResource[] = [];
  let group = '';
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    if (!line.startsWith(' ')) {
      group = line === 'core' ? '' : line;
      continue;
    }
    const [kind = '', resource = '', scope] = line.trim().split(/\s+/);
    kinds.push({ group, kind, resource, scope: scope === 'Cluster' ? 'Cluster' : 'Namespaced' });
  }
  return kinds;
}

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
