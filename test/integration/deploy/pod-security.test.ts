// Every pod in rollcall's namespace passes the Pod Security level deploy/namespace.yaml
// enforces: rollcall's own workloads and the policy-server pods its worker builds. Checked by
// the apiserver's own PodSecurity admission (server-side dry run of each pod).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { parse } from 'yaml';
import { CoreV1Api, type V1Pod, type V1PodSpec } from '@kubernetes/client-node';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { desiredDeployment } from '../../../control-plane/functions/policyserver-core.ts';
import { aPolicyServer } from '../../fixtures/builders.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { build } from './manifests.ts';

const core = testKubeConfig().makeApiClient(CoreV1Api);
const namespace = uniqueName('rollcall-psa');
const deployed = parse(readFileSync(join(repoRoot, 'deploy', 'namespace.yaml'), 'utf8')) as {
  metadata: { labels: Record<string, string> };
};

before(async () => {
  // The namespace with the deployed Pod Security labels, under a test name.
  await core.createNamespace({
    body: { metadata: { name: namespace, labels: deployed.metadata.labels } },
  });
});
after(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => {});
});

const dryRunPod = (spec: V1PodSpec) =>
  core.createNamespacedPod({
    namespace,
    body: { metadata: { name: 'policy-server' }, spec } satisfies V1Pod,
    dryRun: 'All',
  });

test("a policy-server pod passes the namespace's enforced Pod Security level", async () => {
  assert.equal(deployed.metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted');
  const template = desiredDeployment(aPolicyServer(), { namespace }).spec!.template;
  await dryRunPod(template.spec!);
});

test("rollcall's own workloads pass it too", async () => {
  const workloads = build().filter((m) => m.kind === 'Deployment' || m.kind === 'StatefulSet');
  assert.ok(workloads.length >= 3, 'watcher, worker and Redis');
  for (const w of workloads) {
    const spec = (w.spec as { template: { spec: V1PodSpec } }).template.spec;
    await dryRunPod(spec).catch((err: { body?: string }) => {
      throw new Error(`${w.kind} ${w.metadata.name}: ${String(err.body)}`);
    });
  }
});

test('the same pod without its securityContext is refused (the check is real)', async () => {
  const spec = structuredClone(
    desiredDeployment(aPolicyServer(), { namespace }).spec!.template.spec!,
  );
  delete spec.securityContext;
  for (const c of spec.containers) delete c.securityContext;
  await assert.rejects(dryRunPod(spec), (err: { code?: number; body?: string }) => {
    assert.equal(err.code, 403);
    const status = JSON.parse(String(err.body)) as { message?: string };
    assert.match(status.message ?? '', /violates PodSecurity "restricted/);
    return true;
  });
});
