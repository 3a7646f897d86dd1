// The policyserver function's shell with a spec it may not run (policyserver-guard.ts), against
// a recorded KubeWriter: the status says Stalled/ForbiddenReference and what to fix; nothing
// is applied and no Secret is read, whether or not a Deployment exists.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { Deployment } from '../../../api/kube.ts';
import type { PolicyServer, PolicyServerSpec, PolicyServerStatus } from '../../../api/v1alpha1.ts';
import { policyServer } from '../../../control-plane/functions/policyserver.ts';
import type { FunctionConfig } from '../../../control-plane/functions/types.ts';
import { aDeployment, aPolicyServer } from '../../fixtures/builders.ts';
import { functionContext } from '../../fixtures/function-context.ts';

async function run(
  spec: Partial<PolicyServerSpec>,
  {
    withDeployment = false,
    config = {},
  }: { withDeployment?: boolean; config?: Partial<FunctionConfig> } = {},
) {
  const server: PolicyServer = aPolicyServer({ spec });
  const deployment: Deployment | undefined = withDeployment ? aDeployment(server) : undefined;
  const calls: string[] = [];
  let status: PolicyServerStatus | undefined;
  const kube = {
    apply: async (o: { kind: string }) => (calls.push(`apply ${o.kind}`), o),
    getSecret: async (_ns: string, name: string) => void calls.push(`getSecret ${name}`),
    patchStatus: async (_plural: string, name: string, s: PolicyServerStatus) => {
      calls.push(`patchStatus ${name}`);
      status = s;
      return true;
    },
    event: async () => void calls.push('event'),
  };
  const store = { policyServerView: async () => ({ policyServer: server, deployment }) };
  const outcome = await policyServer.handle(
    server.metadata.name,
    functionContext({ store, kube, config }),
  );
  const stalled = status?.conditions?.find((c) => c.type === 'Stalled');
  return { outcome, calls, status, stalled };
}

describe('the policyserver function with a spec it may not run', () => {
  test("the worker's account: Stalled with what to fix, nothing applied", async () => {
    const { outcome, calls, status, stalled } = await run({
      serviceAccountName: 'rollcall-worker',
    });
    assert.equal(outcome?.kind, 'done');
    assert.deepEqual(calls, ['patchStatus default']);
    assert.equal(status?.summary, 'Stalled');
    assert.equal(stalled?.status, 'True');
    assert.equal(stalled?.reason, 'ForbiddenReference');
    assert.match(stalled?.message ?? '', /rollcall-worker is one of rollcall's controllers'/);
    assert.match(stalled?.message ?? '', /No Deployment or Service is created/);
  });

  test('a caSecretRef to the webhook CA: the Secret is not even read', async () => {
    const { calls, stalled } = await run({
      image: undefined,
      caSecretRef: { name: 'rollcall-webhook-ca', key: 'ca.crt' },
    });
    assert.deepEqual(calls, ['patchStatus default']);
    assert.match(stalled?.message ?? '', /spec\.caSecretRef names Secret rollcall-webhook-ca/);
  });

  test('an existing Deployment is left as it is, and the message says so', async () => {
    const { calls, stalled } = await run(
      {
        env: [
          {
            name: 'K',
            valueFrom: { secretKeyRef: { name: 'rollcall-webhook-ca', key: 'ca.key' } },
          },
        ],
      },
      { withDeployment: true },
    );
    assert.deepEqual(calls, ['patchStatus default']);
    assert.match(
      stalled?.message ?? '',
      /Its Deployment policy-server-default keeps what rollcall last applied/,
    );
  });

  test('the configured guard applies: an image outside the allowlist', async () => {
    const { calls, stalled } = await run(
      {},
      { config: { policyServerGuard: { images: ['registry.example/'] } } },
    );
    assert.deepEqual(calls, ['patchStatus default']);
    assert.match(
      stalled?.message ?? '',
      /spec\.image ghcr\.io\/rollcall\/policy-server:v1 is not allowed/,
    );
  });

  test('an allowed spec is applied as before', async () => {
    const { calls } = await run({ serviceAccountName: 'rollcall-policy-server' });
    assert.deepEqual(calls, ['apply Service', 'apply Deployment', 'patchStatus default']);
  });
});
