import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parse } from '@marcbachmann/cel-js';
import type { LintProblem } from '../../../cli/authoring/lint-command.ts';
import { constantTruth, variablesRead } from '../../../cli/authoring/lint-checks.ts';
import { compilePolicy } from '../../../data-plane/cel/index.ts';
import { cli, inProcess, scratch } from './helpers.ts';

const ast = (expression: string) => {
  const compiled = compilePolicy({
    variables: [
      { name: 'a', expression: '1' },
      { name: 'b', expression: '2' },
    ],
    validations: [{ expression }],
  });
  assert.ok(compiled.ok, compiled.ok ? '' : compiled.errors.join('; '));
  return compiled.policy.validations[0]!.expression.program.ast;
};

describe('rollcall lint', () => {
  test('a typo exits 1 with the file, line and column of the mistake and the replica’s words', async () => {
    const ran = await cli(['lint', 'examples/policies.yaml']);
    assert.equal(ran.code, 1);
    // The examples may still write the deprecated mode (a warning each): only the error counts.
    const lines = ran.stdout.split('\n').filter((l) => !l.includes(': warning: '));
    assert.deepEqual(lines, [
      "examples/policies.yaml:64:42: error: limit-replicas: spec.validations[0].expression: undeclared reference to 'param' at 1:23",
      lines[1],
      '',
    ]);
    assert.match(lines[1] ?? '', /^3 policies checked: 1 error, \d+ warnings?$/);
  });

  test('the deprecated mode is a warning naming the validationActions to write instead', async () => {
    const policy = (name: string, fields: string) => `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: ${name} }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
${fields}
  validations: [{ expression: "has(object.metadata.labels)" }]
`;
    const dir = scratch({
      'p.yaml': [
        policy('old-protect', '  mode: protect'),
        policy('old-monitor', '  mode: monitor'),
        policy('both', '  mode: monitor\n  validationActions: [Warn, Audit]'),
        policy('current', '  validationActions: [Audit]'),
        policy('defaulted', ''),
      ].join('---\n'),
    });
    const ran = await inProcess(['lint', join(dir, 'p.yaml'), '-o', 'json']);
    assert.equal(ran.code, 0, ran.stdout);
    const problems = (JSON.parse(ran.stdout) as LintProblem[]).map(
      (p) => `${p.line} ${p.severity} ${p.policy} ${p.fieldPath}: ${p.message}`,
    );
    assert.deepEqual(problems, [
      '7 warning old-protect spec.mode: mode is deprecated: write validationActions: [Deny] instead (the same behaviour)',
      '16 warning old-monitor spec.mode: mode is deprecated: write validationActions: [Warn] instead (the same behaviour)',
      '25 warning both spec.mode: mode is deprecated and ignored: validationActions [Warn, Audit] says what a failed validation does; remove mode',
    ]);
  });

  test('validationActions that repeat an action or combine Deny and Warn are errors', async () => {
    const dir = scratch({
      'p.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: contradictory }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
  validationActions: [Deny, Warn]
  validations: [{ expression: "true" }]
`,
    });
    const ran = await inProcess(['lint', join(dir, 'p.yaml'), '-o', 'json']);
    assert.equal(ran.code, 1);
    const [problem] = JSON.parse(ran.stdout) as LintProblem[];
    assert.equal(problem?.fieldPath, 'spec.validationActions');
    assert.match(problem?.message ?? '', /may not combine Deny and Warn/);
  });

  test('clean policies exit 0', async () => {
    const ran = await cli(['lint', 'examples/authoring/policies.yaml']);
    assert.equal(ran.code, 0, ran.stdout);
    assert.equal(ran.stdout, '2 policies checked: 0 errors, 0 warnings\n');
  });

  test('warnings (always true, always false, unused variable) do not fail; every error is listed with its place', async () => {
    const dir = scratch({
      'p.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: loose }
spec:
  policyServer: default
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
  matchConditions:
    - { name: everything, expression: "true" }
  variables:
    - { name: unused, expression: "object.metadata.name" }
  validations:
    - expression: "has(object.spec) || !has(object.spec)"
    - expression: "size(object.spec.containers) < 0"
---
apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: broken }
spec:
  policyServer: default
  timeoutSeconds: 99
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
  validations:
    - expression: |
        object.spec.containers.all(c,
          ip(c.image))
    - expression: "objekt.x == 1"
      reason: Teapot
`,
    });
    const ran = await inProcess(['lint', join(dir, 'p.yaml'), '-o', 'json']);
    assert.equal(ran.code, 1);
    const problems = (JSON.parse(ran.stdout) as LintProblem[]).map(
      (p) => `${p.line}:${p.col} ${p.severity} ${p.policy} ${p.fieldPath}: ${p.message}`,
    );
    assert.deepEqual(problems, [
      '8:39 warning loose spec.matchConditions[0].expression: match condition everything is always true: it leaves out no request',
      '10:15 warning loose spec.variables[0].name: variable unused is never used',
      '12:19 warning loose spec.validations[0].expression: always true: this validation never denies a request',
      '13:19 warning loose spec.validations[1].expression: always false: this validation denies every request it sees',
      '20:19 error broken spec.timeoutSeconds: Too big: expected number to be <=30',
      // Inside a literal block: the line and column of `ip` itself.
      "25:11 error broken spec.validations[0].expression: uses 'ip', a Kubernetes CEL library rollcall does not support (see docs/cel.md) at 2:3",
      "26:20 error broken spec.validations[1].expression: undeclared reference to 'objekt' at 1:1",
      '27:15 error broken spec.validations[1].reason: Invalid option: expected one of "Unauthorized"|"Forbidden"|"Invalid"|"RequestEntityTooLarge"',
    ]);
  });

  test('an over-budget policy, rules over what rollcall guards, and a module are errors', async () => {
    let expression = 'size(x24) > 0';
    for (let i = 24; i >= 1; i--)
      expression = `cel.bind(x${i}, x${i - 1} + x${i - 1}, ${expression})`;
    expression = `cel.bind(x0, [object.metadata.name], ${expression})`;
    const dir = scratch({
      'p.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: costly }
spec:
  policyServer: default
  rules: [{ operations: ["*"], apiGroups: ["*"], apiVersions: ["*"], resources: ["*"] }]
  validations: [{ expression: ${JSON.stringify(expression)} }]
---
apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: simulated }
spec:
  policyServer: default
  module: sim://deny
  rules: [{ operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }]
`,
    });
    const ran = await inProcess(['lint', join(dir, 'p.yaml'), '-o', 'json']);
    assert.equal(ran.code, 1);
    const problems = JSON.parse(ran.stdout) as LintProblem[];
    assert.deepEqual(
      problems.map((p) => [p.policy, p.fieldPath]),
      [
        ['costly', 'spec.rules[0]'],
        ['costly', 'spec.validations[0].expression'],
        ['simulated', 'spec.module'],
      ],
    );
    assert.match(
      problems[0]?.message ?? '',
      /^rollcall would not register a webhook \(Stalled, InterceptsClusterCriticalResources\): spec\.rules\[0\] \(apiGroups \["\*"\], resources \["\*"\]\) would intercept nodes/,
    );
    assert.equal(problems[1]?.message, 'estimated cost 10^8 exceeds the per-request budget 10^7');
    assert.match(problems[2]?.message ?? '', /^module policies run only under the simulator/);
  });

  test('a file that cannot be read or holds no Policy exits 2', async () => {
    const dir = scratch({ 'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: x }\n' });
    const ran = await cli(['lint', join(dir, 'cm.yaml'), join(dir, 'missing.yaml')]);
    assert.equal(ran.code, 2);
    assert.match(ran.stderr, /cm\.yaml: no rollcall\.dev\/v1alpha1 Policy in it/);
    assert.match(ran.stderr, /missing\.yaml: no such file/);
  });
});

describe('what lint finds always true or always false', () => {
  const cases: [string, boolean | undefined][] = [
    ['true', true],
    ['!false', true],
    ['object.a == 1 || true', true],
    ['has(object.a) || !has(object.a)', true],
    ['has(object.a) && !has(object.a)', false],
    ['object.a == object.a', true],
    ['object.a != object.a', false],
    ["'a' < 'b'", true],
    ['1 > 2', false],
    ['size(object.items) >= 0', true],
    ['object.items.size() < 0', false],
    ["[].all(x, x == 'a')", true],
    ["[].exists(x, x == 'a')", false],
    ['object.items.all(x, true)', true],
    ['object.a == 1 ? true : true', true],
    // Shapes that depend on the request are left alone.
    ['object.a == 1', undefined],
    ['object.items.all(x, x > 0)', undefined],
    ['has(object.a) || has(object.b)', undefined],
    ['object.x == object.y', undefined],
  ];
  for (const [expression, expected] of cases)
    test(`${expression}: ${expected === undefined ? 'not fixed' : expected}`, () => {
      assert.equal(constantTruth(ast(expression)), expected);
    });

  test('variables are read as members, optional members and by index; a bare use reads them all', () => {
    assert.deepEqual([...variablesRead(ast("variables.a == 1 && variables['b'] == 2"))].sort(), [
      'a',
      'b',
    ]);
    assert.deepEqual([...variablesRead(ast('variables.?a.orValue(0) == 1'))], ['a']);
    assert.deepEqual([...variablesRead(parse("'a' in variables").ast)], ['*']);
  });
});
