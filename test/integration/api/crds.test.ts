// The CRDs on the real apiserver: printer columns, the category, explain, generation
// semantics, validationActions' rules; and OpenReports' Report and ClusterReport (issue 38,
// acceptance 3): installed only when absent, reports with results pass their validation, a bad
// result is refused, and `kubectl get reports -A` shows the summary columns. (Rejection of
// invalid Policies at large: test/integration/reliability/invalid-specs.test.ts.)
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { pino } from 'pino';
import { parse, stringify } from 'yaml';
import { OPENREPORTS_API_VERSION, REPORT_SOURCE } from '../../../api/audit.ts';
import { FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL } from '../../../api/constants.ts';
import { kubectl } from '../../../tooling/cluster/cluster.ts';
import {
  VALIDATION_ACTIONS_DENY_WARN_MESSAGE,
  VALIDATION_ACTIONS_UNIQUE_MESSAGE,
  policySchema,
  type Policy,
} from '../../../api/v1alpha1.ts';
import { auditSummary } from '../../../control-plane/functions/audit-summary.ts';
import { KubeWriter } from '../../../control-plane/functions/kube-writer.ts';
import { POLICY_SERVER_RESOURCE_PREFIX } from '../../../control-plane/functions/policyserver-core.ts';
import { compact } from '../../../control-plane/projections/project.ts';
import { storeWrittenStatus } from '../../../control-plane/worker.ts';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { functionContext } from '../../fixtures/function-context.ts';
import { freshStores } from '../../support/redis.ts';
import { testCluster, testKubeConfig, uniqueName } from '../../support/kube.ts';

const kc = testKubeConfig();
const newStore = freshStores('crds');
const run = (...args: string[]) => kubectl(testCluster(), args);
/** kubectl that never throws: its exit status and both outputs. */
const kubectlRun = (args: string[], input?: string) => {
  const out = spawnSync(
    testCluster().binaries.kube,
    ['kubectl', `--kubeconfig=${testCluster().kubeconfig}`, ...args],
    { input, encoding: 'utf8' },
  );
  return { status: out.status ?? -1, stdout: out.stdout, stderr: out.stderr };
};

