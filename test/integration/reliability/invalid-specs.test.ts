// Fault 9: invalid Policy and PolicyServer specs never reach rollcall: the API rejects them
// (server-side dry run, so nothing is created) with a message that names the field.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { before, describe, test } from 'node:test';
import { stringify } from 'yaml';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { testCluster, testKubeConfig } from '../../support/kube.ts';

const rule = { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] };
const policy = (spec: Record<string, unknown>) => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name: 'rel-invalid' },
  spec: { policyServer: 'default', module: 'sim://ok', rules: [rule], ...spec },
});
const server = (spec: Record<string, unknown>, name = 'rel-invalid') => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'PolicyServer',
  metadata: { name },
  spec: { image: 'sim://policy-server', ...spec },
});
const without = (o: { spec: Record<string, unknown> }, field: string) => {
  const { [field]: _dropped, ...spec } = o.spec;
  return { ...o, spec };
};

// [case, object, what the rejection must say]
const cases: [string, unknown, RegExp][] = [
  [
    'a Policy without policyServer',
    without(policy({}), 'policyServer'),
    /spec\.policyServer: Required value/,
  ],
  [
    'a Policy without module, validations or source',
    without(policy({}), 'module'),
    /spec: Invalid value: .*set exactly one of module, validations or source/,
  ],
  [
    'a Policy with both module and validations',
    policy({ validations: [{ expression: 'true' }] }),
    /set exactly one of module, validations or source/,
  ],
  [
    'a Policy with variables but a source',
    policy({
      module: undefined,
      source: { url: 'https://example.com/p.yaml', sha256: 'a'.repeat(64) },
      variables: [{ name: 'x', expression: '1' }],
    }),
    /variables and matchConditions go with validations/,
  ],
  [
    'a Policy whose source digest is not hex SHA-256',
    policy({ module: undefined, source: { url: 'https://example.com/p.yaml', sha256: 'abc' } }),
    /spec\.source\.sha256: Invalid value: "abc"/,
  ],
  [
    'a Policy validation with reason Teapot',
    policy({ module: undefined, validations: [{ expression: 'true', reason: 'Teapot' }] }),
    /spec\.validations\[0\]\.reason: Unsupported value: "Teapot"/,
  ],
  ['a Policy without rules', without(policy({}), 'rules'), /spec\.rules: Required value/],
  [
    'a Policy with failurePolicy Maybe',
    policy({ failurePolicy: 'Maybe' }),
    /spec\.failurePolicy: Unsupported value: "Maybe"/,
  ],
  [
    'a Policy with mode enforce',
    policy({ mode: 'enforce' }),
    /spec\.mode: Unsupported value: "enforce"/,
  ],
  [
    'a Policy with timeoutSeconds 31',
    policy({ timeoutSeconds: 31 }),
    /spec\.timeoutSeconds: Invalid value: 31/,
  ],
  [
    'a Policy with timeoutSeconds "ten"',
    policy({ timeoutSeconds: 'ten' }),
    /spec\.timeoutSeconds: Invalid value: "string"/,
  ],
  [
    'a Policy with operation PATCH',
    policy({ rules: [{ ...rule, operations: ['PATCH'] }] }),
    /spec\.rules\[0\]\.operations\[0\]: Unsupported value: "PATCH"/,
  ],
  [
    "a Policy with '*' among other operations",
    policy({ rules: [{ ...rule, operations: ['*', 'CREATE'] }] }),
    /spec\.rules\[0\].*operations may contain '\*' only as its sole entry/,
  ],
  [
    'a Policy whose selector uses In without values',
    policy({ namespaceSelector: { matchExpressions: [{ key: 'a', operator: 'In' }] } }),
    /spec\.namespaceSelector\.matchExpressions\[0\].*values must be non-empty for In and NotIn/,
  ],
  [
    'a Policy with settings that are not an object',
    policy({ settings: 'strict' }),
    /spec\.settings: Invalid value: "string"/,
  ],
  [
    'a PolicyServer with -1 replicas',
    server({ replicas: -1 }),
    /spec\.replicas: Invalid value: -1/,
  ],
  [
    'a PolicyServer with both caBundle and caSecretRef',
    server({ caBundle: 'Zm9v', caSecretRef: { name: 'ca' } }),
    /caBundle and caSecretRef are mutually exclusive/,
  ],
  [
    'a PolicyServer setting the reserved POD_NAME',
    server({ env: [{ name: 'POD_NAME', value: 'x' }] }),
    /spec\.env.*POD_NAME, POD_NAMESPACE and POLICY_SERVER are reserved/,
  ],
  [
    'a PolicyServer whose name is too long for its Deployment',
    server({}, 'x'.repeat(60)),
    /metadata\.name/,
  ],
];

describe('invalid specs are rejected by the API with a message naming the field', () => {
  before(() => installCrds(testKubeConfig(), { info: () => {} }));
  for (const [name, object, expected] of cases) {
    test(name, () => {
      const state = testCluster();
      const out = spawnSync(
        state.binaries.kube,
        ['kubectl', `--kubeconfig=${state.kubeconfig}`, 'apply', '--dry-run=server', '-f', '-'],
        { input: stringify(object), encoding: 'utf8' },
      );
      assert.notEqual(out.status, 0, `accepted: ${out.stdout}`);
      assert.match(out.stderr, expected);
    });
  }
});
