// The attack of issue 36 finding 1, by a user who may only write PolicyServers: a PolicyServer
// that runs as rollcall-worker, or that hands its pods rollcall's webhook CA key, would make
// rollcall create a Deployment doing it in rollcall's namespace. Both layers refuse it:
// without deploy/guard-policyservers.yaml, rollcall (real processes) marks it Stalled
// (ForbiddenReference) and creates nothing; with it, the apply itself is refused, saying what
// is allowed. The chart's policyServers values shape the same policy.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import type { KubernetesObject } from '@kubernetes/client-node';
import type { PolicyServer } from '../../../api/v1alpha1.ts';
import { Processes } from '../../support/driver.ts';
import { testKubeConfig, uniqueName, watchUntil } from '../../support/kube.ts';
import { policyServerManifest } from '../../support/manifests.ts';
import {
  build,
  chartDir,
  helmRun,
  kubectlOk,
  kubectlRun,
  renderChart,
  toYaml,
  type Manifest,
} from './manifests.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-e2e-guard';
/** The attacker: a user whose only rights are to write PolicyServers. */
const AUTHOR = 'policyserver-author';
const run = uniqueName('guard').slice(0, 30);
const IMAGE = 'example.invalid/attacker:1';

const authorRbac = [
  {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: AUTHOR },
    rules: [
      {
        apiGroups: ['rollcall.dev'],
        resources: ['policyservers'],
        verbs: ['get', 'create', 'update', 'patch'],
      },
    ],
  },
  {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: AUTHOR },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: AUTHOR },
    subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: AUTHOR }],
  },
];

/** kubectl as the author (impersonated by the admin kubeconfig). */
const asAuthor = (args: string[], input?: string) => kubectlRun([`--as=${AUTHOR}`, ...args], input);
const create = (server: object, dryRun = false) =>
  asAuthor(['create', ...(dryRun ? ['--dry-run=server'] : []), '-f', '-'], stringify(server));

/** The three attacks: the worker's account, the CA key by env, the CA Secret as caSecretRef. */
const attacks = (prefix: string) => ({
  workerAccount: policyServerManifest(`${prefix}-sa`, {
    image: IMAGE,
    replicas: 1,
    serviceAccountName: 'rollcall-worker',
  }),
  caKeyByEnv: policyServerManifest(`${prefix}-env`, {
    image: IMAGE,
    replicas: 1,
    env: [
      { name: 'K', valueFrom: { secretKeyRef: { name: 'rollcall-webhook-ca', key: 'ca.key' } } },
    ],
  }),
  caSecretRef: policyServerManifest(`${prefix}-ref`, {
    replicas: 1,
    caSecretRef: { name: 'rollcall-webhook-ca' },
  }),
});

const GUARD = 'rollcall-policyserver-references';
/** This policy, not the others of guard-identities.yaml. */
const isGuard = (m: Manifest) =>
  m.kind === 'ValidatingAdmissionPolicy' && m.metadata.name === GUARD;
const guardObjects = (ms: Manifest[]) =>
  ms.filter((m) => m.kind.startsWith('ValidatingAdmissionPolicy') && m.metadata.name === GUARD);

const servers = '/apis/rollcall.dev/v1alpha1/policyservers';
const stalledFor = (name: string, message: RegExp) =>
  watchUntil<PolicyServer & KubernetesObject>(
    kc,
    servers,
    (ps) => {
      const stalled = ps.status?.conditions?.find((c) => c.type === 'Stalled');
      return (
        stalled?.status === 'True' &&
        stalled.reason === 'ForbiddenReference' &&
        message.test(stalled.message) &&
        ps.status?.observedGeneration === ps.metadata.generation
      );
    },
    { fieldSelector: `metadata.name=${name}`, timeoutMs: 60_000 },
  );
const exists = (kind: string, name: string) =>
  kubectlRun(['get', kind, name, '-n', namespace, '-o', 'name']).status === 0;

