// The polling baseline: the loop operators fall back to. Every second it lists everything,
// recomputes every Policy's status with rollcall's own pure core, and writes what changed
// (status and Events, with the same client and write concurrency as rollcall). It writes no
// webhooks. Usage: node bench/poller.ts NAMESPACE (KUBECONFIG from the environment).
import { isDeepStrictEqual } from 'node:util';
import {
  AdmissionregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubeConfig,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  POLICY_SERVER_LABEL,
} from '../api/constants.ts';
import type { Deployment, Pod, ReplicaSet } from '../api/kube.ts';
import type { Policy, PolicyServer } from '../api/v1alpha1.ts';
import { KubeWriter } from '../control-plane/functions/kube-writer.ts';
import { kubeConfigTarget } from '../lib/kube/api.ts';
import { reportsFromPods } from '../api/report.ts';
import { computePolicy } from '../control-plane/functions/policy-core.ts';
import { policyServerResourceName } from '../control-plane/functions/policyserver-core.ts';
import { webhookConfigurationName } from '../api/constants.ts';
import { servedGenerationOf } from '../control-plane/functions/webhook-core.ts';
import { pool, sleep } from './support.ts';

const namespace = process.argv[2] ?? 'rollcall-bench';
const kc = new KubeConfig();
kc.loadFromDefault();
const custom = kc.makeApiClient(CustomObjectsApi);
const apps = kc.makeApiClient(AppsV1Api);
const core = kc.makeApiClient(CoreV1Api);
const admission = kc.makeApiClient(AdmissionregistrationV1Api);
const writer = new KubeWriter(kubeConfigTarget(kc), (write) => write());
const listCustom = async <T>(plural: string) =>
  (
    (await custom.listClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural,
    })) as { items: T[] }
  ).items;

let stopping = false;
process.on('SIGTERM', () => (stopping = true));

async function pass(): Promise<void> {
  const [policies, servers, deployments, replicaSets, pods, webhooks] = await Promise.all([
    listCustom<Policy>('policies'),
    listCustom<PolicyServer>('policyservers'),
    apps.listNamespacedDeployment({ namespace, labelSelector: POLICY_SERVER_LABEL }),
    apps.listNamespacedReplicaSet({ namespace, labelSelector: POLICY_SERVER_LABEL }),
    core.listNamespacedPod({ namespace, labelSelector: POLICY_SERVER_LABEL }),
    admission.listValidatingWebhookConfiguration({
      labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}`,
    }),
  ]);
  const serverByName = new Map(servers.map((s) => [s.metadata.name, s]));
  const deploymentByName = new Map(
    deployments.items.map((d) => [d.metadata?.name, d as Deployment]),
  );
  const webhookByName = new Map(webhooks.items.map((w) => [w.metadata?.name, w]));
  const podsByServer = new Map<string, Pod[]>();
  for (const pod of pods.items) {
    const server = pod.metadata?.labels?.[POLICY_SERVER_LABEL] ?? '';
    podsByServer.set(server, [...(podsByServer.get(server) ?? []), pod as Pod]);
  }
  await pool(policies, 8, async (policy) => {
    const server = policy.spec.policyServer;
    const decision = computePolicy({
      policy,
      policyServer: serverByName.get(server),
      deployment: deploymentByName.get(policyServerResourceName(server)),
      replicaSets: replicaSets.items as ReplicaSet[],
      pods: podsByServer.get(server) ?? [],
      // Every report read again for every Policy, as the core read them before the projections did.
      reports: reportsFromPods(podsByServer.get(server) ?? [], policy.metadata.name),
      servedGeneration: servedGenerationOf(
        webhookByName.get(webhookConfigurationName(policy.metadata.name)),
        policy,
      ),
      now: new Date(),
    });
    if (isDeepStrictEqual(decision.status, policy.status)) return;
    await writer
      .patchStatus('policies', policy.metadata.name, decision.status, policy)
      .catch(() => {});
    const regarding = {
      apiVersion: API_VERSION,
      kind: 'Policy',
      name: policy.metadata.name,
      uid: policy.metadata.uid,
    };
    for (const event of decision.events)
      await writer.event(regarding, event, new Date()).catch(() => {});
  });
}

while (!stopping) {
  await pass().catch((err: unknown) => console.error(`poll failed: ${String(err)}`));
  await sleep(1000);
}
