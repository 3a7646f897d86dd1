// `rollcall policy-server` as a real process against the local cluster, for the audit and the
// validation actions: Deny denies, Warn warns, Audit annotates the audit event; `POST /audit`
// judges existing objects with the generation its webhooks serve (pass, fail, warn, skip,
// retry for a generation it has not loaded), counts each evaluation by policy, and answers
// hostile batches 400 without ever going down.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { CustomObjectsApi } from '@kubernetes/client-node';
import fc from 'fast-check';
import { AUDIT_MAX_ITEMS, AUDIT_PATH, type AuditVerdict } from '../../../api/audit.ts';
import { callLocal } from '../../support/https.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { policyManifest } from '../../support/manifests.ts';
import { configMapReview, TestPolicyServer } from '../../support/policy-server-process.ts';
import { until as poll } from '../../support/scenario.ts';

const kc = testKubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const namespace = uniqueName('ps-audit');
const server = uniqueName('srv');
const ps = new TestPolicyServer({ namespace, server, podName: 'policy-server-audit' });
const group = { group: 'rollcall.dev', version: 'v1alpha1' };

/** One Policy per action set, all with the same check. */
const policies = {
  deny: `${server}-deny`,
  warn: `${server}-warn`,
  audit: `${server}-audit`,
  both: `${server}-warn-audit`,
};
const actions: Record<keyof typeof policies, string[]> = {
  deny: ['Deny'],
  warn: ['Warn'],
  audit: ['Audit'],
  both: ['Warn', 'Audit'],
};
const spec = (validationActions: string[]) => ({
  policyServer: server,
  validationActions,
  rules: [
    { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] },
  ],
  matchConditions: [{ name: 'not-exempt', expression: "!('exempt' in object.data)" }],
  validations: [{ expression: "'owner' in object.data", message: 'needs data.owner' }],
});

const until = <T>(what: string, check: () => Promise<T | undefined>) =>
  poll(what, check, { timeoutMs: 60_000, everyMs: 100 });

const configMap = (name: string, data: Record<string, string>) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace },
  data,
});
const batchOf = (
  items: { object: unknown; policies: number[] }[],
  judging: { name: string; generation: number }[],
) => ({
  resource: { group: '', version: 'v1', resource: 'configmaps' },
  kind: { group: '', version: 'v1', kind: 'ConfigMap' },
  policies: judging,
  items,
});

