// The continuous audit end to end (issue 38, acceptance 2, and 3's Report side): 100
// ConfigMaps exist before an Audit Policy that 30 of them violate; a PolicyServer of rollcall's
// own image (2 replicas, real `rollcall policy-server` processes) judges them through the
// apiserver's service proxy, and rollcall keeps the namespace's OpenReports Report. Every
// expectation is an exact set of names (and messages and generations), and the policy servers'
// own evaluation counter proves that a change costs one evaluation, not a rescan.
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, CustomObjectsApi, type V1ConfigMap } from '@kubernetes/client-node';
import { POLICY_LABEL, MANAGED_BY, MANAGED_BY_LABEL } from '../../../api/constants.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, runAsAccounts, type Identities } from '../../support/identities.ts';
import { testKubeConfig } from '../../support/kube.ts';
import { CASE_LABEL, createRule, namespaceNamed, policyManifest } from '../../support/manifests.ts';
import {
  auditEvaluations,
  describeReport,
  namesWith,
  nonZero,
  reportsOfPolicy,
  resultLines,
  waitReport,
  type ReportObject,
} from '../../support/reports.ts';
import {
  apply,
  kubectlAsync,
  readyOnAll,
  replicaProcesses,
  replicaTls,
  startPolicyServer,
  waitPolicy,
  type PolicyObject,
  type ReplicaProcess,
  type ReplicaTls,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rollcall-aud'; // rollcall's own: the policy-server pods run here
const target = 'aud-target'; // the audited ConfigMaps
const SERVER = 'aud';
const REPLICAS = 2;
const POLICY = 'audited';
const REPORT = `rollcall-${POLICY}`;
const NS_POLICY = 'audited-ns'; // the cluster-scoped case: Namespaces → a ClusterReport
const NS_CASE = 'audited-ns';

const OWNER_RULE = "'owner' in object.metadata.labels";
const MESSAGE_1 = 'configmaps need an owner label';
const MESSAGE_2 = 'generation 2: configmaps need an owner label';

// ---------------------------------------------------------------- the objects

const names = Array.from({ length: 100 }, (_, i) => `cm-${String(i).padStart(2, '0')}`);
/** 30 of the 100 lack the owner label (every i % 10 < 3). */
const violates = (name: string) => Number(name.slice(3)) % 10 < 3;
const configMap = (name: string) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name,
    namespace: target,
    labels: { [CASE_LABEL]: POLICY, ...(violates(name) ? {} : { owner: 'e2e' }) },
  },
  data: { n: name },
});

/** Namespaces judged by the cluster-scoped case: `-c` lacks the owner label. */
const caseNamespaces = { 'aud-ns-a': true, 'aud-ns-b': true, 'aud-ns-c': false };

// ---------------------------------------------------------------- the Policies

const auditPolicy = (message: string) =>
  policyManifest(POLICY, SERVER, {
    rules: [createRule('configmaps')],
    namespaceSelector: namespaceNamed(target),
    // kube-root-ca.crt lives in every namespace: the case label leaves it out.
    objectSelector: { matchLabels: { [CASE_LABEL]: POLICY } },
    validationActions: ['Audit'],
    validations: [{ expression: OWNER_RULE, message }],
  });

/**
 * On Namespaces, chosen by namespaceSelector: admission matches a Namespace against it by the
 * Namespace's own labels, so the audit must judge exactly the three labelled ones.
 */
const namespacePolicy = policyManifest(NS_POLICY, SERVER, {
  rules: [createRule('namespaces')],
  namespaceSelector: { matchLabels: { [CASE_LABEL]: NS_CASE } },
  validationActions: ['Audit'],
  validations: [{ expression: OWNER_RULE, message: 'namespaces need an owner label' }],
});

/** `<target>/<name> <result> [message] @<generation>`, as resultLines writes a Report's results. */
const expectedLines = (
  present: Iterable<string>,
  failing: (n: string) => boolean,
  message: string,
  generation: number,
) =>
  [...present]
    .map((n) =>
      failing(n)
        ? `${target}/${n} fail [${message}] @${generation}`
        : `${target}/${n} pass @${generation}`,
    )
    .sort();