describe('the rollcall CRDs on the apiserver', () => {
  const server = uniqueName('crd').slice(0, 40);
  const policy = uniqueName('crd-pol');
  /** The Policy as the apiserver has it now. */
  const currentPolicy = async () =>
    (await kc.makeApiClient(CustomObjectsApi).getClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural: 'policies',
      name: policy,
    })) as Policy;

  before(async () => {
    await installCrds(kc, { info: () => {} });
    kubectl(
      testCluster(),
      ['apply', '-f', '-'],
      [
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'PolicyServer',
          metadata: { name: server },
          spec: { image: 'example.invalid/ps:1', replicas: 3 },
        },
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'Policy',
          metadata: { name: policy },
          spec: {
            policyServer: server,
            module: 'sim://ok',
            mode: 'monitor',
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
          },
        },
      ]
        .map((o) => stringify(o))
        .join('---\n'),
    );
  });

  after(() => {
    run('delete', 'policy', policy, '--ignore-not-found');
    run('delete', 'policyserver', server, '--ignore-not-found');
  });

  test('a status write shows in the printer columns, and does not bump the generation', async () => {
    const custom = kc.makeApiClient(CustomObjectsApi);
    const status = {
      observedGeneration: 1,
      ready: '2/3',
      summary: 'Reconciling',
      actions: 'Warn',
      audit: {
        generation: 1,
        checked: 5,
        failing: 2,
        completedAt: new Date().toISOString(),
        failures: [
          { object: 'ConfigMap default/a', message: 'no owner' },
          { object: 'ConfigMap default/b', message: 'no owner' },
        ],
      },
      conditions: [
        {
          type: 'Ready',
          status: 'False',
          reason: 'Loading',
          message: 'generation 1 loaded on 2/3 replicas',
          observedGeneration: 1,
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    };
    const written = (await custom.patchClusterCustomObjectStatus(
      {
        group: 'rollcall.dev',
        version: 'v1alpha1',
        plural: 'policies',
        name: policy,
        body: { status },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    )) as { metadata: { generation: number } };
    assert.equal(written.metadata.generation, 1);

    const table = run('get', 'policies', policy);
    assert.match(table, /^NAME\s+SERVER\s+MODE\s+READY\s+STATUS\s+AGE\s*$/m);
    assert.match(
      table,
      new RegExp(`^${policy}\\s+${server}\\s+Warn\\s+2/3\\s+Reconciling\\s+\\S+\\s*$`, 'm'),
      'MODE shows the actions the policy function writes (mode: monitor is [Warn])',
    );
    const wide = run('get', 'policies', policy, '-o', 'wide');
    assert.match(wide, /^NAME\s+SERVER\s+MODE\s+READY\s+STATUS\s+VIOLATIONS\s+AGE\s+MESSAGE\s*$/m);
    assert.match(
      wide,
      new RegExp(
        `^${policy}\\s+${server}\\s+Warn\\s+2/3\\s+Reconciling\\s+2\\s+\\S+\\s+generation 1 loaded on 2/3 replicas`,
        'm',
      ),
    );
    assert.match(run('get', 'pol', policy), new RegExp(policy), 'short name pol');
  });

  test('a status written against an older resourceVersion is refused, not applied', async () => {
    const read = await currentPolicy();
    const writer = new KubeWriter(kubeConfigTarget(kc), (write) => write());
    const status = (ready: string) => ({ ...read.status, ready });
    assert.equal(await writer.patchStatus('policies', policy, status('3/3'), read), true);
    // `read` is now one version behind, as a lagging projection would be.
    assert.equal(await writer.patchStatus('policies', policy, status('1/3'), read), false);
    assert.match(
      run('get', 'policies', policy),
      new RegExp(`^${policy}\\s+\\S+\\s+Warn\\s+3/3\\s`, 'm'),
    );
  });

  test('a status the worker writes is in its projections at once, unless they moved on since its read', async () => {
    /** A Policy as a run reads it from the projections the watcher wrote. */
    const asStored = (p: Policy) =>
      policySchema.parse(JSON.parse(JSON.stringify(compact('policy', p))));
    const store = newStore();
    const stored = async () =>
      (await store.policyView(policy, POLICY_SERVER_RESOURCE_PREFIX))?.policy;
    // As the watcher stores it, and as a worker's run reads it.
    await store.replaceAll({ policy: [compact('policy', await currentPolicy())] });
    const read = (await stored())!;
    const writer = new KubeWriter(
      kubeConfigTarget(kc),
      (write) => write(),
      undefined,
      storeWrittenStatus(store, pino({ level: 'silent' })),
    );
    assert.ok(await writer.patchStatus('policies', policy, { ...read.status, ready: '2/3' }, read));
    // No watcher runs here: the next run reads what was written, exactly as its event will bring it.
    const afterWrite = await currentPolicy();
    assert.equal(afterWrite.status?.ready, '2/3');
    assert.deepEqual(await stored(), asStored(afterWrite));

    // The projections moved on (someone labelled the Policy): an answer to a write computed
    // from the version before does not take the newer one back.
    run('label', 'policy', policy, 'crd-test=moved');
    const moved = await currentPolicy();
    await store.put('policy', compact('policy', moved));
    for (const version of [read, afterWrite].map((p) => p.metadata.resourceVersion!))
      assert.equal(await store.putWritten('policy', compact('policy', afterWrite), version), false);
    assert.deepEqual(await stored(), asStored(moved));
  });

  test("a status is replaced at every depth: the audit of a new generation drops the last pass's completedAt and failures", async () => {
    const writer = new KubeWriter(kubeConfigTarget(kc), (write) => write());
    const finished = {
      generation: 1,
      checked: 99,
      failing: 29,
      errors: 1,
      completedAt: '2026-12-07T00:00:00Z',
      failures: [{ object: 'ConfigMap a/b', message: 'needs an owner' }],
    };
    const seeded = await currentPolicy();
    assert.ok(
      await writer.patchStatus('policies', policy, { ...seeded.status, audit: finished }, seeded),
    );

    // Against what it read: a nested field the new status lacks is removed.
    const withAudit = await currentPolicy();
    const { errors: _, ...noErrors } = finished;
    await writer.patchStatus(
      'policies',
      policy,
      { ...withAudit.status, audit: noErrors },
      withAudit,
    );
    assert.deepEqual((await currentPolicy()).status?.audit, noErrors);

    // The audit-summary function writes unconditionally, from a Policy read that may lag its
    // own last write: here it still shows no audit. Generation 2 is served; its pass has not
    // begun in the one namespace that holds objects.
    const lagging: Policy = {
      ...withAudit,
      metadata: { ...withAudit.metadata, generation: 2 },
      spec: {
        ...withAudit.spec,
        module: undefined,
        mode: 'protect',
        validations: [{ expression: "'owner' in object.metadata.labels" }],
        validationActions: ['Audit'],
      },
      status: { servedGeneration: 2 },
    };
    const ctx = functionContext({
      store: { isSynced: async () => true, one: async () => lagging },
      audit: {
        namespaces: async () => ['team-a'],
        changes: async () => new Map([['team-a', 3]]),
        summaries: async () => new Map(),
        coverage: async () => `${withAudit.metadata.uid}/2`,
      },
      kube: writer,
    });
    await auditSummary.handle(policy, ctx);
    assert.deepEqual((await currentPolicy()).status?.audit, {
      generation: 2,
      checked: 0,
      failing: 0,
      errors: 0,
    });
  });

  test('a spec change bumps the generation', () => {
    run('patch', 'policy', policy, '--type', 'merge', '-p', '{"spec":{"timeoutSeconds":5}}');
    assert.equal(run('get', 'policy', policy, '-o', 'jsonpath={.metadata.generation}'), '2');
  });

  test('PolicyServers print REPLICAS, READY, STATUS and IMAGE, and both kinds are in the rollcall category', () => {
    assert.match(run('get', 'ps', server), /^NAME\s+REPLICAS\s+READY\s+STATUS\s+IMAGE\s+AGE\s*$/m);
    const all = run('get', 'rollcall');
    assert.match(all, new RegExp(`policyserver.rollcall.dev/${server}`));
    assert.match(all, new RegExp(`policy.rollcall.dev/${policy}`));
  });

  test('Policies can be listed by spec.policyServer (the policy servers watch that way)', () => {
    const mine = run(
      'get',
      'policies',
      '--field-selector',
      `spec.policyServer=${server}`,
      '-o',
      'name',
    );
    assert.equal(mine.trim(), `policy.rollcall.dev/${policy}`);
    const none = run(
      'get',
      'policies',
      '--field-selector',
      'spec.policyServer=nobody',
      '-o',
      'name',
    );
    assert.equal(none.trim(), '');
  });

  test('a CEL Policy and a PolicyServer without an image are accepted', () => {
    const out = kubectl(
      testCluster(),
      ['apply', '--dry-run=server', '-f', '-'],
      [
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'PolicyServer',
          metadata: { name: `${server}-own` },
          spec: { replicas: 2 },
        },
        {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'Policy',
          metadata: { name: `${policy}-cel` },
          spec: {
            policyServer: server,
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
            variables: [{ name: 'labels', expression: 'object.metadata.?labels.orValue({})' }],
            matchConditions: [
              { name: 'not-system', expression: "request.namespace != 'kube-system'" },
            ],
            validations: [
              {
                expression: "'team' in variables.labels",
                messageExpression: "'pod ' + object.metadata.name + ' has no team label'",
                reason: 'Forbidden',
              },
            ],
            settings: { team: 'required' },
          },
        },
      ]
        .map((o) => stringify(o))
        .join('---\n'),
    );
    assert.match(out, /policyserver.rollcall.dev\/\S+-own created \(server dry run\)/);
    assert.match(out, /policy.rollcall.dev\/\S+-cel created \(server dry run\)/);
  });

  test('a PolicyRevision records one generation and cannot be changed into another', () => {
    const name = `${policy}-1`;
    const revision = (generation: number) =>
      stringify({
        apiVersion: 'rollcall.dev/v1alpha1',
        kind: 'PolicyRevision',
        metadata: { name, labels: { 'rollcall.dev/policy': policy } },
        spec: { policy, policyUID: 'uid-1', generation, policySpec: { module: 'sim://ok' } },
      });
    kubectl(testCluster(), ['apply', '-f', '-'], revision(1));
    after(() => run('delete', 'polrev', name, '--ignore-not-found'));
    assert.match(run('get', 'polrev', name), new RegExp(`^${name}\\s+${policy}\\s+1\\s+`, 'm'));
    assert.throws(
      () => kubectl(testCluster(), ['apply', '-f', '-'], revision(2)),
      /records one generation of one Policy and is immutable/,
    );
    assert.match(run('get', 'rollcall'), new RegExp(`policyrevision.rollcall.dev/${name}`));
  });

  test('validationActions: one or two actions, none twice, never Deny with Warn, in the words of api/v1alpha1.ts', () => {
    const dryRun = (validationActions: unknown) =>
      kubectlRun(
        ['apply', '--dry-run=server', '-f', '-'],
        stringify({
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'Policy',
          metadata: { name: `${policy}-actions` },
          spec: {
            policyServer: server,
            module: 'sim://ok',
            validationActions,
            rules: [
              { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] },
            ],
          },
        }),
      );
    for (const ok of [['Deny'], ['Warn'], ['Audit'], ['Deny', 'Audit'], ['Audit', 'Warn']]) {
      const out = dryRun(ok);
      assert.equal(out.status, 0, `${JSON.stringify(ok)}: ${out.stderr}`);
    }
    const refused: [unknown, string | RegExp][] = [
      [['Deny', 'Warn'], VALIDATION_ACTIONS_DENY_WARN_MESSAGE],
      [['Audit', 'Audit'], VALIDATION_ACTIONS_UNIQUE_MESSAGE],
      [[], /spec\.validationActions: Invalid value: 0: .*at least 1 items/],
      [['Deny', 'Audit', 'Audit'], /must have at most 2 items/],
      [['Log'], /Unsupported value: "Log"/],
    ];
    for (const [actions, message] of refused) {
      const out = dryRun(actions);
      assert.notEqual(out.status, 0, `${JSON.stringify(actions)} is refused`);
      if (typeof message === 'string') assert.ok(out.stderr.includes(message), out.stderr);
      else assert.match(out.stderr, message);
    }
    assert.match(run('explain', 'policy.spec.mode'), /Deprecated: use validationActions/);
  });

  test('kubectl explain documents the fields', () => {
    const explained = run('explain', 'policy.spec.rules');
    assert.match(explained, /FIELD: rules/);
    assert.match(explained, /operations/);
    assert.match(run('explain', 'policyserver.spec'), /progressDeadlineSeconds/);
  });
});