describe('the audit endpoint and validationActions on a real policy server', () => {
  let child: ChildProcess;
  let port: number;
  const call = (method: string, path: string, body?: string) =>
    callLocal(port, ps.ca, method, path, body);
  const audit = async (body: unknown) => {
    const res = await call('POST', AUDIT_PATH, JSON.stringify(body));
    assert.equal(res.status, 200, res.body);
    return (JSON.parse(res.body) as { results: AuditVerdict[][] }).results;
  };
  /** rollcall_policy_server_audit_evaluations_total of `policy` (0 before the first). */
  const evaluations = async (policy: string) => {
    const text = (await call('GET', '/metrics')).body;
    const line = text
      .split('\n')
      .find((l) =>
        l.startsWith(`rollcall_policy_server_audit_evaluations_total{policy="${policy}"}`),
      );
    return line ? Number(line.split(' ').at(-1)) : 0;
  };

  before(async () => {
    await ps.prepare();
    for (const [key, name] of Object.entries(policies))
      await custom.createClusterCustomObject({
        ...group,
        plural: 'policies',
        body: policyManifest(name, server, spec(actions[key as keyof typeof policies])),
      });
    ({ child, port } = await ps.start({ logName: 'policy-server-audit-it.log' }));
    await until('every policy Loaded', async () => {
      const report = await ps.report();
      return Object.values(policies).every((p) => report[p]?.state === 'Loaded') ? true : undefined;
    });
  });

  after(async () => {
    ps.kill();
    for (const name of Object.values(policies))
      await custom
        .deleteClusterCustomObject({ ...group, plural: 'policies', name })
        .catch(() => {});
    await ps.cleanUp();
  });

  test('admission: Deny denies, Warn warns, Audit annotates, Warn with Audit does both', async () => {
    const answers: Record<string, unknown> = {};
    for (const [key, name] of Object.entries(policies)) {
      const res = await call(
        'POST',
        `/validate/${name}/1`,
        JSON.stringify(configMapReview(`r-${key}`, namespace, 'x', {})),
      );
      assert.equal(res.status, 200, res.body);
      answers[key] = (JSON.parse(res.body) as { response: unknown }).response;
    }
    const annotation = (policy: string, validationActions: string[]) => ({
      validation_failure: JSON.stringify([
        { message: 'needs data.owner', policy, generation: 1, validationActions },
      ]),
    });
    assert.deepEqual(answers, {
      deny: {
        uid: 'r-deny',
        allowed: false,
        status: { message: 'needs data.owner', reason: 'Invalid', code: 422 },
      },
      warn: {
        uid: 'r-warn',
        allowed: true,
        warnings: [`${policies.warn} would deny: needs data.owner`],
      },
      audit: {
        uid: 'r-audit',
        allowed: true,
        auditAnnotations: annotation(policies.audit, ['Audit']),
      },
      both: {
        uid: 'r-both',
        allowed: true,
        warnings: [`${policies.both} would deny: needs data.owner`],
        auditAnnotations: annotation(policies.both, ['Warn', 'Audit']),
      },
    });
  });

  test('judges each object × policy: pass, fail, warn, skip; a generation not loaded is retry', async () => {
    const judging = [
      { name: policies.deny, generation: 1 },
      { name: policies.warn, generation: 1 },
      { name: policies.audit, generation: 1 },
      { name: policies.both, generation: 1 },
      { name: policies.deny, generation: 7 },
    ];
    const before = await evaluations(policies.deny);
    const results = await audit(
      batchOf(
        [
          { object: configMap('owned', { owner: 'me' }), policies: [0, 1, 2, 3] },
          { object: configMap('orphan', {}), policies: [0, 1, 2, 3] },
          { object: configMap('exempt', { exempt: 'yes' }), policies: [0] },
          { object: configMap('later', {}), policies: [4] },
        ],
        judging,
      ),
    );
    const failed = { message: 'needs data.owner' };
    assert.deepEqual(results, [
      [{ result: 'pass' }, { result: 'pass' }, { result: 'pass' }, { result: 'pass' }],
      [
        { result: 'fail', ...failed },
        { result: 'warn', ...failed },
        { result: 'fail', ...failed },
        { result: 'fail', ...failed },
      ],
      [{ result: 'skip' }],
      [
        {
          result: 'error',
          message: `policy ${policies.deny}: this replica has not loaded generation 7 (it loads generation 1)`,
          retry: true,
        },
      ],
    ]);
    // Counted per evaluation: the retry was not one.
    assert.equal((await evaluations(policies.deny)) - before, 3);
  });

  test('judging one object again costs one evaluation, not the batch', async () => {
    const before = await evaluations(policies.audit);
    await audit(
      batchOf(
        [{ object: configMap('changed', {}), policies: [0] }],
        [{ name: policies.audit, generation: 1 }],
      ),
    );
    assert.equal((await evaluations(policies.audit)) - before, 1);
  });

  test('hostile batches are 400 with what is wrong, and the server stays up', async () => {
    const judging = [{ name: policies.deny, generation: 1 }];
    const hostile: [string, RegExp][] = [
      ['', /not JSON/],
      ['{', /not JSON/],
      ['"text"', /not an audit batch/],
      ['[]', /not an audit batch/],
      [JSON.stringify(batchOf([{ object: configMap('a', {}), policies: [3] }], judging)), /past/],
      [JSON.stringify(batchOf([{ object: 'text', policies: [0] }], judging)), /object/],
      [JSON.stringify(batchOf([{ object: null, policies: [0] }], judging)), /object/],
      [JSON.stringify(batchOf([{ object: { metadata: {} }, policies: [0] }], judging)), /name/],
      [
        JSON.stringify(
          batchOf(
            Array.from({ length: AUDIT_MAX_ITEMS + 1 }, (_, i) => ({
              object: configMap(`o${i}`, {}),
              policies: [0],
            })),
            judging,
          ),
        ),
        /items/,
      ],
    ];
    for (const [body, says] of hostile) {
      const res = await call('POST', AUDIT_PATH, body);
      assert.equal(res.status, 400, `${body.slice(0, 60)}: ${res.body}`);
      assert.match((JSON.parse(res.body) as { error: string }).error, says);
    }
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          fc.json(),
          fc
            .array(fc.record({ object: fc.anything(), policies: fc.array(fc.integer()) }), {
              maxLength: 4,
            })
            .map((items) => JSON.stringify(batchOf(items, judging))),
        ),
        async (body) => {
          const res = await call('POST', AUDIT_PATH, body);
          assert.ok([200, 400].includes(res.status), `${res.status}: ${res.body}`);
        },
      ),
      { numRuns: 100 },
    );
    assert.equal(child.exitCode, null, 'the process still runs');
    assert.equal((await call('GET', '/healthz')).status, 200);
  });
});
