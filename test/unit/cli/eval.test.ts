import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { stringify } from 'yaml';
import { demoManifests, manifestsYaml } from '../../../tooling/demo/manifests.ts';
import type { EvalReport } from '../../../cli/authoring/eval-command.ts';
import { compileWithinBudget } from '../../../data-plane/cel/index.ts';
import { neededLoads } from '../../../data-plane/lifecycle.ts';
import { loadNeed } from '../../../data-plane/load.ts';
import { cli, inProcess, policyYaml, scratch } from './helpers.ts';

const manifests = demoManifests('http://127.0.0.1:9');
const byName = (name: string) =>
  manifests.find((m) => (m.metadata as { name: string }).name === name) as Record<string, unknown>;
const demoNamespace = manifests.find((m) => m.kind === 'Namespace') as Record<string, unknown>;
const namespaceName = (demoNamespace.metadata as { name: string }).name;

const pod = (labels?: Record<string, string>) =>
  stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'web', namespace: namespaceName, ...(labels ? { labels } : {}) },
    spec: { containers: [{ name: 'web', image: 'nginx:1.27' }] },
  });

const dir = scratch({
  'require-labels.yaml': manifestsYaml([byName('require-labels')]),
  'limit-replicas.yaml': manifestsYaml([byName('limit-replicas')]),
  'demo.yaml': manifestsYaml(manifests),
  'namespace.yaml': manifestsYaml([demoNamespace]),
  'pod-without-owner.yaml': pod(),
  'pod-with-owner.yaml': pod({ owner: 'team-a' }),
  'deployment.yaml': stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: 'apps' },
    spec: { replicas: 3 },
  }),
});
const at = (name: string) => join(dir, name);

/** The message a policy-server replica reports for `policy`, from its own load functions. */
async function replicaMessage(policy: Record<string, unknown>): Promise<string> {
  const object = { ...policy, metadata: { ...(policy.metadata as object), uid: 'u' } };
  const [entry] = neededLoads([object], []);
  assert.ok(entry);
  const outcome = await loadNeed(entry.current, { compile: compileWithinBudget });
  assert.equal(outcome.state, 'Failed');
  return outcome.state === 'Failed' ? outcome.message : '';
}

describe('rollcall eval, acceptance 2: the demo’s policies', () => {
  test('require-labels on a pod without the owner label exits 1 with the policy’s message', async () => {
    const ran = await cli([
      'eval',
      at('require-labels.yaml'),
      at('pod-without-owner.yaml'),
      '--namespace-object',
      at('namespace.yaml'),
    ]);
    assert.equal(ran.code, 1, ran.stderr);
    assert.match(ran.stdout, /^verdict +denied \(403 Forbidden\)$/m);
    assert.match(ran.stdout, /^message +pods in the demo namespace need an owner label$/m);
  });

  test('require-labels on a pod with the owner label exits 0', async () => {
    const ran = await cli([
      'eval',
      at('require-labels.yaml'),
      at('pod-with-owner.yaml'),
      '--namespace-object',
      at('namespace.yaml'),
    ]);
    assert.equal(ran.code, 0, ran.stderr);
    assert.match(ran.stdout, /^verdict +admitted$/m);
  });

  test('a policy with a typo exits 2 with the very message a replica reports', async () => {
    const ran = await cli(['eval', at('limit-replicas.yaml'), at('deployment.yaml')]);
    assert.equal(ran.code, 2);
    const reported = await replicaMessage(byName('limit-replicas'));
    assert.equal(
      reported,
      "spec.validations[0].expression: undeclared reference to 'param' at 1:25",
    );
    assert.equal(
      ran.stderr,
      `rollcall eval: policy limit-replicas generation 1 failed to load: ${reported}\n`,
    );
    assert.equal(ran.stdout, '');
  });
});

