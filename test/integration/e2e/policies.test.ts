// rollcall end to end on the real local cluster: rollcall (watcher + workers) and the
// simulated data plane run as processes; every expectation is observed through a watch.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  type KubernetesObject,
  type V1ValidatingWebhookConfiguration,
} from '@kubernetes/client-node';
import { Queue } from 'bullmq';
import { kubectl } from '../../../tooling/cluster/cluster.ts';
import type { PolicyRevision, PolicyServer } from '../../../api/v1alpha1.ts';
import { createRedis } from '../../../control-plane/queue/index.ts';
import {
  testCluster,
  testKubeConfig,
  uniqueName,
  waitGone,
  watchUntil,
} from '../../support/kube.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, runAsAccounts, type Identities } from '../../support/identities.ts';
import {
  createRule,
  policyManifest,
  policyServerManifest,
  SIM_IMAGE,
} from '../../support/manifests.ts';
import { testDb } from '../../support/rollcall.ts';
import { redisUrl } from '../../support/redis.ts';
import { waitFor } from '../../support/poll.ts';
import { apply, condition, isCurrent, waitPolicy } from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-e2e';
const db = testDb();
const servers = '/apis/rollcall.dev/v1alpha1/policyservers';
const webhooks = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations';

const server = (name: string, replicas: number, extra: Record<string, unknown> = {}) =>
  policyServerManifest(name, { image: SIM_IMAGE, replicas, ...extra });
const policy = (name: string, serverName: string, module: string, resources = ['pods']) =>
  policyManifest(name, serverName, { module, rules: [createRule(...resources)] });

async function webhookOf(
  policyName: string,
): Promise<V1ValidatingWebhookConfiguration | undefined> {
  const api = kc.makeApiClient(AdmissionregistrationV1Api);
  return api
    .readValidatingWebhookConfiguration({ name: `rollcall-${policyName}` })
    .catch((err: { code?: number }) => {
      if (err.code === 404) return undefined;
      throw err;
    });
}

async function revisionOf(name: string): Promise<PolicyRevision | undefined> {
  return (
    kc.makeApiClient(CustomObjectsApi).getClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural: 'policyrevisions',
      name,
    }) as Promise<PolicyRevision>
  ).catch((err: { code?: number }) => {
    if (err.code === 404) return undefined;
    throw err;
  });
}

