import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { vapToPolicies } from '../../../cli/authoring/convert-from-vap.ts';
import { celLiteral, policyToVap } from '../../../cli/authoring/convert-to-vap.ts';
import {
  SETTINGS_VARIABLE_ANNOTATION,
  type ConversionNote,
} from '../../../cli/authoring/convert.ts';
import { compilePolicy } from '../../../data-plane/cel/index.ts';
import { cli, scratch } from './helpers.ts';

const policy = (spec: Record<string, unknown>, name = 'p') => ({
  apiVersion: 'rollcall.dev/v1alpha1',
  kind: 'Policy',
  metadata: { name },
  spec: {
    policyServer: 'default',
    rules: [
      {
        operations: ['CREATE'],
        apiGroups: ['apps'],
        apiVersions: ['v1'],
        resources: ['deployments'],
      },
    ],
    ...spec,
  },
});

/** Converted objects, read field by field in assertions. */
type Obj = Record<string, any>;

function converted(input: unknown): { objects: Obj[]; notes: ConversionNote[] } {
  const result = policyToVap(input);
  assert.ok(result.ok, result.ok ? '' : result.errors.join('; '));
  return { objects: result.objects as Obj[], notes: result.notes };
}

const fields = (notes: ConversionNote[]) =>
  notes.map((n) => `${n.lost ? 'lost' : 'note'} ${n.field}`);