describe('what a PolicyServer may name, against a user who may only write PolicyServers', () => {
  const procs = new Processes(namespace);

  before(async () => {
    await procs.prepare();
    kubectlOk(['apply', '-f', '-'], toYaml(authorRbac as Manifest[]));
  });

  after(async () => {
    kubectlRun(['delete', '--ignore-not-found', '-f', '-'], toYaml(guardObjects(build())));
    kubectlRun(['delete', '--ignore-not-found', '-f', '-'], toYaml(authorRbac as Manifest[]));
    await procs.cleanUp();
  });

  test('the author may write PolicyServers and nothing else checked here', () => {
    const can = (verb: string, resource: string, ns?: string) =>
      kubectlRun([
        'auth',
        'can-i',
        `--as=${AUTHOR}`,
        verb,
        resource,
        ...(ns ? ['-n', ns] : []),
      ]).stdout.trim();
    assert.equal(can('create', 'policyservers.rollcall.dev'), 'yes');
    assert.equal(can('patch', 'policyservers.rollcall.dev'), 'yes');
    assert.equal(can('create', 'deployments.apps', namespace), 'no');
    assert.equal(can('get', 'secrets', namespace), 'no');
    assert.equal(can('create', 'pods', namespace), 'no');
  });

  describe('without the admission policy: rollcall refuses to run them', () => {
    before(() => procs.run());

    const cases = attacks(`${run}-b`);
    for (const [what, server, message] of [
      [
        'the worker account',
        cases.workerAccount,
        /rollcall-worker is one of rollcall's controllers' accounts/,
      ],
      [
        'the CA key by env',
        cases.caKeyByEnv,
        /spec\.env\[K\]\.valueFrom\.secretKeyRef names Secret rollcall-webhook-ca/,
      ],
      [
        'the CA Secret as caSecretRef',
        cases.caSecretRef,
        /spec\.caSecretRef names Secret rollcall-webhook-ca/,
      ],
    ] as const)
      test(`${what}: accepted by the API, Stalled (ForbiddenReference) by rollcall, no Deployment or Service`, async () => {
        const name = server.metadata.name;
        const out = create(server);
        assert.equal(out.status, 0, `no admission policy yet, the API stores it: ${out.stderr}`);
        await stalledFor(name, message);
        // The status is written after any apply of the same run: none happened.
        assert.equal(exists('deployment', `policy-server-${name}`), false, 'no Deployment');
        assert.equal(exists('service', `policy-server-${name}`), false, 'no Service');
      });

    test('an accepted server edited to a forbidden spec: Stalled, its Deployment left as rollcall last applied it', async () => {
      const name = `${run}-edit`;
      assert.equal(create(policyServerManifest(name, { image: IMAGE, replicas: 1 })).status, 0);
      const deployment = `policy-server-${name}`;
      await watchUntil(kc, `/apis/apps/v1/namespaces/${namespace}/deployments`, () => true, {
        fieldSelector: `metadata.name=${deployment}`,
      });
      const before = kubectlOk(['get', 'deployment', deployment, '-n', namespace, '-o', 'json']);
      const patched = asAuthor([
        'patch',
        'policyserver',
        name,
        '--type=merge',
        '-p',
        JSON.stringify({ spec: { serviceAccountName: 'rollcall-worker' } }),
      ]);
      assert.equal(patched.status, 0, patched.stderr);
      await stalledFor(
        name,
        new RegExp(`Its Deployment ${deployment} keeps what rollcall last applied`),
      );
      const after = JSON.parse(
        kubectlOk(['get', 'deployment', deployment, '-n', namespace, '-o', 'json']),
      ) as {
        metadata: { generation: number };
        spec: { template: { spec: { serviceAccountName?: string } } };
      };
      assert.equal(after.spec.template.spec.serviceAccountName, undefined);
      assert.equal(
        after.metadata.generation,
        (JSON.parse(before) as typeof after).metadata.generation,
      );
    });
  });

  describe("with deploy/'s admission policy: the apply is refused, saying what is allowed", () => {
    const cases = attacks(`${run}-a`);

    before(async () => {
      kubectlOk(['apply', '-f', '-'], toYaml(guardObjects(build())));
      // A new policy takes a moment to be enforced: until the worker's account is refused.
      const deadline = Date.now() + 30_000;
      while (create(cases.workerAccount, true).status === 0) {
        assert.ok(Date.now() < deadline, 'the admission policy is enforced within 30 s');
        await sleep(250);
      }
    });

    const refused = (server: object, message: RegExp) => {
      const out = create(server);
      assert.notEqual(out.status, 0, 'refused');
      assert.match(out.stderr, /ValidatingAdmissionPolicy 'rollcall-policyserver-references'/);
      assert.match(out.stderr, message);
    };

    test('the worker account is refused, naming the allowed accounts', () =>
      refused(
        cases.workerAccount,
        /spec\.serviceAccountName rollcall-worker is one of rollcall's controllers' accounts \(rollcall-watcher, rollcall-worker\), never a PolicyServer's; allowed: rollcall-policy-server, or leave it unset/,
      ));

    test('an env secretKeyRef to rollcall-webhook-ca is refused, naming the field', () =>
      refused(
        cases.caKeyByEnv,
        /spec\.env\[K\]\.valueFrom\.secretKeyRef names Secret rollcall-webhook-ca: a PolicyServer may not reference rollcall's own Secrets/,
      ));

    test("a caSecretRef to rollcall-webhook-ca, or another server's serving Secret, is refused", () => {
      refused(cases.caSecretRef, /spec\.caSecretRef names Secret rollcall-webhook-ca/);
      refused(
        policyServerManifest(`${run}-other`, {
          image: IMAGE,
          env: [
            {
              name: 'T',
              valueFrom: { secretKeyRef: { name: 'policy-server-x-tls', key: 'tls.key' } },
            },
          ],
        }),
        /names Secret policy-server-x-tls: .*another policy server's serving Secret \(policy-server-<name>-tls; this one's is policy-server-.*-other-tls\)/,
      );
    });

    test("any other account is refused; the policy servers' own, its own Secrets and unset pass", () => {
      refused(
        policyServerManifest(`${run}-builder`, { image: IMAGE, serviceAccountName: 'builder' }),
        /spec\.serviceAccountName builder is not allowed; allowed: rollcall-policy-server, or leave it unset/,
      );
      const name = `${run}-fine`;
      const fine = create(
        policyServerManifest(name, {
          image: IMAGE,
          serviceAccountName: 'rollcall-policy-server',
          env: [
            { name: 'A', valueFrom: { secretKeyRef: { name: 'vendor-licence', key: 'key' } } },
            {
              name: 'B',
              valueFrom: { secretKeyRef: { name: `policy-server-${name}-tls`, key: 'tls.crt' } },
            },
          ],
        }),
        true,
      );
      assert.equal(fine.status, 0, fine.stderr);
      assert.equal(create(policyServerManifest(`${run}-unset`, { image: IMAGE }), true).status, 0);
    });

    test('an update to a forbidden spec is refused; one that leaves a stored spec alone passes', () => {
      const stored = `${run}-b-sa`; // stored before the policy, with the worker's account
      const label = asAuthor([
        'patch',
        'policyserver',
        stored,
        '--type=merge',
        '-p',
        '{"metadata":{"labels":{"team":"a"}}}',
      ]);
      assert.equal(label.status, 0, `a label is not a spec change: ${label.stderr}`);
      const edit = asAuthor([
        'patch',
        'policyserver',
        stored,
        '--type=merge',
        '-p',
        '{"spec":{"replicas":2}}',
      ]);
      assert.notEqual(edit.status, 0);
      assert.match(
        edit.stderr,
        /spec\.serviceAccountName rollcall-worker is one of rollcall's controllers' accounts/,
      );
    });
  });
});

