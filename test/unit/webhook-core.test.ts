import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1ValidatingWebhookConfiguration } from '@kubernetes/client-node';
import fc from 'fast-check';
import {
  VALIDATION_ACTIONS,
  type LabelSelector,
  type Rule,
  type ValidationAction,
} from '../../api/v1alpha1.ts';
import {
  buildWebhookConfiguration,
  excludedNamespaces,
  guardedResourcesInterceptedBy,
  interceptionMessage,
  isSubset,
  planWebhook,
  servedGenerationOf,
  webhookFailurePolicy,
  webhookLags,
  type WebhookIntent,
  type WebhookPlanInput,
} from '../../control-plane/functions/webhook-core.ts';
import { aPolicy, aPolicyServer, NAMESPACE } from '../fixtures/builders.ts';

const server = aPolicyServer({ spec: { caBundle: 'Q0EK' } });
const policy = aPolicy();
const options = { namespace: NAMESPACE };
const CA = 'Q0EK';
/** What every webhook excludes by default: rollcall's namespace, then the protected ones. */
const EXCLUDED = [NAMESPACE, 'kube-system', 'kube-node-lease'];

/** What the API server hands back: our object plus the fields it adds. */
function asStored(webhook: V1ValidatingWebhookConfiguration): V1ValidatingWebhookConfiguration {
  const stored = structuredClone(webhook);
  stored.metadata = { ...stored.metadata, uid: 'uid-vwc', resourceVersion: '42', generation: 1 };
  return stored;
}

