// Who may connect to a policy server: NetworkPolicy rollcall-policy-server-ingress admits its
// serving port only, from anywhere by default and only from the apiserver's addresses where
// the operator gives them (the chart's policyServers.apiserverCIDRs, an overlay's `from` for
// deploy/). The local cluster's network enforces no NetworkPolicy, so what is checked is the
// rendered policy against the pods rollcall runs (labels, port), and the apiserver's dry run.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { POLICY_SERVER_CONTAINER_PORT } from '../../../api/constants.ts';
import { desiredDeployment } from '../../../control-plane/functions/policyserver-core.ts';
import { aPolicyServer } from '../../fixtures/builders.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { build, kubectlRun, renderChart, toYaml, type Manifest } from './manifests.ts';

const NAME = 'rollcall-policy-server-ingress';
const core = testKubeConfig().makeApiClient(CoreV1Api);
const namespace = uniqueName('rollcall-ps-ingress');

interface IngressPolicy {
  podSelector: { matchLabels: Record<string, string> };
  policyTypes: string[];
  ingress: {
    ports: { port: number; protocol: string }[];
    from?: { ipBlock: { cidr: string } }[];
  }[];
}
const policyIn = (manifests: Manifest[]) => {
  const found = manifests.find((m) => m.kind === 'NetworkPolicy' && m.metadata.name === NAME);
  assert.ok(found, `${NAME} is rendered`);
  return found;
};
const specOf = (m: Manifest) => m.spec as IngressPolicy;

/** A server-side dry run of the policy, moved to this test's namespace. */
function dryRun(m: Manifest) {
  const moved = { ...m, metadata: { ...m.metadata, namespace } };
  const out = kubectlRun(['apply', '--dry-run=server', '-f', '-'], toYaml([moved]));
  assert.equal(out.status, 0, out.stderr);
}

before(async () => {
  await core.createNamespace({ body: { metadata: { name: namespace } } });
});
after(async () => {
  await core.deleteNamespace({ name: namespace }).catch(() => {});
});

describe(NAME, () => {
  test('selects every policy-server pod rollcall runs, whatever its image', () => {
    const { podSelector, policyTypes } = specOf(policyIn(build()));
    assert.deepEqual(policyTypes, ['Ingress']);
    for (const image of [undefined, 'registry.example/policy-server:1']) {
      const pod = desiredDeployment(aPolicyServer({ spec: { image } }), { namespace }).spec!
        .template;
      for (const [label, value] of Object.entries(podSelector.matchLabels))
        assert.equal(pod.metadata?.labels?.[label], value, `${label}=${value}`);
    }
    assert.deepEqual(Object.keys(podSelector.matchLabels).sort(), [
      'app.kubernetes.io/managed-by',
      'app.kubernetes.io/name',
    ]);
  });

  test('deploy/ and the chart by default admit the serving port only, from anywhere', async () => {
    for (const manifests of [build(), await renderChart()]) {
      const policy = policyIn(manifests);
      const { ingress } = specOf(policy);
      assert.equal(ingress.length, 1);
      assert.deepEqual(ingress[0]!.ports, [
        { port: POLICY_SERVER_CONTAINER_PORT, protocol: 'TCP' },
      ]);
      assert.equal(ingress[0]!.from, undefined);
      const container = desiredDeployment(aPolicyServer(), { namespace }).spec!.template.spec!
        .containers[0]!;
      assert.deepEqual(
        container.ports?.map((p) => p.containerPort),
        [POLICY_SERVER_CONTAINER_PORT],
        'the only port a policy-server pod has',
      );
      dryRun(policy);
    }
  });

  test('the chart admits only the apiserver CIDRs it is given', async () => {
    const policy = policyIn(
      await renderChart([
        '--set-json',
        'policyServers.apiserverCIDRs=["172.20.0.0/28","fd00:10::/120"]',
      ]),
    );
    assert.deepEqual(specOf(policy).ingress, [
      {
        ports: [{ port: POLICY_SERVER_CONTAINER_PORT, protocol: 'TCP' }],
        from: [{ ipBlock: { cidr: '172.20.0.0/28' } }, { ipBlock: { cidr: 'fd00:10::/120' } }],
      },
    ]);
    dryRun(policy);
  });

  test('the chart refuses a CIDR that is not one', async () => {
    await assert.rejects(
      renderChart(['--set-json', 'policyServers.apiserverCIDRs=["apiserver.example"]']),
      /apiserverCIDRs/,
    );
  });
});