describe('a Policy converted to a ValidatingAdmissionPolicy', () => {
  const limit = policy({
    settings: { maxReplicas: 5, names: ['a', 'b'] },
    namespaceSelector: { matchLabels: { team: 'true' } },
    variables: [{ name: 'replicas', expression: 'object.spec.?replicas.orValue(1)' }],
    validations: [
      {
        expression:
          'variables.replicas <= params.maxReplicas && object.spec.template.spec.containers.all(params, params.name != "x")',
        messageExpression: "'at most ' + string(params.maxReplicas)",
        reason: 'Forbidden',
      },
    ],
  });

  test('settings become the first variable as a typed literal, and free params reads are rewritten', () => {
    const [vap] = converted(limit).objects;
    assert.deepEqual(vap?.spec.variables, [
      { name: 'params', expression: '{"maxReplicas": dyn(5), "names": dyn(["a", "b"])}' },
      { name: 'replicas', expression: 'object.spec.?replicas.orValue(1)' },
    ]);
    // `params` bound by the comprehension is the element, not the settings.
    assert.deepEqual(vap?.spec.validations, [
      {
        expression:
          'variables.replicas <= variables.params.maxReplicas && object.spec.template.spec.containers.all(params, params.name != "x")',
        messageExpression: "'at most ' + string(variables.params.maxReplicas)",
        reason: 'Forbidden',
      },
    ]);
    assert.equal(vap?.metadata.annotations[SETTINGS_VARIABLE_ANNOTATION], 'params');
  });

  test('the VAP matches what the rollcall webhook matches, and the binding denies', () => {
    const [vap, binding] = converted(limit).objects;
    assert.deepEqual(vap?.spec.matchConstraints, {
      resourceRules: [
        {
          operations: ['CREATE'],
          apiGroups: ['apps'],
          apiVersions: ['v1'],
          resources: ['deployments'],
          scope: '*',
        },
      ],
      namespaceSelector: {
        matchLabels: { team: 'true' },
        matchExpressions: [
          {
            key: 'kubernetes.io/metadata.name',
            operator: 'NotIn',
            values: ['rollcall-system', 'kube-system', 'kube-node-lease'],
          },
        ],
      },
      objectSelector: {},
      matchPolicy: 'Equivalent',
    });
    assert.equal(vap?.spec.failurePolicy, 'Fail');
    assert.deepEqual(binding, {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: 'p-binding', annotations: { 'rollcall.dev/converted-from': 'Policy/p' } },
      spec: { policyName: 'p', validationActions: ['Deny'] },
    });
  });

  test('every expression of the VAP still compiles', () => {
    const [vap] = converted(limit).objects;
    const result = compilePolicy({
      variables: vap?.spec.variables,
      validations: vap?.spec.validations,
    });
    assert.ok(result.ok, result.ok ? '' : result.errors.join('; '));
  });

  test('what changes on the way is named; nothing of this policy is lost', () => {
    const { notes } = converted(limit);
    assert.deepEqual(fields(notes), [
      'note spec.policyServer',
      'note spec.timeoutSeconds',
      'note spec.validations',
      'note spec.settings',
      'note spec.namespaceSelector',
    ]);
  });

  test('monitor mode binds with Warn; what the apiserver refuses is named as lost', () => {
    const { objects, notes } = converted(
      policy({
        mode: 'monitor',
        validations: [
          { expression: "cel.bind(n, object.metadata.name, n != 'x')", reason: 'Unauthorized' },
        ],
      }),
    );
    assert.deepEqual(objects[1]?.spec.validationActions, ['Warn']);
    assert.deepEqual(
      notes.filter((n) => n.lost).map((n) => n.field),
      ['spec.validations[0].expression', 'spec.validations[0].reason'],
    );
    assert.deepEqual(
      notes.filter((n) => n.field === 'spec.mode').map((n) => [n.message.slice(0, 30), n.lost]),
      [
        ['monitor → validationActions [W', false],
        ['Warn: the warning reads "Valid', false],
      ],
    );
    assert.equal(objects[0]?.spec.variables, undefined, 'no settings, no variable');
  });

  test("validationActions become the binding's as written, the deprecated mode's when absent; each action set comes back", () => {
    const sets = [
      ['Deny'],
      ['Warn'],
      ['Audit'],
      ['Deny', 'Audit'],
      ['Warn', 'Audit'],
      ['Audit', 'Deny'],
    ];
    for (const validationActions of sets) {
      const original = policy({ validationActions, validations: [{ expression: 'true' }] });
      const { objects, notes } = converted(original);
      assert.deepEqual(objects[1]?.spec.validationActions, validationActions);
      assert.equal(
        notes.some((n) => n.lost),
        false,
        'the actions lose nothing',
      );
      assert.equal(
        notes.some((n) => n.message.startsWith('Audit: the audit event annotation')),
        validationActions.includes('Audit'),
      );
      const back = vapToPolicies(objects);
      assert.ok(back.ok);
      assert.deepEqual((back.objects[0] as Obj).spec.validationActions, validationActions);
      assert.equal(
        (back.objects[0] as Obj).spec.mode,
        undefined,
        'the deprecated mode is not written',
      );
    }
    const monitor = converted(policy({ mode: 'monitor', validations: [{ expression: 'true' }] }));
    assert.deepEqual(monitor.objects[1]?.spec.validationActions, ['Warn']);
  });

  test('a source or module policy, or one that does not load, cannot be converted', () => {
    const source = policyToVap(
      policy({ source: { url: 'https://example.com/p.yaml', sha256: 'a'.repeat(64) } }),
    );
    assert.equal(source.ok, false);
    assert.match(
      source.ok ? '' : (source.errors[0] ?? ''),
      /^spec\.source: the code is downloaded/,
    );
    const module = policyToVap(policy({ module: 'sim://deny' }));
    assert.deepEqual(module.ok ? [] : module.errors, [
      'spec.module: a simulator module has no CEL to convert',
    ]);
    const typo = policyToVap(policy({ validations: [{ expression: 'objekt.x' }] }));
    assert.deepEqual(typo.ok ? [] : typo.errors, [
      "spec.validations[0].expression: undeclared reference to 'objekt' at 1:1",
    ]);
  });

  test('a variable named params moves the settings to another name', () => {
    const [vap] = converted(
      policy({
        settings: { max: 1 },
        variables: [{ name: 'params', expression: '1' }],
        validations: [{ expression: 'variables.params <= params.max' }],
      }),
    ).objects;
    assert.equal(vap?.spec.variables[0].name, 'settings');
    assert.equal(vap?.spec.validations[0].expression, 'variables.params <= variables.settings.max');
  });
});