describe('buildWebhookConfiguration', () => {
  const vwc = buildWebhookConfiguration(policy, server, options, CA);
  const hook = vwc.webhooks?.[0];

  test('is named after the policy, labelled as managed by rollcall and owned by the Policy', () => {
    assert.equal(vwc.metadata?.name, 'rollcall-require-labels');
    assert.equal(vwc.metadata?.labels?.['app.kubernetes.io/managed-by'], 'rollcall');
    assert.equal(vwc.metadata?.labels?.['rollcall.dev/policy'], 'require-labels');
    assert.deepEqual(vwc.metadata?.ownerReferences, [
      {
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'Policy',
        name: 'require-labels',
        uid: 'uid-pol',
        controller: true,
      },
    ]);
  });

  test('records the generation its rules come from', () => {
    assert.equal(vwc.metadata?.annotations?.['rollcall.dev/served-generation'], '4');
  });

  test("calls the policy server's Service at /validate/<policy>/<generation> with the server's CA", () => {
    assert.deepEqual(hook?.clientConfig, {
      service: {
        namespace: NAMESPACE,
        name: 'policy-server-default',
        path: '/validate/require-labels/4',
        port: 443,
      },
      caBundle: 'Q0EK',
    });
  });

  test("has no side effects, speaks AdmissionReview v1 and copies the policy's rules and settings", () => {
    assert.equal(hook?.sideEffects, 'None');
    assert.deepEqual(hook?.admissionReviewVersions, ['v1']);
    assert.equal(hook?.failurePolicy, 'Fail');
    assert.equal(hook?.timeoutSeconds, 10);
    assert.deepEqual(hook?.rules, policy.spec.rules);
    assert.deepEqual(hook?.objectSelector, {});
  });

  const selectorRows: { name: string; selector: LabelSelector | undefined; expected: unknown }[] = [
    {
      name: "without a namespaceSelector, rollcall's namespace, kube-system and kube-node-lease are excluded",
      selector: undefined,
      expected: {
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: EXCLUDED },
        ],
      },
    },
    {
      name: "the policy's namespaceSelector is kept and the protected namespaces excluded on top",
      selector: {
        matchLabels: { team: 'a' },
        matchExpressions: [{ key: 'env', operator: 'In' as const, values: ['prod'] }],
      },
      expected: {
        matchLabels: { team: 'a' },
        matchExpressions: [
          { key: 'env', operator: 'In', values: ['prod'] },
          { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: EXCLUDED },
        ],
      },
    },
    {
      name: "a policy that selects rollcall's namespace by name still cannot reach it",
      selector: {
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'In' as const, values: [NAMESPACE] },
        ],
      },
      expected: {
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'In', values: [NAMESPACE] },
          { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: EXCLUDED },
        ],
      },
    },
    {
      name: 'a policy that selects kube-system by name still cannot reach it',
      selector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
      expected: {
        matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' },
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: EXCLUDED },
        ],
      },
    },
  ];
  for (const row of selectorRows) {
    test(row.name, () => {
      const built = buildWebhookConfiguration(
        aPolicy({ spec: { namespaceSelector: row.selector } }),
        server,
        options,
      );
      assert.deepEqual(built.webhooks?.[0]?.namespaceSelector, row.expected);
    });
  }

  test("the configured protected namespaces replace the defaults, after rollcall's own", () => {
    const built = buildWebhookConfiguration(policy, server, {
      ...options,
      protectedNamespaces: ['kube-system', 'cert-manager'],
    });
    assert.deepEqual(built.webhooks?.[0]?.namespaceSelector?.matchExpressions?.at(-1)?.values, [
      NAMESPACE,
      'kube-system',
      'cert-manager',
    ]);
  });

  test('monitor mode registers the webhook but never fails closed', () => {
    const built = buildWebhookConfiguration(
      aPolicy({ spec: { mode: 'monitor', failurePolicy: 'Fail' } }),
      server,
      options,
    );
    assert.equal(built.webhooks?.[0]?.failurePolicy, 'Ignore');
  });

  // [validationActions (undefined: from mode), mode, the policy's failurePolicy, the webhook's]
  const failureRows: [
    ValidationAction[] | undefined,
    'protect' | 'monitor',
    'Fail' | 'Ignore',
    string,
  ][] = [
    [['Deny'], 'protect', 'Fail', 'Fail'],
    [['Deny'], 'protect', 'Ignore', 'Ignore'],
    [['Deny', 'Audit'], 'protect', 'Fail', 'Fail'],
    [['Audit', 'Deny'], 'monitor', 'Fail', 'Fail'],
    [['Warn'], 'protect', 'Fail', 'Ignore'],
    [['Audit'], 'protect', 'Fail', 'Ignore'],
    [['Warn', 'Audit'], 'protect', 'Fail', 'Ignore'],
    [undefined, 'protect', 'Fail', 'Fail'],
    [undefined, 'monitor', 'Fail', 'Ignore'],
  ];
  for (const [actions, mode, failurePolicy, expected] of failureRows) {
    test(`validationActions ${actions ? JSON.stringify(actions) : `absent, mode ${mode}`} with failurePolicy ${failurePolicy}: the webhook's is ${expected}`, () => {
      const spec = { mode, failurePolicy, ...(actions && { validationActions: actions }) };
      const built = buildWebhookConfiguration(aPolicy({ spec }), server, options, CA);
      assert.equal(built.webhooks?.[0]?.failurePolicy, expected);
    });
  }

  test('whatever the actions, mode and failurePolicy: the webhook fails closed only for a policy that may deny and asks to', () => {
    const actions = fc.option(
      fc.subarray([...VALIDATION_ACTIONS], { minLength: 1, maxLength: 2 }),
      { nil: undefined },
    );
    fc.assert(
      fc.property(
        actions,
        fc.constantFrom('protect' as const, 'monitor' as const),
        fc.constantFrom('Fail' as const, 'Ignore' as const),
        (validationActions, mode, failurePolicy) => {
          const spec = { mode, failurePolicy, ...(validationActions && { validationActions }) };
          const got = buildWebhookConfiguration(aPolicy({ spec }), server, options, CA)
            .webhooks?.[0]?.failurePolicy;
          const mayDeny = validationActions
            ? validationActions.includes('Deny')
            : mode === 'protect';
          assert.equal(got === 'Fail', mayDeny && failurePolicy === 'Fail');
          assert.equal(webhookFailurePolicy(spec), got);
        },
      ),
    );
  });

  test('URL mode calls https://host:port/validate/<policy>/<generation> for out-of-cluster development', () => {
    const built = buildWebhookConfiguration(
      policy,
      server,
      { ...options, url: 'https://host.docker.internal:8443/' },
      CA,
    );
    assert.deepEqual(built.webhooks?.[0]?.clientConfig, {
      url: 'https://host.docker.internal:8443/validate/require-labels/4',
      caBundle: 'Q0EK',
    });
  });

  test("the path follows the Policy's generation", () => {
    const built = buildWebhookConfiguration(aPolicy({ generation: 7 }), server, options, CA);
    assert.equal(built.webhooks?.[0]?.clientConfig.service?.path, '/validate/require-labels/7');
  });

  test('the caBundle is the one the shell resolved, not read from the spec', () => {
    const built = buildWebhookConfiguration(policy, server, options, 'U0VDUkVUCg==');
    assert.equal(built.webhooks?.[0]?.clientConfig.caBundle, 'U0VDUkVUCg==');
  });

  test('without any CA the clientConfig carries no caBundle', () => {
    const built = buildWebhookConfiguration(policy, server, options);
    assert.ok(!('caBundle' in (built.webhooks?.[0]?.clientConfig ?? {})));
  });
});

