// Helpers for the deploy tests: build deploy/ with the cluster's own kubectl (kustomize is
// built in), render charts/rollcall with helm (built from its module, cached), and apply or
// remove parts of them on the test cluster.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { ensureHelm } from '../../../tooling/cluster/build.ts';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { testCluster } from '../../support/kube.ts';

export const deployDir = join(repoRoot, 'deploy');
export const chartDir = join(repoRoot, 'charts', 'rollcall');
export const NAMESPACE = 'rollcall-system';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  [field: string]: unknown;
}

export interface CommandResult {
  status: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the test cluster's kubectl, as admin unless given another kubeconfig (kubeconfigFor);
 * never throws (callers assert on the result).
 */
export function kubectlRun(
  args: string[],
  input?: string,
  kubeconfig = testCluster().kubeconfig,
): CommandResult {
  const out = spawnSync(
    testCluster().binaries.kube,
    ['kubectl', `--kubeconfig=${kubeconfig}`, ...args],
    { input, encoding: 'utf8' },
  );
  return {
    status: out.status ?? -1,
    stdout: out.stdout ?? '',
    stderr: out.stderr ?? out.error?.message ?? '',
  };
}

export function kubectlOk(args: string[], input?: string): string {
  const out = kubectlRun(args, input);
  if (out.status !== 0)
    throw new Error(`kubectl ${args.join(' ')} failed (${out.status}): ${out.stderr}`);
  return out.stdout;
}

export const parseManifests = (text: string) =>
  parseAllDocuments(text)
    .map((doc) => doc.toJS() as Manifest)
    .filter((m) => m !== null);

/** `kubectl kustomize DIR`, parsed. */
export function build(dir = deployDir): Manifest[] {
  return parseManifests(kubectlOk(['kustomize', dir]));
}

let helm: Promise<string> | undefined;

/** Runs helm (built on first use); never throws (callers assert on the result). */
export async function helmRun(args: string[]): Promise<CommandResult> {
  helm ??= ensureHelm((line) => console.log(`# ${line}`));
  const out = spawnSync(await helm, args, { encoding: 'utf8' });
  return { status: out.status ?? -1, stdout: out.stdout ?? '', stderr: out.stderr ?? '' };
}

/**
 * `helm template rollcall charts/rollcall --namespace rollcall-system --include-crds <args>`,
 * parsed: what `helm install rollcall charts/rollcall -n rollcall-system` would create.
 */
export async function renderChart(args: string[] = []): Promise<Manifest[]> {
  const out = await helmRun([
    'template',
    'rollcall',
    chartDir,
    '--namespace',
    NAMESPACE,
    '--include-crds',
    ...args,
  ]);
  if (out.status !== 0) throw new Error(`helm template failed (${out.status}): ${out.stderr}`);
  return parseManifests(out.stdout);
}

export const toYaml = (manifests: Manifest[]) =>
  manifests.map((m) => JSON.stringify(m)).join('\n---\n');

/** What the RBAC tests apply for real: the namespace, the CRDs and the accounts with their roles. */
export const RBAC_KINDS = new Set([
  'Namespace',
  'CustomResourceDefinition',
  'ServiceAccount',
  'Role',
  'RoleBinding',
  'ClusterRole',
  'ClusterRoleBinding',
]);

/** deploy/guard-identities.yaml's ValidatingAdmissionPolicies, each with a binding of its name. */
export const IDENTITY_GUARDS = [
  'rollcall-policy-server-own-pod',
  'rollcall-worker-own-webhooks',
  'rollcall-worker-own-reports',
];
export const isIdentityGuard = (m: Manifest) =>
  m.kind.startsWith('ValidatingAdmissionPolicy') && IDENTITY_GUARDS.includes(m.metadata.name);

/** What inNamespace renames: cluster-scoped objects that are rollcall's own, and references to them. */
const CLUSTER_SCOPED = new Set([
  'ClusterRole',
  'ClusterRoleBinding',
  'ValidatingAdmissionPolicy',
  'ValidatingAdmissionPolicyBinding',
]);

/**
 * `manifests` (of deploy/ or the chart, for rollcall-system) for rollcall installed in
 * `namespace`: every mention of rollcall-system becomes `namespace` (the guards' account names
 * and Service namespace too), and the names of cluster-scoped objects (roles, guards) and of
 * objects in other namespaces (the events Role in `default`) get `-<namespace>`, as do the
 * references to them, so that two installs do not overwrite each other. Namespaces and CRDs
 * are left out. E.g. the guards for a test namespace:
 * `inNamespace(build().filter(isIdentityGuard), ns)`.
 */
export function inNamespace(manifests: Manifest[], namespace: string): Manifest[] {
  const moved = manifests.filter(
    (m) => m.kind !== 'Namespace' && m.kind !== 'CustomResourceDefinition',
  );
  if (namespace === NAMESPACE) return moved;
  const rename = (name: string) => `${name}-${namespace}`;
  return moved.map((m) => {
    const copy = JSON.parse(JSON.stringify(m).replaceAll(NAMESPACE, namespace)) as Manifest & {
      roleRef?: { kind: string; name: string };
      spec?: { policyName?: string };
    };
    const outside = (ns: string | undefined) => ns !== undefined && ns !== namespace;
    if (CLUSTER_SCOPED.has(m.kind) || outside(copy.metadata.namespace))
      copy.metadata.name = rename(copy.metadata.name);
    if (
      copy.roleRef !== undefined &&
      (copy.roleRef.kind === 'ClusterRole' || outside(copy.metadata.namespace))
    )
      copy.roleRef.name = rename(copy.roleRef.name);
    if (copy.spec?.policyName !== undefined) copy.spec.policyName = rename(copy.spec.policyName);
    return copy;
  });
}

/** The pod a token is bound to (`kubectl create token --bound-object-kind Pod`). */
export interface BoundPod {
  name: string;
  uid: string;
}

/**
 * A kubeconfig file in `dir` for the test cluster whose user is the ServiceAccount, by a fresh
 * token from the TokenRequest API (`kubectl create token`); bound to `pod` when given, as a
 * pod's projected token is.
 */
export function kubeconfigFor(
  account: string,
  dir: string,
  { namespace = NAMESPACE, pod }: { namespace?: string; pod?: BoundPod } = {},
): string {
  const bound =
    pod === undefined
      ? []
      : [
          '--bound-object-kind=Pod',
          `--bound-object-name=${pod.name}`,
          `--bound-object-uid=${pod.uid}`,
        ];
  const token = kubectlOk([
    'create',
    'token',
    account,
    '-n',
    namespace,
    '--duration=1h',
    ...bound,
  ]).trim();
  const admin = parse(readFileSync(testCluster().kubeconfig, 'utf8')) as {
    clusters: { name: string }[];
    contexts: { context: { cluster: string } }[];
  };
  const cluster = admin.contexts[0]!.context.cluster;
  const user = pod === undefined ? account : `${account}@${pod.name}`;
  const file = join(dir, `${user}.kubeconfig`);
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: admin.clusters.filter((c) => c.name === cluster),
      users: [{ name: user, user: { token } }],
      contexts: [{ name: user, context: { cluster, user, namespace } }],
      'current-context': user,
    }),
    { mode: 0o600 },
  );
  return file;
}