describe('rollcall end to end', () => {
  const procs = new Processes(namespace);
  const ps = uniqueName('ps').slice(0, 40);
  let ids: Identities | undefined;

  before(async () => {
    await procs.prepare();
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    procs.sim();
    await apply(server(ps, 3));
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
  });

  test('a good policy on 3 replicas becomes Ready 3/3 and its webhook enforces its rules', async () => {
    await apply(policy('good', ps, 'sim://ok'));
    const ready = await waitPolicy(
      kc,
      'good',
      (p) => isCurrent(p) && condition(p, 'Ready')?.status === 'True',
    );
    assert.equal(ready.status?.ready, '3/3');
    assert.equal(ready.status?.readyReplicas, 3);
    assert.equal(condition(ready, 'Reconciling'), undefined);
    assert.equal(condition(ready, 'Stalled'), undefined);

    const hook = await watchUntil<V1ValidatingWebhookConfiguration>(kc, webhooks, () => true, {
      fieldSelector: 'metadata.name=rollcall-good',
    });
    const w = hook.webhooks?.[0];
    assert.deepEqual(w?.rules?.[0]?.resources, ['pods']);
    assert.equal(w?.clientConfig.service?.path, '/validate/good/1', 'the path pins generation 1');
    const revision = await revisionOf('good-1');
    assert.equal(revision?.spec.policyUID, ready.metadata.uid, 'generation 1 is recorded');
    assert.equal(revision?.spec.generation, 1);
    assert.equal(revision?.spec.policySpec['module'], 'sim://ok');
    assert.deepEqual(w?.namespaceSelector?.matchExpressions?.at(-1), {
      key: 'kubernetes.io/metadata.name',
      operator: 'NotIn',
      values: [namespace, 'kube-system', 'kube-node-lease'],
    });

    const wait = spawnSync(
      testCluster().binaries.kube,
      [
        'kubectl',
        `--kubeconfig=${testCluster().kubeconfig}`,
        'wait',
        '--for=condition=Ready',
        'policy/good',
        '--timeout=30s',
      ],
      { encoding: 'utf8' },
    );
    assert.equal(wait.status, 0, wait.stderr);
    assert.match(wait.stdout, /policy.rollcall.dev\/good condition met/);
  });

  test('a policy that fails on every replica is Stalled with their messages, a Warning Event and no webhook; the good one stays Ready', async () => {
    await apply(policy('broken', ps, 'sim://fail?message=module+download+failed:+404'));
    // Stalled as soon as one replica fails; wait until all three have reported.
    const stalled = await waitPolicy(
      kc,
      'broken',
      (p) =>
        isCurrent(p) &&
        condition(p, 'Stalled')?.status === 'True' &&
        p.status?.failedReplicas === 3,
    );
    assert.equal(condition(stalled, 'Ready')?.status, 'False');
    assert.equal(condition(stalled, 'Stalled')?.reason, 'LoadFailed');
    assert.equal(stalled.status?.failedReplicas, 3);
    assert.equal(stalled.status?.failures?.length, 3);
    for (const f of stalled.status?.failures ?? [])
      assert.equal(f.message, 'module download failed: 404');
    assert.match(condition(stalled, 'Ready')?.message ?? '', /module download failed: 404/);

    const aboutBroken = (e: { regarding?: { uid?: string } }) =>
      e.regarding?.uid === stalled.metadata.uid;
    const warning = await watchUntil<
      KubernetesObject & { type?: string; note?: string; regarding?: { uid?: string } }
    >(
      kc,
      '/apis/events.k8s.io/v1/namespaces/default/events',
      (e) => aboutBroken(e) && e.type === 'Warning',
    );
    assert.match(warning.note ?? '', /module download failed: 404/);
    assert.equal(await webhookOf('broken'), undefined);

    const good = await waitPolicy(kc, 'good', () => true);
    assert.equal(condition(good, 'Ready')?.status, 'True');
    assert.ok(await webhookOf('good'));
    // Events are written on transitions only: the Warning is not repeated per reconcile.
    const events = await kc
      .makeApiClient(EventsV1Api)
      .listNamespacedEvent({ namespace: 'default' });
    const warnings = events.items.filter((e) => aboutBroken(e) && e.type === 'Warning');
    assert.ok(
      warnings.length >= 1 && warnings.length <= 3,
      `one Warning per replica at most, got ${warnings.length}`,
    );
  });

  test('updating a Ready policy to a failing module keeps the last good rules and says which generation is served', async () => {
    await apply(policy('good', ps, 'sim://fail?message=bad+release', ['pods', 'services']));
    const stalled = await waitPolicy(
      kc,
      'good',
      (p) =>
        p.metadata.generation === 2 && isCurrent(p) && condition(p, 'Stalled')?.status === 'True',
    );
    assert.equal(stalled.status?.servedGeneration, 1);
    assert.match(condition(stalled, 'Ready')?.message ?? '', /bad release/);
    assert.match(condition(stalled, 'Ready')?.message ?? '', /generation 1/);
    const hook = await webhookOf('good');
    assert.deepEqual(
      hook?.webhooks?.[0]?.rules?.[0]?.resources,
      ['pods'],
      'the webhook still enforces generation 1',
    );
    assert.equal(hook?.metadata?.annotations?.['rollcall.dev/served-generation'], '1');
    assert.equal(hook?.webhooks?.[0]?.clientConfig.service?.path, '/validate/good/1');
    assert.equal(await revisionOf('good-2'), undefined, 'a failed generation is never recorded');

    await apply(policy('good', ps, 'sim://ok', ['pods', 'services']));
    await waitPolicy(
      kc,
      'good',
      (p) =>
        p.metadata.generation === 3 && isCurrent(p) && condition(p, 'Ready')?.status === 'True',
    );
    const served = await watchUntil<V1ValidatingWebhookConfiguration>(
      kc,
      webhooks,
      (w) => w.metadata?.annotations?.['rollcall.dev/served-generation'] === '3',
      {
        fieldSelector: 'metadata.name=rollcall-good',
      },
    );
    assert.deepEqual(served.webhooks?.[0]?.rules?.[0]?.resources, ['pods', 'services']);
    assert.equal(served.webhooks?.[0]?.clientConfig.service?.path, '/validate/good/3');
    assert.equal((await revisionOf('good-3'))?.spec.generation, 3);
    assert.ok(await revisionOf('good-1'), 'older revisions are kept (the newest 3)');
  });

  test('a policy whose rules reach Leases is Stalled with what to do and no webhook, until its rules name what it means', async () => {
    const leases = {
      operations: ['CREATE', 'UPDATE'],
      apiGroups: ['*'],
      apiVersions: ['*'],
      resources: ['leases'],
    };
    await apply(policyManifest('leases', ps, { module: 'sim://ok', rules: [leases] }));
    const stalled = await waitPolicy(
      kc,
      'leases',
      (p) => isCurrent(p) && condition(p, 'Stalled')?.status === 'True',
    );
    assert.equal(condition(stalled, 'Stalled')?.reason, 'InterceptsClusterCriticalResources');
    assert.match(
      condition(stalled, 'Ready')?.message ?? '',
      /^spec\.rules\[0\] .*would intercept leases \(coordination\.k8s\.io\).*list the resources you mean explicitly.*; no webhook is registered$/,
    );
    assert.equal(await webhookOf('leases'), undefined);

    await apply(
      policyManifest('leases', ps, { module: 'sim://ok', rules: [createRule('configmaps')] }),
    );
    await waitPolicy(
      kc,
      'leases',
      (p) =>
        p.metadata.generation === 2 && isCurrent(p) && condition(p, 'Ready')?.status === 'True',
    );
    const hook = await watchUntil<V1ValidatingWebhookConfiguration>(kc, webhooks, () => true, {
      fieldSelector: 'metadata.name=rollcall-leases',
    });
    assert.deepEqual(hook.webhooks?.[0]?.rules?.[0]?.resources, ['configmaps']);
    kubectl(testCluster(), ['delete', 'policy', 'leases']);
    await waitGone(kc, webhooks, 'rollcall-leases');
  });

  test('scaling the server 3 → 5 → 2 moves the counts, and deleting a policy removes its webhook', async () => {
    await apply(server(ps, 5));
    await waitPolicy(
      kc,
      'good',
      (p) => p.status?.ready === '5/5' && condition(p, 'Ready')?.status === 'True',
    );
    await apply(server(ps, 2));
    await waitPolicy(
      kc,
      'good',
      (p) => p.status?.ready === '2/2' && condition(p, 'Ready')?.status === 'True',
    );
    const ready = await watchUntil<PolicyServer & KubernetesObject>(
      kc,
      servers,
      (s) => s.status?.ready === '2/2' && condition(s, 'Ready')?.status === 'True',
      {
        fieldSelector: `metadata.name=${ps}`,
      },
    );
    assert.equal(ready.status?.readyReplicas, 2);

    kubectl(testCluster(), ['delete', 'policy', 'good']);
    await waitGone(kc, webhooks, 'rollcall-good');
  });

  test('a pod with the label but not owned by the server is ignored', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const spoof = uniqueName('spoof');
    await apply(policy('trusted', ps, 'sim://ok'));
    const before = await waitPolicy(
      kc,
      'trusted',
      (p) => isCurrent(p) && p.status?.ready === '2/2' && condition(p, 'Ready')?.status === 'True',
    );
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: {
          name: spoof,
          labels: { 'rollcall.dev/policy-server': ps },
          annotations: {
            'rollcall.dev/policies': JSON.stringify({
              trusted: {
                uid: before.metadata.uid,
                generation: 1,
                state: 'Failed',
                message: 'spoofed',
              },
            }),
          },
        },
        spec: { containers: [{ name: 'x', image: 'example.invalid/x' }] },
      },
    });
    after(() => core.deleteNamespacedPod({ name: spoof, namespace }));
    // Give the watcher and workers a full round: touch the policy server so its policies re-run.
    kubectl(testCluster(), [
      'annotate',
      'policyserver',
      ps,
      `touched=${Date.now()}`,
      '--overwrite',
    ]);
    await watchUntil(
      kc,
      `/api/v1/namespaces/${namespace}/pods`,
      (p: KubernetesObject & { status?: { conditions?: { type: string; status: string }[] } }) =>
        p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
      { fieldSelector: `metadata.name=${spoof}` },
    );
    await new Promise((r) => setTimeout(r, 2000));
    const trusted = await waitPolicy(kc, 'trusted', () => true);
    assert.equal(condition(trusted, 'Ready')?.status, 'True');
    assert.equal(trusted.status?.ready, '2/2');
    assert.equal(trusted.status?.failedReplicas ?? 0, 0);
  });

  test('a PolicyServer whose pods never become Ready is Reconciling, then Stalled after its progress deadline', async () => {
    const stuck = uniqueName('stuck').slice(0, 40);
    await apply(server(stuck, 2, { image: 'sim://never-ready', progressDeadlineSeconds: 5 }));
    await watchUntil<PolicyServer & KubernetesObject>(
      kc,
      servers,
      (s) => condition(s, 'Reconciling')?.status === 'True',
      { fieldSelector: `metadata.name=${stuck}` },
    );
    const stalled = await watchUntil<PolicyServer & KubernetesObject>(
      kc,
      servers,
      (s) => condition(s, 'Stalled')?.status === 'True',
      {
        fieldSelector: `metadata.name=${stuck}`,
      },
    );
    assert.match(condition(stalled, 'Stalled')?.reason ?? '', /ProgressDeadlineExceeded/);
    assert.equal(condition(stalled, 'Ready')?.status, 'False');
  });
  test('a server whose caSecretRef names a missing Secret gets no webhook; the webhook job fails with what to do', async () => {
    const refServer = uniqueName('ps-ca-ref').slice(0, 40);
    await apply(
      server(refServer, 1, { caSecretRef: { name: 'policy-server-ca' } }),
      policy('ca-ref', refServer, 'sim://ok'),
    );
    await waitPolicy(kc, 'ca-ref', (p) => isCurrent(p) && condition(p, 'Ready')?.status === 'True');
    const redis = createRedis(`${redisUrl()}/${db}`, 'producer');
    const queue = new Queue('reconcile', { connection: redis, prefix: 'rollcall' });
    try {
      const failed = await waitFor(
        async () => (await queue.getFailed()).find((j) => j.data.key === 'webhook/ca-ref'),
        30_000,
        'the failed webhook/ca-ref job',
      );
      assert.match(failed.failedReason, /\(spec\.caSecretRef of .*\) does not exist; create it/);
      assert.equal(await webhookOf('ca-ref'), undefined);
    } finally {
      await queue.close();
      redis.disconnect();
    }
  });
});