describe('planWebhook follows the decision table', () => {
  const current = asStored(buildWebhookConfiguration(policy, server, options, CA));
  const older = asStored(
    buildWebhookConfiguration(aPolicy({ generation: 3 }), server, options, CA),
  );
  const caSecretRefServer = aPolicyServer({
    spec: { caSecretRef: { name: 'ca', key: 'ca.crt' } },
  });
  const unresolved = {
    blocked:
      'PolicyServer default sets spec.caSecretRef, which this rollcall version does not resolve; set spec.caBundle (base64 PEM of the CA) instead.',
  };
  const serve: WebhookIntent = { kind: 'serve', generation: 4 };
  /** Generation 3's webhook as a rollcall that protected only its own namespace wrote it. */
  const olderOwnNamespaceOnly = asStored(
    buildWebhookConfiguration(
      aPolicy({ generation: 3 }),
      server,
      { ...options, protectedNamespaces: [] },
      CA,
    ),
  );
  const everything = aPolicy({
    spec: {
      rules: [
        { operations: ['*'], apiGroups: ['*'], apiVersions: ['*'], resources: ['*'], scope: '*' },
      ],
    },
  });
  const base: WebhookPlanInput = {
    policy,
    policyServer: server,
    intent: serve,
    existing: undefined,
    options,
    ca: { caBundle: CA },
  };

  const rows: { name: string; input: Partial<WebhookPlanInput>; action: string }[] = [
    { name: 'Ready and no webhook yet: create it', input: {}, action: 'create' },
    {
      name: 'Ready but the rules intercept guarded resources (the policy core stalls it): write nothing',
      input: { policy: everything },
      action: 'keep',
    },
    {
      name: 'Ready with guarded rules and an older webhook: the older webhook stays as it is',
      input: { policy: everything, existing: older },
      action: 'keep',
    },
    {
      name: 'Ready and the webhook excludes fewer namespaces than configured: update it',
      input: {
        existing: asStored(
          buildWebhookConfiguration(policy, server, { ...options, protectedNamespaces: [] }, CA),
        ),
      },
      action: 'update',
    },
    {
      name: 'Ready and the webhook serves an older generation: update it',
      input: { existing: older },
      action: 'update',
    },
    {
      name: 'Ready and the webhook is already as desired: keep it (no write)',
      input: { existing: current },
      action: 'keep',
    },
    {
      name: 'Ready but the CA changed: update it',
      input: { existing: current, ca: { caBundle: 'TkVXCg==' } },
      action: 'update',
    },
    {
      name: 'Ready but the CA cannot be had (an unresolved caSecretRef): write nothing, say why',
      input: { policyServer: caSecretRefServer, ca: unresolved },
      action: 'blocked',
    },
    {
      name: 'Ready, the webhook present, and the CA cannot be had: leave it, say why',
      input: { existing: older, ca: unresolved },
      action: 'blocked',
    },
    {
      name: 'caSecretRef with the CA given by --webhook-ca-file: create it',
      input: { policyServer: caSecretRefServer, ca: { caBundle: CA } },
      action: 'create',
    },
    {
      name: 'still loading while the CA cannot be had: keep (only a write needs the CA)',
      input: { intent: { kind: 'keep' }, existing: older, ca: unresolved },
      action: 'keep',
    },
    {
      name: 'policy deleted while the CA cannot be had: delete the webhook all the same',
      input: { policy: undefined, existing: current, ca: unresolved },
      action: 'delete',
    },
    {
      name: 'still loading with an older generation served: keep the old rules',
      input: { intent: { kind: 'keep' }, existing: older },
      action: 'keep',
    },
    {
      name: 'never loaded: no webhook, nothing to do',
      input: { intent: { kind: 'absent' } },
      action: 'keep',
    },
    {
      name: 'nothing fully loaded but a webhook exists: delete it',
      input: { intent: { kind: 'absent' }, existing: older },
      action: 'delete',
    },
    {
      name: 'server missing and the webhook present: leave it unchanged',
      input: { intent: { kind: 'keep' }, existing: older, policyServer: undefined },
      action: 'keep',
    },
    {
      name: 'policy deleted: delete the webhook',
      input: { policy: undefined, existing: current },
      action: 'delete',
    },
    {
      name: 'policy deleted and no webhook: nothing to do',
      input: { policy: undefined },
      action: 'keep',
    },
    {
      name: "policy deleted but the webhook is not rollcall's: leave it alone",
      input: {
        policy: undefined,
        existing: { metadata: { name: 'rollcall-require-labels', labels: {} } },
      },
      action: 'keep',
    },
    {
      name: 'a webhook left by a deleted namesake Policy (other uid) is deleted rather than kept',
      input: {
        intent: { kind: 'keep' },
        existing: asStored(
          buildWebhookConfiguration(aPolicy({ uid: 'uid-old' }), server, options, CA),
        ),
      },
      action: 'delete',
    },
    {
      name: "still loading while the server's CA bundle changed: only the caBundle follows",
      input: { intent: { kind: 'keep' }, existing: older, ca: { caBundle: 'TkVXCg==' } },
      action: 'refresh',
    },
    {
      name: "still loading and the kept webhook excludes only rollcall's namespace: the exclusion follows",
      input: { intent: { kind: 'keep' }, existing: olderOwnNamespaceOnly },
      action: 'refresh',
    },
    {
      name: 'server missing and the kept webhook excludes too few namespaces: the exclusion follows all the same',
      input: { intent: { kind: 'keep' }, existing: olderOwnNamespaceOnly, policyServer: undefined },
      action: 'refresh',
    },
    {
      name: 'URL mode, still loading, the exclusion out of date: the exclusion follows',
      input: {
        intent: { kind: 'keep' },
        existing: olderOwnNamespaceOnly,
        options: { ...options, url: 'https://127.0.0.1:8443' },
      },
      action: 'refresh',
    },
    {
      name: 'still loading, the webhook calls another server (the Policy moved): keep its CA',
      input: {
        intent: { kind: 'keep' },
        existing: older,
        policyServer: aPolicyServer({ name: 'other', spec: { caBundle: 'TkVXCg==' } }),
        ca: { caBundle: 'TkVXCg==' },
      },
      action: 'keep',
    },
  ];
  for (const row of rows) {
    test(row.name, () => {
      const plan = planWebhook({ ...base, ...row.input });
      assert.equal(plan.action, row.action);
      if (plan.action === 'create' || plan.action === 'update') {
        assert.equal(plan.webhook.metadata?.annotations?.['rollcall.dev/served-generation'], '4');
      }
      if (plan.action === 'delete') assert.equal(plan.name, 'rollcall-require-labels');
      if (plan.action === 'blocked') {
        assert.match(plan.reason, /caSecretRef.*set spec\.caBundle/);
        assert.match(plan.reason, /The webhook of Policy require-labels is left unchanged\.$/);
      }
    });
  }
});

