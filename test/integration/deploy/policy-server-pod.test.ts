// The pod rollcall runs for a PolicyServer of its own image, as the apiserver admits it into a
// namespace that enforces Pod Security `restricted` (deploy/namespace.yaml's labels): it
// passes, and nothing of its hardening is dropped or defaulted away on the way in.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { parse } from 'yaml';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { desiredDeployment } from '../../../control-plane/functions/policyserver-core.ts';
import { aPolicyServer } from '../../fixtures/builders.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';

const core = testKubeConfig().makeApiClient(CoreV1Api);
const namespace = uniqueName('rollcall-ps-pod');
const deployed = parse(readFileSync(join(repoRoot, 'deploy', 'namespace.yaml'), 'utf8')) as {
  metadata: { labels: Record<string, string> };
};

before(async () => {
  await core.createNamespace({
    body: { metadata: { name: namespace, labels: deployed.metadata.labels } },
  });
});
after(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => {});
});

test("rollcall's own policy-server pod is admitted under restricted with all of its hardening", async () => {
  const template = desiredDeployment(aPolicyServer({ spec: { image: undefined } }), {
    namespace,
  }).spec!.template;
  const pod: V1Pod = await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name: 'policy-server', labels: template.metadata?.labels },
      spec: template.spec!,
    },
    dryRun: 'All',
  });
  const spec = pod.spec!;
  const container = spec.containers[0]!;
  assert.equal(spec.enableServiceLinks, false);
  assert.deepEqual(
    {
      runAsNonRoot: spec.securityContext?.runAsNonRoot,
      runAsUser: spec.securityContext?.runAsUser,
      runAsGroup: spec.securityContext?.runAsGroup,
      fsGroup: spec.securityContext?.fsGroup,
    },
    { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000 },
  );
  assert.equal(container.securityContext?.readOnlyRootFilesystem, true);
  assert.equal(container.securityContext?.allowPrivilegeEscalation, false);
  assert.deepEqual(container.securityContext?.capabilities?.drop, ['ALL']);
  const tls = spec.volumes?.find((v) => v.name === 'tls');
  assert.equal(tls?.secret?.defaultMode, 0o440, 'the key readable by the group only');
  assert.ok(spec.volumes?.some((v) => v.name === 'tmp' && v.emptyDir));
  assert.deepEqual(JSON.parse(JSON.stringify(container.resources)), {
    requests: { cpu: '100m', memory: '128Mi' },
    limits: { memory: '2560Mi' },
  });
  // The token stays: the policy server watches Policies and writes its report with it.
  assert.notEqual(spec.automountServiceAccountToken, false);
});