/** True if the namespace exists (and is not being deleted). */
export function namespaceExists(name = NAMESPACE): boolean {
  const out = kubectlRun(['get', 'namespace', name, '-o', 'jsonpath={.status.phase}']);
  return out.status === 0 && out.stdout === 'Active';
}

/** Deletes the namespace and waits until it is gone, so the next test file can create it again. */
export function deleteNamespace(name = NAMESPACE): void {
  kubectlRun(['delete', 'namespace', name, '--ignore-not-found', '--wait=true', '--timeout=60s']);
}

/** Waits for a namespace left terminating by an earlier run, then creates it. */
export function createNamespace(name = NAMESPACE): void {
  kubectlRun(['wait', '--for=delete', `namespace/${name}`, '--timeout=60s']);
  kubectlOk(['create', 'namespace', name]);
}

/**
 * For the surrounding suite: rollcall's namespace, created before it when absent and deleted
 * after it only then. A server-side dry run of a Namespace does not create it, so the
 * namespaced objects after it would fail with NotFound: the namespace must exist for real (as
 * it does after the first real install).
 */
export function withNamespaceForDryRuns(): void {
  let created = false;
  before(() => {
    if (!namespaceExists()) {
      createNamespace();
      created = true;
    }
  });
  after(() => {
    if (created) deleteNamespace();
  });
}