const summaryIs = (pass: number, fail: number) => (r: ReportObject | undefined) =>
  r !== undefined && r.summary?.pass === pass && r.summary.fail === fail;

describe('the continuous audit with real policy servers (2 replicas)', () => {
  const procs = new Processes(namespace);
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  let ids: Identities | undefined;
  let replicas: ReplicaProcess[] = [];
  let tls: ReplicaTls;
  let appliedAt = 0;
  /** The objects as they are now: name → whether it violates. */
  const present = new Map(names.map((n) => [n, violates(n)]));
  const failingNow = (n: string) => present.get(n) === true;
  const evaluations = () => auditEvaluations(replicas, tls, POLICY);
  /** The Report lists exactly the ConfigMaps that exist now, judged at `generation`. */
  const showsPresent = (message: string, generation: number) => (r: ReportObject | undefined) =>
    isDeepStrictEqual(
      resultLines(r),
      expectedLines(present.keys(), failingNow, message, generation),
    );
  /** The summary those results add up to. */
  const presentSummary = () => {
    const failing = [...present.values()].filter(Boolean).length;
    return { pass: present.size - failing, fail: failing };
  };

  before(async () => {
    const started = Date.now();
    await procs.prepare(target);
    // The objects first: the audit finds them, no admission request ever judged them.
    await kubectlAsync(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: names.map(configMap) }),
    );
    for (const [name, owner] of Object.entries(caseNamespaces))
      await apply({
        apiVersion: 'v1',
        kind: 'Namespace',
        metadata: { name, labels: { [CASE_LABEL]: NS_CASE, ...(owner ? { owner: 'e2e' } : {}) } },
      });
    ids = await prepareIdentities(namespace);
    runAsAccounts(procs, ids);
    await startPolicyServer(kc, SERVER, REPLICAS);
    replicas = await replicaProcesses(kc, namespace, SERVER, REPLICAS);
    tls = await replicaTls(kc, namespace, SERVER);
    appliedAt = Date.now();
    await apply(auditPolicy(MESSAGE_1), namespacePolicy);
    console.error(`[audit] objects, server and policies in place in ${appliedAt - started} ms`);
  });

  after(async () => {
    await procs.cleanUp();
    ids?.remove();
    await core
      .deleteCollectionNamespacedConfigMap({ namespace: target, labelSelector: CASE_LABEL })
      .catch(() => {});
    for (const name of Object.keys(caseNamespaces))
      await core.deleteNamespace({ name }).catch(() => {});
  });

  test('within seconds of the Policy being Ready, its Report lists exactly the 30 violating ConfigMaps as fail and the 70 others as pass', async (t) => {
    const ready = await waitPolicy(kc, POLICY, readyOnAll(REPLICAS), { timeoutMs: 90_000 });
    const readyAt = Date.now();
    const report = await waitReport(kc, target, REPORT, summaryIs(70, 30), 60_000);
    const reportAt = Date.now();
    t.diagnostic(
      `Ready ${readyAt - appliedAt} ms after apply; the Report complete ${reportAt - readyAt} ms after Ready`,
    );
    assert.ok(reportAt - readyAt < 15_000, `the Report took ${reportAt - readyAt} ms after Ready`);

    assert.deepEqual(nonZero(report), { pass: 70, fail: 30 });
    assert.deepEqual(namesWith(report, 'fail'), names.filter(violates));
    assert.deepEqual(
      namesWith(report, 'pass'),
      names.filter((n) => !violates(n)),
    );
    assert.deepEqual(resultLines(report), expectedLines(names, violates, MESSAGE_1, 1));

    // The Report as OpenReports readers find it: labelled, owned by the Policy, each result
    // naming its object (with its uid) and saying who judged it.
    assert.equal(report!.metadata.labels?.[MANAGED_BY_LABEL], MANAGED_BY);
    assert.equal(report!.metadata.labels?.[POLICY_LABEL], POLICY);
    assert.equal(report!.metadata.annotations?.['rollcall.dev/results-omitted'], undefined);
    const owner = report!.metadata.ownerReferences?.[0] as
      { kind?: string; uid?: string } | undefined;
    assert.equal(owner?.kind, 'Policy');
    assert.equal(owner?.uid, ready.metadata.uid);
    const uids = new Map(
      (
        await core.listNamespacedConfigMap({ namespace: target, labelSelector: CASE_LABEL })
      ).items.map((c: V1ConfigMap) => [c.metadata!.name!, c.metadata!.uid!]),
    );
    for (const r of report!.results) {
      assert.equal(r.source, 'rollcall');
      assert.equal(r.policy, POLICY);
      const [o] = r.resources;
      assert.deepEqual(
        { apiVersion: o?.apiVersion, kind: o?.kind, namespace: o?.namespace, uid: o?.uid },
        { apiVersion: 'v1', kind: 'ConfigMap', namespace: target, uid: uids.get(o?.name ?? '') },
      );
    }
    // Failures first (the bound keeps failures), then passes.
    const order = report!.results.map((r) => r.result);
    assert.deepEqual(
      order,
      [...order].sort((a, b) => (a === b ? 0 : a === 'fail' ? -1 : 1)),
    );

    // The Policy's status sums it up, with the time the pass completed.
    const summed = await waitPolicy(
      kc,
      POLICY,
      (p) => p.status?.audit?.completedAt !== undefined && p.status.audit.checked === 100,
      { timeoutMs: 30_000 },
    );
    const audit = summed.status!.audit!;
    assert.deepEqual(
      {
        generation: audit.generation,
        checked: audit.checked,
        failing: audit.failing,
        errors: audit.errors ?? 0,
      },
      { generation: 1, checked: 100, failing: 30, errors: 0 },
    );
    assert.ok(Date.parse(audit.completedAt!) >= appliedAt - 1000, audit.completedAt);
    assert.equal(audit.failures?.length, 10);
    for (const f of audit.failures ?? []) {
      assert.match(f.object, new RegExp(`^ConfigMap ${target}/cm-\\d\\d$`));
      assert.ok(violates(f.object.split('/')[1]!), f.object);
      assert.equal(f.message, MESSAGE_1);
    }

    // Each pair judged once: 100 evaluations over both replicas.
    assert.equal(await evaluations(), 100, 'the first pass judged each ConfigMap once');
  });

  test('fixing one ConfigMap flips its result with one evaluation; breaking one flips it back the other way', async (t) => {
    const before = await evaluations();
    const started = Date.now();
    await kubectlAsync(['label', 'configmap', '-n', target, 'cm-00', 'owner=e2e']);
    present.set('cm-00', false);
    let report = await waitReport(kc, target, REPORT, showsPresent(MESSAGE_1, 1));
    t.diagnostic(`cm-00 passes ${Date.now() - started} ms after the fix`);
    assert.deepEqual(nonZero(report), presentSummary());
    assert.equal(await evaluations(), before + 1, 'one evaluation, not a rescan');

    await kubectlAsync(['label', 'configmap', '-n', target, 'cm-05', 'owner-']);
    present.set('cm-05', true);
    report = await waitReport(kc, target, REPORT, showsPresent(MESSAGE_1, 1));
    assert.deepEqual(nonZero(report), presentSummary());
    assert.equal(await evaluations(), before + 2);
  });

  test('deleting a ConfigMap removes its result without judging anything', async () => {
    const before = await evaluations();
    await core.deleteNamespacedConfigMap({ name: 'cm-01', namespace: target });
    present.delete('cm-01');
    const report = await waitReport(kc, target, REPORT, showsPresent(MESSAGE_1, 1));
    assert.deepEqual(nonZero(report), presentSummary());
    assert.ok(!report!.results.some((r) => r.resources[0]?.name === 'cm-01'));
    const p = await waitPolicy(kc, POLICY, (x) => x.status?.audit?.checked === present.size, {
      timeoutMs: 30_000,
    });
    assert.equal(p.status?.audit?.failing, presentSummary().fail);
    assert.equal(await evaluations(), before, 'a deletion costs no evaluation');
  });

  test('a new generation of the Policy judges the whole set again at that generation', async (t) => {
    const before = await evaluations();
    const started = Date.now();
    await apply(auditPolicy(MESSAGE_2));
    await waitPolicy(kc, POLICY, (p) => p.metadata.generation === 2 && readyOnAll(REPLICAS)(p), {
      timeoutMs: 60_000,
    });
    const report = await waitReport(kc, target, REPORT, showsPresent(MESSAGE_2, 2));
    t.diagnostic(`generation 2 judged everywhere ${Date.now() - started} ms after the edit`);
    assert.deepEqual(nonZero(report), presentSummary());
    assert.equal(
      await evaluations(),
      before + present.size,
      'each ConfigMap judged once at generation 2',
    );
    const p = await waitPolicy(
      kc,
      POLICY,
      (x) => x.status?.audit?.generation === 2 && x.status.audit.completedAt !== undefined,
      { timeoutMs: 30_000 },
    );
    assert.deepEqual(
      { checked: p.status?.audit?.checked, failing: p.status?.audit?.failing },
      { checked: present.size, failing: presentSummary().fail },
    );
    assert.ok(Date.parse(p.status!.audit!.completedAt!) >= started - 1000);
  });

  test('Namespaces, chosen by namespaceSelector as admission chooses them, get a ClusterReport', async () => {
    await waitPolicy(kc, NS_POLICY, readyOnAll(REPLICAS), { timeoutMs: 60_000 });
    const report = await waitReport(
      kc,
      undefined,
      `rollcall-${NS_POLICY}`,
      (r) => r !== undefined,
      30_000,
    );
    // Wait for the pass to settle: the three namespaces, nothing else.
    const settled = await waitReport(
      kc,
      undefined,
      `rollcall-${NS_POLICY}`,
      (r) => (r?.results ?? []).length === 3 && r!.summary.pass === 2,
      30_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nfirst seen: ${describeReport(report)}`);
    });
    assert.equal(settled!.kind, 'ClusterReport');
    assert.deepEqual(resultLines(settled), [
      'aud-ns-a pass @1',
      'aud-ns-b pass @1',
      'aud-ns-c fail [namespaces need an owner label] @1',
    ]);
    for (const r of settled!.results) {
      assert.equal(r.resources[0]?.kind, 'Namespace');
      assert.equal(r.resources[0]?.namespace, undefined);
    }
    assert.deepEqual(nonZero(settled), { pass: 2, fail: 1 });
  });

  test('deleting the Policy removes its Reports and its results', async () => {
    const policies = { group: 'rollcall.dev', version: 'v1alpha1', plural: 'policies' };
    const uid = (await waitPolicy(kc, POLICY, () => true)).metadata.uid;
    await custom.deleteClusterCustomObject({ ...policies, name: POLICY });
    await custom.deleteClusterCustomObject({ ...policies, name: NS_POLICY });
    await waitReport(kc, target, REPORT, (r) => r === undefined, 60_000);
    await waitReport(kc, undefined, `rollcall-${NS_POLICY}`, (r) => r === undefined, 60_000);
    assert.deepEqual(await reportsOfPolicy(kc, POLICY), []);
    assert.deepEqual(await reportsOfPolicy(kc, NS_POLICY), []);

    // A new Policy of the same name starts from nothing: no result of the old one survives.
    const before = await evaluations();
    await apply(auditPolicy(MESSAGE_1));
    const again: PolicyObject = await waitPolicy(kc, POLICY, readyOnAll(REPLICAS), {
      timeoutMs: 60_000,
    });
    assert.notEqual(again.metadata.uid, uid);
    const report = await waitReport(kc, target, REPORT, showsPresent(MESSAGE_1, 1));
    assert.equal(
      (report!.metadata.ownerReferences?.[0] as { uid?: string } | undefined)?.uid,
      again.metadata.uid,
    );
    assert.equal(await evaluations(), before + present.size, 'the new Policy judged every object');
  });
});