test("a kept webhook's new caBundle leaves its rules, path and served generation as they were", () => {
  const older = asStored(
    buildWebhookConfiguration(aPolicy({ generation: 3 }), server, options, CA),
  );
  const plan = planWebhook({
    policy: aPolicy({ generation: 4 }),
    policyServer: server,
    intent: { kind: 'keep' },
    existing: older,
    options,
    ca: { caBundle: 'TkVXCg==' },
  });
  assert.equal(plan.action, 'refresh');
  if (plan.action !== 'refresh') return;
  const expected = structuredClone(older);
  expected.webhooks![0]!.clientConfig.caBundle = 'TkVXCg==';
  assert.deepEqual(plan.webhook.webhooks, expected.webhooks);
  assert.equal(
    plan.webhook.webhooks?.[0]?.clientConfig.service?.path,
    '/validate/require-labels/3',
  );
  assert.deepEqual(plan.webhook.metadata?.annotations, { 'rollcall.dev/served-generation': '3' });
  assert.deepEqual(plan.webhook.metadata?.ownerReferences, older.metadata?.ownerReferences);
});

test("a kept webhook's new exclusion replaces only rollcall's last expression, nothing else", () => {
  const oldPolicy = aPolicy({
    generation: 3,
    spec: {
      namespaceSelector: {
        matchLabels: { team: 'a' },
        matchExpressions: [
          { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['x'] },
        ],
      },
    },
  });
  const written = asStored(
    buildWebhookConfiguration(oldPolicy, server, { ...options, protectedNamespaces: [] }, CA),
  );
  const plan = planWebhook({
    policy: aPolicy({ generation: 4 }),
    policyServer: server,
    intent: { kind: 'keep' },
    existing: written,
    options,
    ca: { caBundle: CA },
  });
  assert.equal(plan.action, 'refresh');
  if (plan.action !== 'refresh') return;
  const expected = structuredClone(written);
  expected.webhooks![0]!.namespaceSelector = {
    matchLabels: { team: 'a' },
    matchExpressions: [
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['x'] },
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: EXCLUDED },
    ],
  };
  assert.deepEqual(plan.webhook.webhooks, expected.webhooks);
  assert.deepEqual(plan.webhook.metadata?.annotations, { 'rollcall.dev/served-generation': '3' });
  // Once refreshed, the next run has nothing to do.
  const again = planWebhook({
    policy: aPolicy({ generation: 4 }),
    policyServer: server,
    intent: { kind: 'keep' },
    existing: asStored(plan.webhook),
    options,
    ca: { caBundle: CA },
  });
  assert.equal(again.action, 'keep');
});