describe('CEL literals of settings', () => {
  test('ints stay ints, fractions doubles, strings are escaped, mixed aggregates are dyn', () => {
    assert.equal(
      celLiteral({ a: 1, b: 0.5, c: 'it\'s "x"\n' }),
      '{"a": dyn(1), "b": dyn(0.5), "c": dyn("it\'s \\"x\\"\\n")}',
    );
    assert.equal(celLiteral([1, 2]), '[1, 2]');
    assert.equal(celLiteral([1, 'a', null, [true]]), '[dyn(1), dyn("a"), dyn(null), dyn([true])]');
    assert.equal(celLiteral({}), '{}');
  });
});

describe('a ValidatingAdmissionPolicy converted to Policies', () => {
  test('a converted Policy converts back to itself', () => {
    const original = policy({
      settings: { maxReplicas: 5, names: ['a'] },
      namespaceSelector: { matchLabels: { team: 'true' } },
      matchConditions: [
        { name: 'not-test', expression: "!object.metadata.name.startsWith('test-')" },
      ],
      variables: [{ name: 'replicas', expression: 'object.spec.?replicas.orValue(1)' }],
      validations: [
        { expression: 'variables.replicas <= params.maxReplicas', message: 'too many' },
        // Optional syntax needs rollcall's environment to parse on the way back.
        { expression: "object.metadata.?name.orValue('') in params.names" },
      ],
    });
    const back = vapToPolicies(converted(original).objects);
    assert.ok(back.ok);
    assert.deepEqual(back.objects, [
      {
        ...original,
        spec: {
          validationActions: ['Deny'],
          failurePolicy: 'Fail',
          ...original.spec,
          rules: [{ ...original.spec.rules[0], scope: '*' }],
        },
      },
    ]);
    assert.deepEqual(back.notes, []);
  });

  const vap = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name: 'max-replicas' },
    spec: {
      failurePolicy: 'Ignore',
      paramKind: { apiVersion: 'v1', kind: 'ConfigMap' },
      matchConstraints: {
        resourceRules: [
          {
            apiGroups: ['apps'],
            apiVersions: ['v1'],
            operations: ['CREATE', 'UPDATE'],
            resources: ['deployments'],
            resourceNames: ['web'],
          },
        ],
      },
      validations: [{ expression: 'object.spec.replicas <= int(params.data.max)' }],
      auditAnnotations: [{ key: 'replicas', valueExpression: 'string(object.spec.replicas)' }],
    },
  };
  const binding = (name: string, spec: Record<string, unknown>) => ({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name },
    spec: { policyName: 'max-replicas', ...spec },
  });
  const configMap = {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'limits', namespace: 'ops' },
    data: { max: '3' },
  };

  test('the param ConfigMap becomes the settings whole, so params.data reads the same; each binding is a Policy', () => {
    const result = vapToPolicies(
      [
        vap,
        binding('deny', {
          validationActions: ['Deny'],
          paramRef: { name: 'limits', namespace: 'ops' },
        }),
        binding('warn', {
          validationActions: ['Warn', 'Audit'],
          paramRef: { name: 'limits', namespace: 'ops' },
        }),
        configMap,
      ],
      { policyServer: 'edge' },
    );
    assert.ok(result.ok, result.ok ? '' : result.errors.join('; '));
    const policies = result.objects as Obj[];
    assert.deepEqual(
      policies.map((p) => [
        p.metadata.name,
        p.spec.validationActions,
        p.spec.policyServer,
        p.spec.failurePolicy,
      ]),
      [
        ['deny', ['Deny'], 'edge', 'Ignore'],
        ['warn', ['Warn', 'Audit'], 'edge', 'Ignore'],
      ],
    );
    assert.deepEqual(policies[0]?.spec.settings, configMap);
    assert.deepEqual(
      result.notes.filter((n) => n.lost).map((n) => n.field),
      [
        'ValidatingAdmissionPolicy/max-replicas spec.matchConstraints.resourceRules[0].resourceNames',
        'ValidatingAdmissionPolicy/max-replicas spec.auditAnnotations',
      ],
    );
  });

  test('a binding whose validationActions a Policy refuses (Deny with Warn) cannot be converted', () => {
    const result = vapToPolicies([
      { ...vap, spec: { ...vap.spec, paramKind: undefined } },
      binding('both', { validationActions: ['Deny', 'Warn'] }),
    ]);
    assert.equal(result.ok, false);
    assert.match(
      result.ok ? '' : result.errors.join('; '),
      /the Policy would be invalid: spec\.validationActions: .*may not combine Deny and Warn/,
    );
  });

  test('a param resource that is not among the objects cannot be converted', () => {
    const result = vapToPolicies([
      vap,
      binding('b', { validationActions: ['Deny'], paramRef: { name: 'limits', namespace: 'ops' } }),
    ]);
    assert.equal(result.ok, false);
    assert.match(
      result.ok ? '' : (result.errors[0] ?? ''),
      /ConfigMap ops\/limits is not among the objects/,
    );
  });

  test('what rollcall would not load is named', () => {
    const result = vapToPolicies([
      {
        ...vap,
        spec: {
          matchConstraints: vap.spec.matchConstraints,
          validations: [{ expression: "isIP(object.metadata.annotations['ip'])" }],
        },
      },
    ]);
    assert.ok(result.ok);
    assert.ok(
      result.notes.some(
        (n) =>
          n.lost &&
          n.message.startsWith(
            "rollcall would not load it: spec.validations[0].expression: uses 'isIP'",
          ),
      ),
    );
  });
});

