// The RBAC in deploy/, and in charts/rollcall as `helm template` renders it, is enough and not
// more. Enough: the end-to-end scenario passes with the watcher and the worker running as
// separate processes under their ServiceAccounts' identities (bearer tokens minted by the
// TokenRequest API, as a pod would get) and with guard-identities.yaml's guards installed
// (guards.test.ts performs the attacks they stop), and the watcher may list and watch every kind the
// registry (control-plane/registry.ts) says it watches. Not more: a table of `kubectl auth
// can-i` checks, printed and asserted, and no wildcard anywhere but in rollcall-audit-reader,
// which only lists and watches (never get: on `*` a get reaches nodes/proxy, services/proxy,
// pods/log); its reads are checked as shipped (everything) and narrowed the documented way
// (deploy/: a kustomize patch, overlay-audit-narrow; the chart: audit.readableResources).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import {
  AdmissionregistrationV1Api,
  type KubernetesObject,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import type { Policy, PolicyServer } from '../../../api/v1alpha1.ts';
import { functions } from '../../../control-plane/functions/index.ts';
import { apiGroupOf, WATCHED_KINDS, watchedKinds } from '../../../control-plane/registry.ts';
import { testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import {
  deleteRollcallObjects,
  logDir,
  startRollcall,
  testDb,
  type RollcallProcess,
} from '../../support/rollcall.ts';
import {
  build,
  createNamespace,
  deleteNamespace,
  isIdentityGuard,
  kubeconfigFor,
  kubectlOk,
  kubectlRun,
  NAMESPACE,
  RBAC_KINDS,
  renderChart,
  toYaml,
  type Manifest,
} from './manifests.ts';

const kc = testKubeConfig();
const db = testDb();
const sa = (name: string) => `system:serviceaccount:${NAMESPACE}:${name}`;
/**
 * The accounts with their roles, and the guards of what RBAC cannot say (guard-identities.yaml),
 * so that the scenario also shows the worker's own webhook writes pass them.
 */
const rbacOf = (manifests: Manifest[]) =>
  manifests.filter((m) => RBAC_KINDS.has(m.kind) || isIdentityGuard(m));
const AUDIT_READER = 'rollcall-audit-reader';
/** The audit reader narrowed to ConfigMaps: the ClusterRole as each source renders it. */
const narrowedReader = (manifests: Manifest[]) => {
  const role = manifests.find((m) => m.kind === 'ClusterRole' && m.metadata.name === AUDIT_READER);
  assert.ok(role, `${AUDIT_READER} is rendered`);
  return role;
};
const sources: [string, Manifest[], Manifest][] = [
  [
    'deploy/',
    rbacOf(build()),
    narrowedReader(build(join(import.meta.dirname, 'overlay-audit-narrow'))),
  ],
  [
    'charts/rollcall',
    rbacOf(await renderChart()),
    narrowedReader(
      await renderChart([
        '--set-json',
        'audit.readableResources=[{"apiGroups":[""],"resources":["configmaps"]}]',
      ]),
    ),
  ],
];
const condition = (p: Policy | PolicyServer, type: string) =>
  p.status?.conditions?.find((c) => c.type === type);
const isCurrent = (p: Policy) => p.status?.observedGeneration === p.metadata.generation;
const apply = (...objects: object[]) =>
  kubectlOk(['apply', '-f', '-'], objects.map((o) => stringify(o)).join('---\n'));

// [account, verb, resource (kubectl form), namespace or '' for cluster scope, allowed]
type Check = [account: string, verb: string, resource: string, namespace: string, allowed: boolean];
const ns = NAMESPACE;
/** The watcher lists and watches every kind its functions declare (control-plane/registry.ts). */
const WATCHES: Check[] = watchedKinds(functions).flatMap((kind) => {
  const { resource, namespaced } = WATCHED_KINDS[kind];
  const group = apiGroupOf(kind);
  const target = group === '' ? resource : `${resource}.${group}`;
  return ['list', 'watch'].map((verb): Check => [
    'rollcall-watcher',
    verb,
    target,
    namespaced ? ns : '',
    true,
  ]);
});
const CHECKS: Check[] = [
  ...WATCHES,
  ['rollcall-watcher', 'create', 'leases.coordination.k8s.io', ns, true],
  ['rollcall-watcher', 'update', 'leases.coordination.k8s.io/rollcall-watcher', ns, true],
  ['rollcall-watcher', 'update', 'leases.coordination.k8s.io/someone-else', ns, false],
  ['rollcall-watcher', 'patch', 'policies.rollcall.dev/status', '', false],
  ['rollcall-watcher', 'patch', 'validatingwebhookconfigurations', '', false],
  ['rollcall-watcher', 'get', 'secrets', ns, false],
  ['rollcall-worker', 'patch', 'policies.rollcall.dev/status', '', true],
  ['rollcall-worker', 'patch', 'policyservers.rollcall.dev/status', '', true],
  ['rollcall-worker', 'patch', 'policies.rollcall.dev', '', false],
  ['rollcall-worker', 'delete', 'policies.rollcall.dev', '', false],
  ['rollcall-worker', 'create', 'validatingwebhookconfigurations', '', true],
  ['rollcall-worker', 'patch', 'validatingwebhookconfigurations', '', true],
  ['rollcall-worker', 'delete', 'validatingwebhookconfigurations', '', true],
  ['rollcall-worker', 'update', 'validatingwebhookconfigurations', '', false],
  ['rollcall-worker', 'get', 'validatingwebhookconfigurations', '', false],
  ['rollcall-worker', 'deletecollection', 'validatingwebhookconfigurations', '', false],
  ['rollcall-worker', 'patch', 'validatingadmissionpolicies', '', false],
  ['rollcall-worker', 'delete', 'validatingadmissionpolicybindings', '', false],
  ['rollcall-worker', 'patch', 'mutatingwebhookconfigurations', '', false],
  ['rollcall-worker', 'create', 'deployments.apps', ns, true],
  ['rollcall-worker', 'patch', 'deployments.apps', ns, true],
  ['rollcall-worker', 'delete', 'deployments.apps', ns, false],
  ['rollcall-worker', 'patch', 'deployments.apps', 'default', false],
  ['rollcall-worker', 'patch', 'services', ns, true],
  ['rollcall-worker', 'create', 'events.events.k8s.io', 'default', true],
  ['rollcall-worker', 'create', 'events.events.k8s.io', 'kube-system', false],
  ['rollcall-worker', 'get', 'secrets', ns, true],
  ['rollcall-worker', 'create', 'secrets', ns, true],
  ['rollcall-worker', 'update', 'secrets', ns, true],
  ['rollcall-worker', 'delete', 'secrets', ns, false],
  ['rollcall-worker', 'get', 'secrets', 'default', false],
  ['rollcall-worker', 'get', 'secrets', 'kube-system', false],
  ['rollcall-worker', 'create', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-worker', 'list', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-worker', 'delete', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-worker', 'update', 'policyrevisions.rollcall.dev', '', false],
  ['rollcall-worker', 'patch', 'policyrevisions.rollcall.dev', '', false],
  ['rollcall-worker', 'create', 'leases.coordination.k8s.io', ns, false],
  // The audit (issue 38): the worker writes OpenReports (guard-identities.yaml keeps it to
  // rollcall's own) and posts batches through the service proxy of rollcall's namespace only.
  ...['get', 'list', 'create', 'update', 'patch', 'delete'].map((verb): Check => [
    'rollcall-worker',
    verb,
    'reports.openreports.io',
    'default',
    true,
  ]),
  ['rollcall-worker', 'patch', 'clusterreports.openreports.io', '', true],
  ['rollcall-worker', 'delete', 'clusterreports.openreports.io', '', true],
  ['rollcall-worker', 'deletecollection', 'reports.openreports.io', 'default', false],
  ['rollcall-watcher', 'create', 'reports.openreports.io', 'default', false],
  ['rollcall-watcher', 'patch', 'clusterreports.openreports.io', '', false],
  ['rollcall-policy-server', 'create', 'reports.openreports.io', ns, false],
  ['rollcall-worker', 'create', 'services/proxy', ns, true],
  ['rollcall-worker', 'get', 'services/proxy', ns, true],
  ['rollcall-worker', 'create', 'services/proxy', 'default', false],
  ['rollcall-worker', 'get', 'services/proxy', 'kube-system', false],
  ['rollcall-watcher', 'create', 'services/proxy', ns, false],
  ['rollcall-watcher', 'delete', 'namespaces', '', false],
  // What the audit reader must never grant, whatever it lists: a get by name, and with it the
  // subresources a GET reaches (the kubelet's API, any Service's or pod's HTTP, logs, exec).
  ...['rollcall-watcher', 'rollcall-worker'].flatMap((a): Check[] => [
    [a, 'get', 'configmaps', 'default', false],
    [a, 'get', 'nodes/proxy', '', false],
    [a, 'get', 'services/proxy', 'default', false],
    [a, 'get', 'pods/proxy', 'default', false],
    [a, 'get', 'pods/log', 'default', false],
    [a, 'get', 'pods/exec', 'default', false],
    [a, 'create', 'pods/exec', 'default', false],
    [a, 'update', 'configmaps', 'default', false],
  ]),
  // Patch only: guard-identities.yaml narrows it to the own pod's report annotation.
  ['rollcall-policy-server', 'patch', 'pods', ns, true],
  ['rollcall-policy-server', 'get', 'pods', ns, false],
  ['rollcall-policy-server', 'update', 'pods', ns, false],
  ['rollcall-policy-server', 'patch', 'pods/status', ns, false],
  ['rollcall-policy-server', 'get', 'secrets/rollcall-webhook-ca', ns, false],
  ['rollcall-policy-server', 'list', 'policies.rollcall.dev', '', true],
  ['rollcall-policy-server', 'watch', 'policies.rollcall.dev', '', true],
  ['rollcall-policy-server', 'list', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-policy-server', 'watch', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-policy-server', 'get', 'policyrevisions.rollcall.dev', '', true],
  ['rollcall-policy-server', 'create', 'policyrevisions.rollcall.dev', '', false],
  ['rollcall-policy-server', 'delete', 'policyrevisions.rollcall.dev', '', false],
  ['rollcall-policy-server', 'watch', 'namespaces', '', true],
  ['rollcall-policy-server', 'list', 'namespaces', '', true],
  ['rollcall-policy-server', 'delete', 'namespaces', '', false],
  ['rollcall-policy-server', 'list', 'secrets', '', false],
  ['rollcall-policy-server', 'list', 'pods', ns, false],
  ['rollcall-policy-server', 'delete', 'pods', ns, false],
  ['rollcall-policy-server', 'patch', 'pods', 'default', false],
  ['rollcall-policy-server', 'patch', 'policies.rollcall.dev/status', '', false],
  ['rollcall-policy-server', 'get', 'secrets', ns, false],
  // Secrets (issue 36): the watcher reads names only (metadata-only list and watch,
  // watcher/secret-metadata.test.ts) and may not get or write one; the worker writes them one
  // by one and never patches, deletes or reaches another namespace's; a policy server none.
  ['rollcall-watcher', 'get', 'secrets/rollcall-webhook-ca', ns, false],
  ['rollcall-watcher', 'update', 'secrets', ns, false],
  ['rollcall-worker', 'get', 'secrets/rollcall-webhook-ca', ns, true],
  ['rollcall-worker', 'patch', 'secrets', ns, false],
  ['rollcall-worker', 'deletecollection', 'secrets', ns, false],
  ['rollcall-worker', 'update', 'secrets', 'kube-system', false],
  ['rollcall-worker', 'create', 'secrets', 'default', false],
  ['rollcall-policy-server', 'watch', 'secrets', ns, false],
  ['rollcall-policy-server', 'get', 'secrets/rollcall-webhook-ca', ns, false],
  ...['rollcall-watcher', 'rollcall-worker', 'rollcall-policy-server'].flatMap((a): Check[] => [
    [a, '*', '*', ns, false],
    [a, '*', '*', '', false],
    [a, 'create', 'clusterrolebindings.rbac.authorization.k8s.io', '', false],
  ]),
];

/**
 * The audit's reads, [account, verb, resource, namespace, allowed as shipped, allowed with the
 * reader narrowed to ConfigMaps]: as shipped every resource may be listed and watched (Secrets
 * too: the trade-off docs/security.md states), narrowed only what the overlay or value names.
 */
const AUDIT_READS: [string, string, string, string, boolean, boolean][] = [
  ['rollcall-watcher', 'list', 'configmaps', 'default', true, true],
  ['rollcall-watcher', 'watch', 'configmaps', 'kube-system', true, true],
  ['rollcall-worker', 'list', 'configmaps', 'default', true, true],
  ['rollcall-watcher', 'list', 'pods', 'default', true, false],
  ['rollcall-watcher', 'list', 'deployments.apps', 'default', true, false],
  ['rollcall-watcher', 'list', 'secrets', 'default', true, false],
  ['rollcall-watcher', 'watch', 'secrets', 'kube-system', true, false],
  ['rollcall-worker', 'list', 'secrets', ns, true, false],
  ['rollcall-worker', 'watch', 'secrets', ns, true, false],
  ['rollcall-worker', 'list', 'pods', ns, true, false],
  ['rollcall-worker', 'list', 'nodes', '', true, false],
];
const auditChecks = (narrowed: boolean): Check[] =>
  AUDIT_READS.map(([a, v, r, n, shipped, narrow]) => [a, v, r, n, narrowed ? narrow : shipped]);

/** Subresources `kubectl auth can-i` takes as a flag; anything else after a `/` is a name. */
const SUBRESOURCES = new Set(['status', 'proxy', 'log', 'exec']);

function canI([account, verb, resource, namespace]: Check): boolean {
  // `kubectl auth can-i` takes a subresource as a flag, not in the resource path.
  const [type, rest] = resource.split('/') as [string, string | undefined];
  const isSub = rest !== undefined && SUBRESOURCES.has(rest);
  const subresource = isSub ? [`--subresource=${rest}`] : [];
  const target = rest !== undefined && !isSub ? `${type}/${rest}` : type;
  const scope = namespace === '' ? [] : ['-n', namespace];
  const out = kubectlRun([
    'auth',
    'can-i',
    verb,
    target,
    ...subresource,
    ...scope,
    `--as=${sa(account)}`,
  ]);
  assert.ok(out.status === 0 || out.status === 1, `kubectl auth can-i failed: ${out.stderr}`);
  return out.status === 0;
}

/** Each check's result, printed as a table; the checks whose result differs from the expectation. */
function checkAll(checks: Check[]): string[] {
  const rows = checks.map((check) => ({ check, got: canI(check) }));
  const w = [24, 7, 46, 16];
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(w[i] ?? 6)).join(' ');
  console.log(
    [
      '',
      line(['ACCOUNT', 'VERB', 'RESOURCE', 'NAMESPACE', 'CAN-I', 'EXPECTED']),
      ...rows.map(({ check: [a, v, r, n, want], got }) =>
        line([a, v, r, n || '(cluster)', got ? 'yes' : 'no', want ? 'yes' : 'no']),
      ),
      '',
    ].join('\n'),
  );
  return rows.filter(({ check, got }) => got !== check[4]).map(({ check }) => check.join(' '));
}

for (const [source, rbac, narrowed] of sources)
  describe(`RBAC of ${source}`, () => {
    const dir = mkdtempSync(join(tmpdir(), 'rollcall-rbac-'));
    const processes: RollcallProcess[] = [];
    const run = uniqueName('rbac');

    before(() => {
      createNamespace();
      apply(...rbac.filter((m) => m.kind !== 'Namespace'));
      kubectlOk([
        'wait',
        '--for=condition=Established',
        'crd/policies.rollcall.dev',
        'crd/policyservers.rollcall.dev',
        '--timeout=60s',
      ]);
    });

    after(async () => {
      await Promise.all(processes.map((p) => p.stop()));
      await deleteRollcallObjects(kc);
      // Cluster-scoped and `default`-namespace objects first (the CRDs stay: other files use them),
      // then the namespace with everything in it.
      const outside = rbac.filter(
        (m: Manifest) =>
          m.kind !== 'CustomResourceDefinition' &&
          m.kind !== 'Namespace' &&
          m.metadata.namespace !== NAMESPACE,
      );
      kubectlRun(['delete', '--ignore-not-found', '-f', '-'], toYaml(outside));
      deleteNamespace();
      rmSync(dir, { recursive: true, force: true });
    });

    type Rule = { apiGroups: string[]; resources: string[]; verbs: string[] };
    test('no rule uses a wildcard verb, resource or API group, but the audit reader, which only lists and watches', () => {
      const roles = rbac.filter((m) => m.kind === 'Role' || m.kind === 'ClusterRole');
      assert.ok(roles.length >= 7);
      for (const role of roles) {
        for (const rule of role.rules as Rule[]) {
          if (role.kind === 'ClusterRole' && role.metadata.name === AUDIT_READER) {
            assert.deepEqual(rule.verbs, ['list', 'watch'], `${AUDIT_READER} only reads`);
            continue;
          }
          for (const v of [...rule.apiGroups, ...rule.resources, ...rule.verbs])
            assert.ok(!v.includes('*'), `${role.kind}/${role.metadata.name} has a wildcard: ${v}`);
        }
      }
      const binding = rbac.find(
        (m) => m.kind === 'ClusterRoleBinding' && m.metadata.name === AUDIT_READER,
      );
      assert.deepEqual(
        (binding?.subjects as { name: string }[] | undefined)?.map((s) => s.name),
        ['rollcall-watcher', 'rollcall-worker'],
        'the audit reader is bound to the watcher and the worker, not the policy servers',
      );
    });

    test('kubectl auth can-i: each account may do what its role needs and nothing else checked here', () => {
      assert.deepEqual(
        checkAll([...CHECKS, ...auditChecks(false)]),
        [],
        'every check matches the expectation',
      );
    });

    test('the end-to-end scenario passes with the watcher and the worker under their ServiceAccounts', async () => {
      const common = ['--namespace', NAMESPACE, '--port', '0'];
      processes.push(
        startRollcall(`${run}-watcher`, ['watcher', ...common], {
          db,
          env: { KUBECONFIG: kubeconfigFor('rollcall-watcher', dir) },
        }),
      );
      processes.push(
        startRollcall(`${run}-worker`, ['worker', ...common], {
          db,
          env: { KUBECONFIG: kubeconfigFor('rollcall-worker', dir) },
        }),
      );
      // The simulated data plane plays the policy servers' pods; it runs as admin.
      processes.push(startRollcall(`${run}-sim`, ['sim', '--namespace', NAMESPACE], { db }));

      const ps = uniqueName('ps').slice(0, 40);
      apply({
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyServer',
        metadata: { name: ps },
        spec: {
          image: 'sim://policy-server',
          replicas: 2,
          serviceAccountName: 'rollcall-policy-server',
        },
      });
      const policy = (name: string, module: string) => ({
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'Policy',
        metadata: { name },
        spec: {
          policyServer: ps,
          module,
          rules: [
            { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
          ],
        },
      });
      const good = `${run}-good`;
      const broken = `${run}-broken`;
      apply(
        policy(good, 'sim://ok'),
        policy(broken, 'sim://fail?message=module+download+failed:+404'),
      );
      const waitPolicy = (name: string, done: (p: Policy) => boolean) =>
        watchUntil<Policy & KubernetesObject>(kc, '/apis/rollcall.dev/v1alpha1/policies', done, {
          fieldSelector: `metadata.name=${name}`,
          timeoutMs: 60_000,
        });

      const ready = await waitPolicy(
        good,
        (p) => isCurrent(p) && condition(p, 'Ready')?.status === 'True',
      );
      assert.equal(ready.status?.ready, '2/2');
      const admission = kc.makeApiClient(AdmissionregistrationV1Api);
      // The webhook follows Ready (its own key, its own job): watch for it.
      const hook = await watchUntil<V1ValidatingWebhookConfiguration>(
        kc,
        '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
        () => true,
        {
          fieldSelector: `metadata.name=rollcall-${good}`,
          timeoutMs: 30_000,
        },
      );
      assert.equal(hook.webhooks?.[0]?.clientConfig.service?.namespace, NAMESPACE);

      const stalled = await waitPolicy(
        broken,
        (p) => isCurrent(p) && condition(p, 'Stalled')?.status === 'True',
      );
      assert.equal(condition(stalled, 'Ready')?.status, 'False');
      await assert.rejects(
        admission.readValidatingWebhookConfiguration({ name: `rollcall-${broken}` }),
        (err: { code?: number }) => err.code === 404,
      );
      // The Warning Event proves the worker may create Events in `default`.
      await watchUntil<KubernetesObject & { type?: string; regarding?: { uid?: string } }>(
        kc,
        '/apis/events.k8s.io/v1/namespaces/default/events',
        (e) => e.regarding?.uid === stalled.metadata.uid && e.type === 'Warning',
        { timeoutMs: 30_000 },
      );
      const server = await watchUntil<PolicyServer & KubernetesObject>(
        kc,
        '/apis/rollcall.dev/v1alpha1/policyservers',
        (s) => condition(s, 'Ready')?.status === 'True',
        {
          fieldSelector: `metadata.name=${ps}`,
          timeoutMs: 30_000,
        },
      );
      assert.equal(server.status?.readyReplicas, 2);

      // A PolicyServer of rollcall's image without a CA: the worker creates the webhook CA and
      // the server's serving certificate Secret under its own identity (get/create on Secrets).
      const own = `${ps}-own`.slice(0, 50);
      apply({
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyServer',
        metadata: { name: own },
        spec: { replicas: 1, serviceAccountName: 'rollcall-policy-server' },
      });
      const tls = await watchUntil<KubernetesObject & { type?: string }>(
        kc,
        `/api/v1/namespaces/${NAMESPACE}/secrets`,
        () => true,
        { fieldSelector: `metadata.name=policy-server-${own}-tls`, timeoutMs: 30_000 },
      );
      assert.equal(tls.type, 'kubernetes.io/tls');

      // Nothing the roles tried was refused (a 403 is retried with backoff, so the scenario
      // could pass slowly with a missing permission: the logs say whether it happened).
      for (const role of ['watcher', 'worker']) {
        const log = readFileSync(join(logDir, `${run}-${role}.log`), 'utf8');
        assert.doesNotMatch(
          log,
          /forbidden|"code":403|statusCode":403/i,
          `${role} was refused something; see ${logDir}/${run}-${role}.log`,
        );
      }
    });

    test('narrowed the documented way, the audit reader lists and watches only what it names', async () => {
      const shipped = rbac.find(
        (m) => m.kind === 'ClusterRole' && m.metadata.name === AUDIT_READER,
      )!;
      apply(narrowed);
      try {
        // The authorizer follows a role change within moments: ask until it has.
        const deadline = Date.now() + 15_000;
        let wrong = checkAll(auditChecks(true));
        while (wrong.length > 0 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 250));
          wrong = checkAll(auditChecks(true));
        }
        assert.deepEqual(wrong, [], 'every check matches the expectation');
        assert.deepEqual(checkAll(CHECKS), [], 'the rest is unchanged');
      } finally {
        apply(shipped);
      }
    });
  });