describe('excludedNamespaces', () => {
  const rows: { name: string; protectedNamespaces?: string[]; expected: string[] }[] = [
    {
      name: "by default: rollcall's namespace, kube-system and kube-node-lease",
      expected: EXCLUDED,
    },
    {
      name: "an empty list still excludes rollcall's own namespace",
      protectedNamespaces: [],
      expected: [NAMESPACE],
    },
    {
      name: "rollcall's namespace named again in the list is excluded once, first",
      protectedNamespaces: ['kube-system', NAMESPACE],
      expected: [NAMESPACE, 'kube-system'],
    },
  ];
  for (const row of rows)
    test(row.name, () =>
      assert.deepEqual(
        excludedNamespaces({ namespace: NAMESPACE, protectedNamespaces: row.protectedNamespaces }),
        row.expected,
      ),
    );
});

describe('guardedResourcesInterceptedBy: which rules would intercept what keeps the cluster alive', () => {
  const rule = (apiGroups: string[], resources: string[]): Rule => ({
    operations: ['CREATE', 'UPDATE'],
    apiGroups,
    apiVersions: ['*'],
    resources,
    scope: '*',
  });
  const rows: { name: string; rules: Rule[]; expected: { rule: number; resources: string[] }[] }[] =
    [
      {
        name: 'pods in the core group intercept nothing guarded',
        rules: [rule([''], ['pods'])],
        expected: [],
      },
      {
        name: 'deployments/scale and every scale subresource intercept nothing guarded',
        rules: [rule(['apps'], ['deployments/scale']), rule(['*'], ['*/scale'])],
        expected: [],
      },
      {
        name: 'nodes in the core group are refused',
        rules: [rule([''], ['nodes'])],
        expected: [{ rule: 0, resources: ['/nodes'] }],
      },
      {
        name: 'nodes/status (the kubelet heartbeat) is refused, and so is nodes/*',
        rules: [rule([''], ['nodes/status']), rule([''], ['nodes/*'])],
        expected: [
          { rule: 0, resources: ['/nodes/status'] },
          { rule: 1, resources: ['/nodes', '/nodes/status'] },
        ],
      },
      {
        name: 'nodes in another API group are not the core nodes',
        rules: [rule(['metrics.k8s.io'], ['nodes'])],
        expected: [],
      },
      {
        name: 'leases are refused, by name or by a wildcard group',
        rules: [rule(['coordination.k8s.io'], ['leases']), rule(['*'], ['leases'])],
        expected: [
          { rule: 0, resources: ['coordination.k8s.io/leases'] },
          { rule: 1, resources: ['coordination.k8s.io/leases'] },
        ],
      },
      {
        name: 'every resource of the authentication group covers tokenreviews and selfsubjectreviews',
        rules: [rule(['authentication.k8s.io'], ['*'])],
        expected: [
          {
            rule: 0,
            resources: [
              'authentication.k8s.io/tokenreviews',
              'authentication.k8s.io/selfsubjectreviews',
            ],
          },
        ],
      },
      {
        name: 'one access review named among others is refused',
        rules: [rule(['authorization.k8s.io'], ['subjectaccessreviews'])],
        expected: [{ rule: 0, resources: ['authorization.k8s.io/subjectaccessreviews'] }],
      },
      {
        name: "rollcall's own kinds are refused (a failing webhook there would stop you fixing it)",
        rules: [rule(['rollcall.dev'], ['policies', 'policyrevisions'])],
        expected: [
          { rule: 0, resources: ['rollcall.dev/policies', 'rollcall.dev/policyrevisions'] },
        ],
      },
      {
        name: "every status subresource covers nodes/status and rollcall's statuses",
        rules: [rule(['*'], ['*/status'])],
        expected: [
          {
            rule: 0,
            resources: [
              '/nodes/status',
              'rollcall.dev/policies/status',
              'rollcall.dev/policyservers/status',
            ],
          },
        ],
      },
      {
        name: "'*' in every group covers every guarded resource but the subresources",
        rules: [rule(['*'], ['*'])],
        expected: [
          {
            rule: 0,
            resources: [
              '/nodes',
              'coordination.k8s.io/leases',
              'authentication.k8s.io/tokenreviews',
              'authentication.k8s.io/selfsubjectreviews',
              'authorization.k8s.io/subjectaccessreviews',
              'authorization.k8s.io/selfsubjectaccessreviews',
              'authorization.k8s.io/localsubjectaccessreviews',
              'authorization.k8s.io/selfsubjectrulesreviews',
              'rollcall.dev/policies',
              'rollcall.dev/policyservers',
              'rollcall.dev/policyrevisions',
            ],
          },
        ],
      },
      {
        name: "'*/*' in the core group covers nodes and nodes/status only",
        rules: [rule([''], ['*/*'])],
        expected: [{ rule: 0, resources: ['/nodes', '/nodes/status'] }],
      },
      {
        name: 'only the rules that intercept are named, by their index',
        rules: [rule([''], ['pods']), rule(['apps'], ['*']), rule(['', 'apps'], ['*'])],
        expected: [{ rule: 2, resources: ['/nodes'] }],
      },
    ];
  for (const row of rows)
    test(row.name, () =>
      assert.deepEqual(
        guardedResourcesInterceptedBy(row.rules).map(({ rule, resources }) => ({
          rule,
          resources: resources.map((r) => `${r.group}/${r.resource}`),
        })),
        row.expected,
      ),
    );

  test('the message names each rule by its field path, its patterns, what it reaches and what to do', () => {
    const rules = [rule([''], ['pods']), rule(['*'], ['*/*'])];
    const message = interceptionMessage(rules, guardedResourcesInterceptedBy(rules));
    assert.match(
      message,
      /^spec\.rules\[1\] \(apiGroups \["\*"\], resources \["\*\/\*"\]\) would intercept nodes, nodes\/status \(core\); leases \(coordination\.k8s\.io\); tokenreviews, selfsubjectreviews \(authentication\.k8s\.io\); subjectaccessreviews, selfsubjectaccessreviews, localsubjectaccessreviews, selfsubjectrulesreviews \(authorization\.k8s\.io\); policies, policies\/status, policyservers, policyservers\/status, policyrevisions \(rollcall\.dev\): /,
    );
    assert.match(message, /list the resources you mean explicitly, leaving these out$/);
    assert.doesNotMatch(message, /spec\.rules\[0\]/);
  });
});