describe('rollcall convert', () => {
  test('--to vap writes YAML that --from vap turns back, exit 0', async () => {
    const vap = await cli(['convert', '--to', 'vap', 'examples/authoring/policies.yaml']);
    assert.equal(vap.code, 0, vap.stderr);
    const kinds = parseAllDocuments(vap.stdout).map((d) => (d.toJS() as Obj).kind);
    assert.deepEqual(kinds, [
      'ValidatingAdmissionPolicy',
      'ValidatingAdmissionPolicyBinding',
      'ValidatingAdmissionPolicy',
      'ValidatingAdmissionPolicyBinding',
    ]);
    assert.match(
      vap.stderr,
      /^note: Policy\/require-owner spec\.settings: inlined as the first variable/m,
    );
    const dir = scratch({ 'vap.yaml': vap.stdout });
    const back = await cli(['convert', '--from', 'vap', join(dir, 'vap.yaml')]);
    assert.equal(back.code, 0, back.stderr);
    assert.match(back.stdout, /kind: Policy\nmetadata:\n {2}name: require-owner/);
  });

  test('something that does not carry over exits 1, a policy that cannot be converted 2', async () => {
    const dir = scratch({
      'monitor.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: m }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
  validations: [{ expression: "true", reason: Unauthorized }]
`,
      'source.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: s }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
  source: { url: "https://example.com/x.yaml", sha256: "${'a'.repeat(64)}" }
`,
    });
    const lossy = await cli(['convert', '--to', 'vap', join(dir, 'monitor.yaml')]);
    assert.equal(lossy.code, 1);
    assert.match(
      lossy.stderr,
      /^not converted: Policy\/m spec\.validations\[0\]\.reason: Unauthorized/m,
    );
    const source = await cli(['convert', '--to', 'vap', join(dir, 'source.yaml')]);
    assert.equal(source.code, 2);
    assert.match(source.stderr, /rollcall convert: Policy s: spec\.source: /);
    const usage = await cli(['convert', join(dir, 'source.yaml')]);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /give either --to vap or --from vap/);
  });
});