describe("charts/rollcall's policyServers values", () => {
  const label = 'guard-test.rollcall.dev/run';

  const render = (values: string[]) => renderChart(values.flatMap((v) => ['--set', v]));

  test("they reach the workers' ROLLCALL_POLICY_SERVER_* and the policy's lists, with the UI's and an external Redis URL's Secrets protected", async () => {
    const ms = await render([
      'policyServers.serviceAccounts={rollcall-policy-server,builder}',
      'policyServers.images={registry.example/policy/}',
      'policyServers.protectedSecrets={cm-other-server}',
      'ui.existingSecret=my-ui',
      'redis.mode=external',
      'redis.external.urlSecret.name=redis-url',
    ]);
    const worker = ms.find((m) => m.kind === 'Deployment' && m.metadata.name === 'rollcall-worker');
    const env = (
      worker?.spec as {
        template: { spec: { containers: { env: { name: string; value?: string }[] }[] } };
      }
    ).template.spec.containers[0]!.env;
    const value = (name: string) => env.find((e) => e.name === name)?.value;
    assert.equal(
      value('ROLLCALL_POLICY_SERVER_SERVICE_ACCOUNTS'),
      'rollcall-policy-server,builder',
    );
    assert.equal(value('ROLLCALL_POLICY_SERVER_IMAGES'), 'registry.example/policy/');
    assert.equal(
      value('ROLLCALL_POLICY_SERVER_PROTECTED_SECRETS'),
      'cm-other-server,my-ui,redis-url',
    );
    const policy = ms.find(isGuard);
    const variables = (policy?.spec as { variables: { name: string; expression: string }[] })
      .variables;
    const variable = (name: string) => variables.find((v) => v.name === name)?.expression;
    assert.equal(variable('serviceAccounts'), '["rollcall-policy-server","builder"]');
    assert.equal(variable('images'), '["registry.example/policy/"]');
    assert.equal(variable('protectedSecrets'), '["cm-other-server","my-ui","redis-url"]');
  });

  test("naming rollcall's controllers fails the rendering, saying they are never allowed", async () => {
    const out = await helmRun([
      'template',
      'rollcall',
      chartDir,
      '--set',
      'policyServers.serviceAccounts={rollcall-worker}',
    ]);
    assert.notEqual(out.status, 0);
    assert.match(
      out.stderr,
      /policyServers\.serviceAccounts names rollcall-worker: rollcall's controllers' accounts .* are never a PolicyServer's/,
    );
  });

  test('the rendered policy enforces them on the cluster (bound to labelled PolicyServers only)', async () => {
    const ms = await render([
      'policyServers.serviceAccounts={builder}',
      'policyServers.images={registry.example/policy/}',
      'policyServers.protectedSecrets={cm-other-server}',
    ]);
    const policy = structuredClone(ms.find(isGuard)!);
    const policyName = `${run}-chart`;
    policy.metadata = { name: policyName };
    const binding = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: policyName },
      spec: {
        policyName,
        validationActions: ['Deny'],
        matchResources: { objectSelector: { matchLabels: { [label]: run } } },
      },
    };
    kubectlOk(['apply', '-f', '-'], toYaml([policy, binding as Manifest]));
    try {
      const server = (name: string, spec: Record<string, unknown>) => {
        const m = policyServerManifest(`${run}-${name}`, spec);
        return { ...m, metadata: { ...m.metadata, labels: { [label]: run } } };
      };
      // As admin: these are the values at work, not the attacker (whose Role the suite above removed).
      const dryRun = (s: object) =>
        kubectlRun(['create', '--dry-run=server', '-f', '-'], stringify(s));
      const deadline = Date.now() + 30_000;
      while (dryRun(server('wait', { image: 'evil.example/x:1' })).status === 0) {
        assert.ok(Date.now() < deadline, 'the admission policy is enforced within 30 s');
        await sleep(250);
      }
      const image = dryRun(server('image', { image: 'evil.example/x:1' }));
      assert.match(
        image.stderr,
        /spec\.image evil\.example\/x:1 is not allowed: images must start with registry\.example\/policy\/, or leave spec\.image unset for rollcall's own/,
      );
      const account = dryRun(server('sa', { serviceAccountName: 'rollcall-policy-server' }));
      assert.match(
        account.stderr,
        /spec\.serviceAccountName rollcall-policy-server is not allowed; allowed: builder, or leave it unset/,
      );
      const secret = dryRun(
        server('secret', {
          env: [
            { name: 'S', valueFrom: { secretKeyRef: { name: 'cm-other-server', key: 'tls.key' } } },
          ],
        }),
      );
      assert.match(
        secret.stderr,
        /names Secret cm-other-server: .* or cm-other-server\. Reference a Secret of your own/,
      );
      const fine = dryRun(
        server('fine', {
          image: 'registry.example/policy/server:2',
          serviceAccountName: 'builder',
        }),
      );
      assert.equal(fine.status, 0, fine.stderr);
    } finally {
      kubectlRun(
        ['delete', '--ignore-not-found', '-f', '-'],
        toYaml([policy, binding as Manifest]),
      );
    }
  });
});
