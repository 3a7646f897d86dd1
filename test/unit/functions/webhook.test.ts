// The webhook function's shell, against a recorded KubeWriter: a webhook that starts serving a
// generation is written only after that generation's PolicyRevision, old revisions are pruned
// only after the webhook, and the CA comes from the right place in each mode.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1ValidatingWebhookConfiguration } from '@kubernetes/client-node';
import { reportsFromPods } from '../../../api/report.ts';
import type { Policy, PolicyRevision, PolicyServerSpec } from '../../../api/v1alpha1.ts';
import { desiredRevision } from '../../../control-plane/functions/revision-core.ts';
import type { FunctionConfig } from '../../../control-plane/functions/types.ts';
import { webhook } from '../../../control-plane/functions/webhook.ts';
import type { PolicyView } from '../../../control-plane/projections/store.ts';
import type { Outcome } from '../../../control-plane/queue/index.ts';
import {
  aPolicy,
  aServerWithDeployment,
  NAMESPACE,
  POLICY_UID,
  reportOf,
  threePods,
} from '../../fixtures/builders.ts';
import { functionContext } from '../../fixtures/function-context.ts';

interface Run {
  outcome: Outcome | void;
  /** Every KubeWriter call, in order: `verb target`. */
  calls: string[];
  applied: V1ValidatingWebhookConfiguration[];
  created: PolicyRevision[];
}

async function run(
  options: {
    server?: Partial<PolicyServerSpec>;
    policy?: Policy;
    revisions?: PolicyRevision[];
    config?: Partial<FunctionConfig>;
    loaded?: boolean;
  } = {},
): Promise<Run> {
  const policy = options.policy ?? aPolicy();
  const { server, deployment, replicaSet } = aServerWithDeployment({
    spec: options.server ?? { caBundle: 'U1BFQwo=' },
  });
  const generation = policy.metadata.generation ?? 0;
  const state = options.loaded === false ? 'Loading' : 'Loaded';
  const pods = threePods(reportOf(policy.metadata.name, generation, state));
  const view: PolicyView = {
    policy,
    policyServer: server,
    deployment,
    replicaSets: [replicaSet],
    pods,
    reports: reportsFromPods(pods, policy.metadata.name),
    webhook: undefined,
  };
  const calls: string[] = [];
  const applied: V1ValidatingWebhookConfiguration[] = [];
  const created: PolicyRevision[] = [];
  const kube = {
    listRevisions: async (name: string) => (calls.push(`list ${name}`), options.revisions ?? []),
    createRevision: async (r: PolicyRevision) => {
      calls.push(`create ${r.metadata.name}`);
      created.push(r);
      return true;
    },
    deleteRevision: async (name: string) => void calls.push(`delete ${name}`),
    apply: async (w: V1ValidatingWebhookConfiguration) => {
      calls.push(`apply ${w.metadata?.name}`);
      applied.push(w);
      return w;
    },
    deleteWebhook: async (name: string) => void calls.push(`deleteWebhook ${name}`),
    getSecret: async (namespace: string, name: string) =>
      void calls.push(`getSecret ${namespace}/${name}`),
  };
  const store = { policyView: async () => view };
  const ctx = functionContext({ store, kube, config: options.config });
  const outcome = await webhook.handle(policy.metadata.name, ctx);
  return { outcome, calls, applied, created };
}

describe('the webhook function', () => {
  test('records the generation as a PolicyRevision, then writes the webhook that serves it', async () => {
    const { outcome, calls, applied, created } = await run();
    assert.equal(outcome?.kind, 'done');
    assert.deepEqual(calls, [
      'list require-labels',
      'create require-labels-4',
      'apply rollcall-require-labels',
    ]);
    assert.equal(created[0]?.spec.policyUID, POLICY_UID);
    assert.deepEqual(applied[0]?.webhooks?.[0]?.clientConfig, {
      service: {
        namespace: NAMESPACE,
        name: 'policy-server-default',
        path: '/validate/require-labels/4',
        port: 443,
      },
      caBundle: 'U1BFQwo=',
    });
  });

  // The writes a run makes, in order, given the revisions that exist.
  const writeOrders: { name: string; revisions: PolicyRevision[]; calls: string[] }[] = [
    {
      name: 'prunes revisions beyond the newest 3 only after the webhook is written',
      revisions: [1, 2, 3].map((g) => desiredRevision(aPolicy({ generation: g }))),
      calls: [
        'list require-labels',
        'create require-labels-4',
        'apply rollcall-require-labels',
        'delete require-labels-1',
      ],
    },
    {
      name: "clears a deleted namesake's revision that holds the name before recording its own",
      revisions: [desiredRevision(aPolicy({ uid: 'uid-old' }))],
      calls: [
        'list require-labels',
        'delete require-labels-4',
        'create require-labels-4',
        'apply rollcall-require-labels',
      ],
    },
  ];
  for (const { name, revisions, calls } of writeOrders) {
    test(name, async () => {
      assert.deepEqual((await run({ revisions })).calls, calls);
    });
  }

  test('writes nothing while the generation is still loading', async () => {
    const { outcome, calls } = await run({ loaded: false });
    assert.equal(outcome?.kind, 'done');
    assert.deepEqual(calls, []);
  });

  test("URL mode calls <url>/validate/<policy>/<generation> with --webhook-ca-file's CA", async () => {
    const { applied, calls } = await run({
      server: {},
      config: { webhookUrl: 'https://127.0.0.1:8443', webhookCaBundle: 'RklMRQo=' },
    });
    assert.deepEqual(applied[0]?.webhooks?.[0]?.clientConfig, {
      url: 'https://127.0.0.1:8443/validate/require-labels/4',
      caBundle: 'RklMRQo=',
    });
    assert.ok(!calls.some((c) => c.startsWith('getSecret')), 'no managed CA in URL mode');
  });

  test('a caSecretRef server whose CA cannot be had gets no webhook and no revision; the job fails with what to do', async () => {
    const { outcome, calls } = await run({
      server: { caSecretRef: { name: 'ca', key: 'ca.crt' } },
    });
    assert.equal(outcome?.kind, 'terminal');
    assert.match(outcome?.kind === 'terminal' ? outcome.reason : '', /caSecretRef/);
    assert.deepEqual(
      calls.filter((c) => !c.startsWith('getSecret')),
      [],
      'reads at most; writes nothing',
    );
  });

  test("rollcall's image before its CA exists: no write, and the job runs again", async () => {
    const { outcome, calls } = await run({ server: { image: undefined } });
    assert.equal(outcome?.kind, 'retry');
    assert.match(
      outcome?.kind === 'retry' ? outcome.error.message : '',
      /webhook CA .* does not exist yet/,
    );
    assert.deepEqual(calls, [`getSecret ${NAMESPACE}/rollcall-webhook-ca`]);
  });
});