describe('servedGenerationOf', () => {
  const webhook = buildWebhookConfiguration(policy, server, options);
  const rows = [
    { name: "reads the generation of this Policy's webhook", existing: webhook, expected: 4 },
    { name: 'is undefined without a webhook', existing: undefined, expected: undefined },
    {
      name: 'is undefined for a webhook owned by another Policy uid',
      existing: buildWebhookConfiguration(aPolicy({ uid: 'uid-old' }), server, options),
      expected: undefined,
    },
    {
      name: 'is undefined for an unreadable annotation',
      existing: {
        ...webhook,
        metadata: { ...webhook.metadata, annotations: { 'rollcall.dev/served-generation': '4x' } },
      },
      expected: undefined,
    },
  ];
  for (const row of rows) {
    test(row.name, () => assert.equal(servedGenerationOf(row.existing, policy), row.expected));
  }
});

describe('webhookLags: whether a computed intent moves the webhook (the policy function then enqueues it)', () => {
  const serving4 = buildWebhookConfiguration(policy, server, options);
  const serving3 = buildWebhookConfiguration(aPolicy({ generation: 3 }), server, options);
  const rows = [
    {
      name: 'serve 4, the webhook serves 4',
      intent: { kind: 'serve', generation: 4 },
      existing: serving4,
      lags: false,
    },
    {
      name: 'serve 4, the webhook serves 3',
      intent: { kind: 'serve', generation: 4 },
      existing: serving3,
      lags: true,
    },
    {
      name: 'serve 4, no webhook yet',
      intent: { kind: 'serve', generation: 4 },
      existing: undefined,
      lags: true,
    },
    {
      name: 'absent, a webhook exists',
      intent: { kind: 'absent' },
      existing: serving3,
      lags: true,
    },
    { name: 'absent, none', intent: { kind: 'absent' }, existing: undefined, lags: false },
    { name: 'keep, whatever it serves', intent: { kind: 'keep' }, existing: serving3, lags: false },
  ] as const;
  for (const row of rows)
    test(row.name, () => assert.equal(webhookLags(row.intent, row.existing, policy), row.lags));
});

describe('isSubset', () => {
  const rows = [
    {
      name: 'extra fields in the actual object are ignored',
      desired: { a: 1 },
      actual: { a: 1, b: 2 },
      expected: true,
    },
    {
      name: 'a different value is not a subset',
      desired: { a: 1 },
      actual: { a: 2 },
      expected: false,
    },
    {
      name: 'a missing field is not a subset',
      desired: { a: { b: 1 } },
      actual: { a: {} },
      expected: false,
    },
    {
      name: 'lists must have the same length',
      desired: { l: [1] },
      actual: { l: [1, 2] },
      expected: false,
    },
    {
      name: 'lists compare element by element',
      desired: { l: [{ x: 1 }] },
      actual: { l: [{ x: 1, y: 2 }] },
      expected: true,
    },
    {
      name: 'undefined in desired means do not care',
      desired: { a: undefined },
      actual: {},
      expected: true,
    },
  ];
  for (const row of rows)
    test(row.name, () => assert.equal(isSubset(row.desired, row.actual), row.expected));
});