describe('rollcall eval', () => {
  test('a file with several Policies needs --policy, and names them', async () => {
    const ran = await inProcess(['eval', at('demo.yaml'), at('pod-with-owner.yaml')]);
    assert.equal(ran.code, 2);
    assert.match(
      ran.stderr,
      /holds 4 Policies \(require-labels, deny-latest-tag, limit-replicas, require-probes\): choose one with --policy/,
    );
    const chosen = await inProcess([
      'eval',
      at('demo.yaml'),
      at('pod-with-owner.yaml'),
      '--policy',
      'require-labels',
    ]);
    assert.equal(chosen.code, 0, chosen.stderr);
  });

  test('-o json gives the verdict, the expressions that ran with their results, and the metered cost', async () => {
    const ran = await inProcess([
      'eval',
      at('require-labels.yaml'),
      at('pod-without-owner.yaml'),
      '-o',
      'json',
    ]);
    assert.equal(ran.code, 1);
    const report = JSON.parse(ran.stdout) as EvalReport;
    assert.equal(report.result, 'fail');
    assert.equal(report.allowed, false);
    assert.equal(report.code, 403);
    assert.equal(report.reason, 'Forbidden');
    assert.deepEqual(report.auditAnnotations, {});
    assert.deepEqual(report.expressions, [
      {
        fieldPath: 'spec.validations[0].expression',
        expression: "has(object.metadata.labels) && 'owner' in object.metadata.labels",
        value: 'false',
      },
    ]);
    assert.equal(typeof report.cost.measured, 'number');
    assert.ok(report.cost.measured !== null && report.cost.measured > 0);
    assert.equal(report.cost.budget, 10_000_000);
    // Without the Namespace object the selector cannot be checked, and the report says so.
    assert.deepEqual(report.notes, [
      'namespace rollcall-demo: labels unknown (no Namespace object given), namespaceSelector not checked',
    ]);
  });

  test('a Namespace whose labels do not match the namespaceSelector: the policy does not apply, exit 0', async () => {
    const other = scratch({
      'ns.yaml': 'apiVersion: v1\nkind: Namespace\nmetadata: { name: rollcall-demo }\n',
    });
    const ran = await inProcess([
      'eval',
      at('require-labels.yaml'),
      at('pod-without-owner.yaml'),
      '--namespace-object',
      join(other, 'ns.yaml'),
    ]);
    assert.equal(ran.code, 0);
    assert.match(ran.stdout, /^verdict +admitted: the policy does not apply$/m);
    assert.match(ran.stdout, /namespace rollcall-demo does not match the namespaceSelector/);
    assert.match(ran.stdout, /^expressions: none ran$/m);
  });

  test('variables, match conditions and messages show in the order the engine ran them; --params overrides settings', async () => {
    const files = scratch({
      'policy.yaml': policyYaml(
        'max-keys',
        `
settings: { max: 1 }
matchConditions:
  - { name: has-data, expression: "has(object.data)" }
variables:
  - { name: keys, expression: "size(object.data)" }
  - { name: unused, expression: "1 / 0 == 1" }
validations:
  - expression: "variables.keys <= params.max"
    messageExpression: "'at most ' + string(params.max) + ' keys, not ' + string(variables.keys)"`,
      ),
      'cm.yaml':
        'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\ndata: { a: "1", b: "2" }\n',
      'params.yaml': 'max: 5\n',
    });
    const denied = await inProcess([
      'eval',
      join(files, 'policy.yaml'),
      join(files, 'cm.yaml'),
      '-o',
      'json',
    ]);
    assert.equal(denied.code, 1);
    const report = JSON.parse(denied.stdout) as EvalReport;
    assert.equal(report.message, 'at most 1 keys, not 2');
    assert.deepEqual(
      report.expressions.map((e) => [e.fieldPath, e.value ?? e.error]),
      [
        ['spec.matchConditions[0].expression', 'true'],
        ['spec.variables[0].expression', '2'],
        ['spec.validations[0].expression', 'false'],
        ['spec.validations[0].messageExpression', '"at most 1 keys, not 2"'],
      ],
    );
    const allowed = await inProcess([
      'eval',
      join(files, 'policy.yaml'),
      join(files, 'cm.yaml'),
      '--params',
      join(files, 'params.yaml'),
    ]);
    assert.equal(allowed.code, 0, allowed.stdout);
  });

  test('a runtime error under failurePolicy Fail denies with the server’s message and shows the failing expression', async () => {
    const files = scratch({
      'policy.yaml': policyYaml(
        'strict',
        'validations: [{ expression: "object.data.missing == \'x\'" }]',
      ),
      'cm.yaml':
        'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\ndata: { a: "1" }\n',
    });
    const ran = await inProcess([
      'eval',
      join(files, 'policy.yaml'),
      join(files, 'cm.yaml'),
      '-o',
      'json',
    ]);
    assert.equal(ran.code, 1);
    const report = JSON.parse(ran.stdout) as EvalReport;
    assert.equal(report.result, 'error');
    assert.equal(report.code, 500);
    assert.match(
      report.message,
      /^policy strict generation 1 failed: expression 'object\.data\.missing == 'x'' resulted in error: no such key: missing/,
    );
    assert.match(report.expressions[0]?.error ?? '', /no such key: missing/i);
  });

  test('the deprecated monitor mode (Warn) admits what it would deny, with the server’s warning', async () => {
    const files = scratch({
      'policy.yaml': policyYaml(
        'watch',
        'mode: monitor\nvalidations: [{ expression: "false", message: "nope" }]',
      ),
      'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\n',
    });
    const ran = await inProcess(['eval', join(files, 'policy.yaml'), join(files, 'cm.yaml')]);
    assert.equal(ran.code, 0);
    assert.match(ran.stdout, /^verdict +admitted \(validationActions Warn: it would deny\)$/m);
    assert.match(ran.stdout, /^warnings +watch would deny: nope$/m);
  });

  test('Audit admits what fails, with the audit annotation the apiserver would record', async () => {
    const files = scratch({
      'policy.yaml': policyYaml(
        'audited',
        'validationActions: [Deny, Audit]\nvalidations: [{ expression: "false", message: "nope" }]',
      ),
      'audit-only.yaml': policyYaml(
        'audited',
        'validationActions: [Audit]\nvalidations: [{ expression: "false", message: "nope" }]',
      ),
      'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\n',
    });
    const denied = await inProcess(['eval', join(files, 'policy.yaml'), join(files, 'cm.yaml')]);
    assert.equal(denied.code, 1);
    assert.match(denied.stdout, /^verdict +denied \(422 Invalid\)$/m);
    const annotation = JSON.stringify([
      { message: 'nope', policy: 'audited', generation: 1, validationActions: ['Deny', 'Audit'] },
    ]);
    assert.ok(
      denied.stdout.includes(
        `audit     audited.policies.rollcall.dev/validation_failure=${annotation}`,
      ),
      denied.stdout,
    );
    const admitted = await inProcess([
      'eval',
      join(files, 'audit-only.yaml'),
      join(files, 'cm.yaml'),
      '-o',
      'json',
    ]);
    assert.equal(admitted.code, 0);
    const report = JSON.parse(admitted.stdout) as EvalReport;
    assert.deepEqual([report.result, report.allowed], ['fail', true]);
    assert.deepEqual(report.policy.actions, ['Audit']);
    assert.deepEqual(report.warnings, []);
    assert.deepEqual(Object.keys(report.auditAnnotations), ['validation_failure']);
  });

  test('DELETE sends the object as oldObject, and the rules decide whether the policy applies', async () => {
    const files = scratch({
      'policy.yaml': `apiVersion: rollcall.dev/v1alpha1
kind: Policy
metadata: { name: keep }
spec:
  policyServer: default
  rules: [{ operations: [DELETE], apiGroups: [""], apiVersions: [v1], resources: [configmaps] }]
  validations: [{ expression: "object == null && oldObject.metadata.name != 'precious'", message: keep it }]
`,
      'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: precious, namespace: n }\n',
    });
    const deleted = await inProcess([
      'eval',
      join(files, 'policy.yaml'),
      join(files, 'cm.yaml'),
      '--operation',
      'DELETE',
    ]);
    assert.equal(deleted.code, 1);
    assert.match(deleted.stdout, /^message +keep it$/m);
    const created = await inProcess(['eval', join(files, 'policy.yaml'), join(files, 'cm.yaml')]);
    assert.equal(created.code, 0);
    assert.match(created.stdout, /no rule matches CREATE configmaps/);
  });

  test('an AdmissionReview is evaluated as it is, and --user goes with an object only', async () => {
    const review = {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: 'u-1',
        kind: { group: '', version: 'v1', kind: 'Pod' },
        resource: { group: '', version: 'v1', resource: 'pods' },
        namespace: namespaceName,
        name: 'web',
        operation: 'CREATE',
        userInfo: { username: 'alice' },
        object: {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'web', labels: { owner: 'a' } },
        },
      },
    };
    const files = scratch({ 'review.json': JSON.stringify(review) });
    const ran = await cli([
      'eval',
      at('require-labels.yaml'),
      '--review',
      join(files, 'review.json'),
    ]);
    assert.equal(ran.code, 0, ran.stderr);
    const mixed = await inProcess([
      'eval',
      at('require-labels.yaml'),
      '--review',
      join(files, 'review.json'),
      '--user',
      'bob',
    ]);
    assert.equal(mixed.code, 2);
    assert.match(mixed.stderr, /--user describe a request built from OBJECT_FILE/);
  });

  test('an over-budget policy exits 2 with the cost estimate’s message', async () => {
    let expression = 'size(x24) > 0';
    for (let i = 24; i >= 1; i--)
      expression = `cel.bind(x${i}, x${i - 1} + x${i - 1}, ${expression})`;
    expression = `cel.bind(x0, [object.metadata.name], ${expression})`;
    const files = scratch({
      'policy.yaml': policyYaml(
        'costly',
        `validations: [{ expression: ${JSON.stringify(expression)} }]`,
      ),
      'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\n',
    });
    const ran = await cli(['eval', join(files, 'policy.yaml'), join(files, 'cm.yaml')]);
    assert.equal(ran.code, 2);
    assert.equal(
      ran.stderr,
      'rollcall eval: policy costly generation 1 failed to load: spec.validations[0].expression: estimated cost 10^8 exceeds the per-request budget 10^7\n',
    );
  });

  test('a source policy is checked as a replica of a PolicyServer without spec.sources does: plain HTTP to loopback is refused, exit 2, no connection', async () => {
    const bundle = 'validations:\n  - expression: "true"\n';
    let connections = 0;
    const server = createServer((_req, res) => res.end(bundle));
    server.on('connection', () => connections++);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/b.yaml`;
      const digest = createHash('sha256').update(bundle).digest('hex');
      const files = scratch({
        'local.yaml': policyYaml('local', `source: { url: "${url}", sha256: ${digest} }`),
        'cm.yaml': 'apiVersion: v1\nkind: ConfigMap\nmetadata: { name: c, namespace: n }\n',
      });
      const ran = await cli(['eval', join(files, 'local.yaml'), join(files, 'cm.yaml')]);
      assert.equal(ran.code, 2);
      assert.equal(
        ran.stderr,
        `rollcall eval: policy local generation 1 failed to load: spec.source ${url}: plain HTTP, which PolicyServer default does not allow (spec.sources.allowInsecureHTTP); use https://\n`,
      );
      assert.equal(connections, 0);
    } finally {
      server.close();
    }
  });

  test('unusable input exits 2 saying what is wrong', async () => {
    const files = scratch({
      'nokind.yaml': 'apiVersion: v1\nmetadata: { name: x }\n',
      'bad.yaml': 'a: [\n',
    });
    const cases: [string[], RegExp][] = [
      [['eval', at('require-labels.yaml')], /give either OBJECT_FILE or --review REVIEW_FILE/],
      [
        ['eval', at('require-labels.yaml'), join(files, 'missing.yaml')],
        /missing\.yaml: no such file/,
      ],
      [
        ['eval', at('require-labels.yaml'), join(files, 'nokind.yaml')],
        /nokind\.yaml: kind is missing/,
      ],
      [['eval', at('require-labels.yaml'), join(files, 'bad.yaml')], /bad\.yaml:2:1: /],
      [
        ['eval', at('pod-with-owner.yaml'), at('pod-with-owner.yaml')],
        /no rollcall\.dev\/v1alpha1 Policy in it/,
      ],
      [
        ['eval', at('require-labels.yaml'), at('pod-with-owner.yaml'), '--operation', 'PATCH'],
        /--operation must be one of/,
      ],
    ];
    for (const [args, message] of cases) {
      const ran = await inProcess(args);
      assert.equal(ran.code, 2, `${args.join(' ')}: ${ran.stdout}`);
      assert.match(ran.stderr, message);
    }
  });

  test('an object can come from standard input', async () => {
    const ran = await cli(['eval', at('require-labels.yaml'), '-'], pod({ owner: 'x' }));
    assert.equal(ran.code, 0, ran.stderr);
  });
});