describe("OpenReports' Report and ClusterReport on the apiserver", () => {
  const CRDS = ['reports.openreports.io', 'clusterreports.openreports.io'];
  const ns = uniqueName('reports').slice(0, 40);
  const name = `rollcall-${uniqueName('pol').slice(0, 40)}`;
  const labels = { [MANAGED_BY_LABEL]: MANAGED_BY };
  const result = (policy: string, value: string, object: string, extra = {}) => ({
    source: REPORT_SOURCE,
    policy,
    result: value,
    message: `${object}: ${value}`,
    scored: true,
    timestamp: { seconds: 1_700_000_000, nanos: 5 },
    resources: [{ apiVersion: 'v1', kind: 'ConfigMap', namespace: ns, name: object, uid: 'u-1' }],
    properties: { generation: '3' },
    ...extra,
  });
  const results = [
    result('p', 'fail', 'a', { rule: 'owner', category: 'labels', severity: 'high' }),
    result('p', 'pass', 'b'),
    result('p', 'pass', 'c'),
    result('p', 'skip', 'd'),
  ];
  const summary = { pass: 2, fail: 1, warn: 0, error: 0, skip: 1 };
  const report = {
    apiVersion: OPENREPORTS_API_VERSION,
    kind: 'Report',
    metadata: { name, namespace: ns, labels },
    source: REPORT_SOURCE,
    scope: { apiVersion: 'v1', kind: 'Namespace', name: ns },
    summary,
    results,
  };
  const clusterReport = {
    apiVersion: OPENREPORTS_API_VERSION,
    kind: 'ClusterReport',
    metadata: { name, labels },
    summary: { pass: 0, fail: 0, warn: 1, error: 1, skip: 0 },
    results: [
      { ...result('q', 'warn', 'n1'), resources: [{ apiVersion: 'v1', kind: 'Node', name: 'n1' }] },
      {
        ...result('q', 'error', 'n2'),
        resources: [{ apiVersion: 'v1', kind: 'Node', name: 'n2' }],
      },
    ],
    configuration: { limits: { maxResults: 1000, statusFilter: ['fail', 'warn', 'error'] } },
  };
  const apply = (...objects: object[]) =>
    kubectlRun(['apply', '-f', '-'], objects.map((o) => stringify(o)).join('---\n'));
  const dryRun = (object: object) =>
    kubectlRun(['apply', '--dry-run=server', '-f', '-'], stringify(object));
  /** The Report CRD file as deploy/crds has it, plain (not client-node's typed model). */
  const crdFromDeploy = (file: string) =>
    parse(readFileSync(new URL(`../../../deploy/crds/${file}`, import.meta.url), 'utf8')) as {
      metadata: { name: string; labels?: Record<string, string> };
      spec: { versions: { additionalPrinterColumns: { name: string }[] }[] };
    };
  const liveCrd = () =>
    JSON.parse(run('get', 'crd', CRDS[0]!, '-o', 'json')) as {
      metadata: {
        resourceVersion: string;
        labels?: Record<string, string>;
        managedFields?: { manager: string }[];
      };
      spec: { versions: { additionalPrinterColumns: { name: string }[] }[] };
    };
  const columnsOf = (crd: ReturnType<typeof liveCrd>) =>
    crd.spec.versions[0]!.additionalPrinterColumns.map((c) => c.name);

  before(() => run('create', 'namespace', ns));
  after(() => {
    run('delete', 'clusterreports.openreports.io', name, '--ignore-not-found');
    run('delete', 'namespace', ns, '--ignore-not-found', '--wait=false');
  });

  test('install-crds creates them when absent and leaves one another tool installed as it is', async () => {
    run('delete', 'crd', ...CRDS, '--ignore-not-found', '--wait=true');
    // Another tool's Report CRD: its own printer columns, its label, its field manager.
    const theirs = crdFromDeploy('openreports-reports.yaml');
    theirs.metadata.labels = { 'example.com/owner': 'other-tool' };
    theirs.spec.versions[0]!.additionalPrinterColumns = [{ name: 'Pass' }].map((c) => ({
      ...c,
      type: 'integer',
      jsonPath: '.summary.pass',
    }));
    kubectl(testCluster(), ['create', '--field-manager=other-tool', '-f', '-'], stringify(theirs));
    run('wait', '--for=condition=Established', `crd/${CRDS[0]}`);
    const before = liveCrd();

    const outcomes = new Map<string, string>();
    const logger = {
      info: (o: { crd: string; outcome: string }) => outcomes.set(o.crd, o.outcome),
    };
    await installCrds(kc, logger as never);
    assert.equal(outcomes.get(CRDS[0]!), 'already present');
    assert.equal(outcomes.get(CRDS[1]!), 'created');
    assert.equal(outcomes.get('policies.rollcall.dev'), 'applied', "rollcall's own are applied");
    const after = liveCrd();
    assert.equal(after.metadata.resourceVersion, before.metadata.resourceVersion, 'not written');
    assert.deepEqual(after.metadata.labels, { 'example.com/owner': 'other-tool' });
    assert.deepEqual(columnsOf(after), ['Pass']);
    assert.ok(!after.metadata.managedFields?.some((f) => f.manager === FIELD_MANAGER));

    // Gone again: the next install creates rollcall's, and the one after writes nothing.
    run('delete', 'crd', CRDS[0]!, '--wait=true');
    await installCrds(kc, logger as never);
    assert.equal(outcomes.get(CRDS[0]!), 'created');
    const ours = liveCrd();
    assert.deepEqual(columnsOf(ours), [
      'Kind',
      'Name',
      'Pass',
      'Fail',
      'Warn',
      'Error',
      'Skip',
      'Age',
    ]);
    await installCrds(kc, logger as never);
    assert.equal(outcomes.get(CRDS[0]!), 'already present');
    assert.equal(liveCrd().metadata.resourceVersion, ours.metadata.resourceVersion);
  });

  test('a Report and a ClusterReport with results pass validation and keep every field', () => {
    const out = apply(report, clusterReport);
    assert.equal(out.status, 0, out.stderr);
    const stored = JSON.parse(run('get', 'reports.openreports.io', name, '-n', ns, '-o', 'json'));
    assert.deepEqual(
      {
        source: stored.source,
        scope: stored.scope,
        summary: stored.summary,
        results: stored.results,
      },
      { source: report.source, scope: report.scope, summary, results },
      'nothing pruned',
    );
    const cluster = JSON.parse(run('get', 'clusterreports.openreports.io', name, '-o', 'json'));
    assert.deepEqual(
      [cluster.summary, cluster.results, cluster.configuration],
      [clusterReport.summary, clusterReport.results, clusterReport.configuration],
    );
  });

  test('a result outside pass, fail, warn, error and skip is refused, as are a result without its policy and an unknown severity', () => {
    const refused: [string, object, RegExp][] = [
      [
        'a result of "passed"',
        { ...report, results: [result('p', 'passed', 'a')] },
        /results\[0\]\.result: Unsupported value: "passed": supported values: "pass", "fail", "warn", "error", "skip"/,
      ],
      [
        'a ClusterReport result of "ok"',
        { ...clusterReport, results: [result('q', 'ok', 'n1')] },
        /results\[0\]\.result: Unsupported value: "ok"/,
      ],
      [
        'a result without a policy',
        { ...report, results: [{ result: 'fail', message: 'who?' }] },
        /results\[0\]\.policy: Required value/,
      ],
      [
        'a severity of "urgent"',
        { ...report, results: [result('p', 'fail', 'a', { severity: 'urgent' })] },
        /results\[0\]\.severity: Unsupported value: "urgent"/,
      ],
      [
        'a status filter of "failed"',
        { ...clusterReport, configuration: { limits: { statusFilter: ['failed'] } } },
        /statusFilter\[0\]: Unsupported value: "failed"/,
      ],
    ];
    for (const [what, object, message] of refused) {
      const out = dryRun(object);
      assert.notEqual(out.status, 0, `${what} is refused`);
      assert.match(out.stderr, message, what);
    }
  });

  test('kubectl get reports -A and clusterreports show the summary columns; -o wide the scope', () => {
    apply(report, clusterReport);
    const all = run('get', 'reports', '-A');
    assert.match(all, /^NAMESPACE\s+NAME\s+PASS\s+FAIL\s+WARN\s+ERROR\s+SKIP\s+AGE\s*$/m);
    assert.match(all, new RegExp(`^${ns}\\s+${name}\\s+2\\s+1\\s+0\\s+0\\s+1\\s+\\S+\\s*$`, 'm'));
    const wide = run('get', 'reps', '-n', ns, '-o', 'wide');
    assert.match(wide, /^NAME\s+KIND\s+NAME\s+PASS\s+FAIL\s+WARN\s+ERROR\s+SKIP\s+AGE\s*$/m);
    assert.match(
      wide,
      new RegExp(`^${name}\\s+Namespace\\s+${ns}\\s+2\\s+1\\s+0\\s+0\\s+1\\s`, 'm'),
    );
    const cluster = run('get', 'creps');
    assert.match(cluster, /^NAME\s+PASS\s+FAIL\s+WARN\s+ERROR\s+SKIP\s+AGE\s*$/m);
    assert.match(cluster, new RegExp(`^${name}\\s+0\\s+0\\s+1\\s+1\\s+0\\s+\\S+\\s*$`, 'm'));
  });
});
