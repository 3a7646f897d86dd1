// The audit's pure core: which pairs a run judges, and what its results, Reports and summaries
// become. The property: however the cluster changed since the last run, an incremental run
// ends with the results a run from nothing would have, and judges only what changed.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import type { AuditVerdict } from '../../../api/audit.ts';
import {
  AUDIT_MAX_BYTES,
  AUDIT_MAX_ITEMS,
  AUDIT_MAX_POLICIES,
  auditRequestSchema,
} from '../../../api/audit.ts';
import {
  MAX_REPORT_RESULTS,
  auditBatches,
  RESULTS_OMITTED_ANNOTATION,
  planAudit,
  reportOf,
  settleAudit,
  type AuditInput,
  type Judged,
} from '../../../control-plane/functions/audit-core.ts';
import {
  judges,
  type AuditedPolicy,
  type AuditedResource,
} from '../../../control-plane/functions/audit-match.ts';
import {
  CLUSTER_SCOPE,
  type AuditedObject,
  type NamespaceResults,
  type NamespaceSummary,
} from '../../../control-plane/projections/audit-store.ts';
import { summarizeAudit } from '../../../control-plane/functions/audit-summary.ts';

const configmaps: AuditedResource = {
  group: '',
  version: 'v1',
  resource: 'configmaps',
  kind: 'ConfigMap',
  namespaced: true,
};
const deployments: AuditedResource = {
  group: 'apps',
  version: 'v1',
  resource: 'deployments',
  kind: 'Deployment',
  namespaced: true,
};
const resources = new Map([
  ['/v1/configmaps', configmaps],
  ['apps/v1/deployments', deployments],
]);
const rule = (resource: string, group = '') => ({
  operations: ['CREATE' as const],
  apiGroups: [group],
  apiVersions: ['v1'],
  resources: [resource],
  scope: '*' as const,
});
const policy = (name: string, extra: Partial<AuditedPolicy> = {}): AuditedPolicy => ({
  name,
  uid: `uid-${name}`,
  generation: 1,
  policyServer: 'default',
  actions: ['Audit'],
  rules: [rule('configmaps')],
  ...extra,
});

/** A policy server stand-in: an object fails a Policy when it lacks the label named after it. */
const verdictOf = (p: string, o: AuditedObject): AuditVerdict =>
  o.l?.[p] !== undefined ? { result: 'pass' } : { result: 'fail', message: `needs label ${p}` };

/** Judges a plan as the shell would, counting the evaluations. */
function judgeAll(input: AuditInput, judge: Map<string, string[]>) {
  const judged = new Map<string, Map<string, Judged>>();
  let evaluations = 0;
  for (const [key, policies] of judge) {
    const o = input.objects.get(key)!;
    judged.set(
      key,
      new Map(
        policies.map((p) => {
          evaluations += 1;
          return [p, { resourceVersion: o.v, verdict: verdictOf(p, o) }];
        }),
      ),
    );
  }
  return { judged, evaluations };
}

function run(input: AuditInput, now = 100) {
  const plan = planAudit(input);
  const { judged, evaluations } = judgeAll(input, plan.judge);
  return { plan, evaluations, ...settleAudit(input, plan, judged, now) };
}

const inputOf = (
  objects: [string, AuditedObject][],
  policies: AuditedPolicy[],
  previous?: Map<string, NamespaceResults>,
): AuditInput => ({
  namespace: 'team-a',
  namespaceLabels: { env: 'dev' },
  excluded: new Set(['kube-system']),
  policies,
  waiting: new Set(),
  passing: new Set(),
  resources,
  objects: new Map(objects),
  seen: 1,
  previous,
});

const shown = (r: Map<string, NamespaceResults>) =>
  Object.fromEntries(
    [...r].map(([p, x]) => [
      p,
      Object.fromEntries(Object.entries(x.results).map(([k, v]) => [k, v.slice(1, 3)])),
    ]),
  );

describe('planAudit and settleAudit', () => {
  test('30 of 100 ConfigMaps fail; fixing one judges that one only', () => {
    const objects: [string, AuditedObject][] = Array.from({ length: 100 }, (_, i) => [
      `/v1/configmaps/cm-${i}`,
      { u: `u${i}`, v: '1', l: i < 30 ? {} : ({ owner: 'x' } as Record<string, string>) },
    ]);
    const first = run(inputOf(objects, [policy('owner')]));
    assert.equal(first.evaluations, 100);
    const s = first.results.get('owner')!.summary;
    assert.deepEqual([s.checked, s.failing], [100, 30]);
    objects[0] = ['/v1/configmaps/cm-0', { u: 'u0', v: '2', l: { owner: 'y' } }];
    const second = run(inputOf(objects, [policy('owner')], first.results), 200);
    assert.equal(second.evaluations, 1);
    assert.equal(second.results.get('owner')!.summary.failing, 29);
    assert.deepEqual(second.results.get('owner')!.results['/v1/configmaps/cm-0'], [
      '2',
      'pass',
      '',
      200,
    ]);
    // Unchanged results keep the time they were judged.
    assert.equal(second.results.get('owner')!.results['/v1/configmaps/cm-5']![3], 100);
  });

  test('a new generation judges the whole set again; a deleted Policy is removed', () => {
    const objects: [string, AuditedObject][] = [['/v1/configmaps/a', { u: 'a', v: '1' }]];
    const first = run(inputOf(objects, [policy('p')]));
    const again = run(inputOf(objects, [policy('p', { generation: 2 })], first.results));
    assert.equal(again.evaluations, 1);
    assert.ok(again.reported.has('p'));
    const gone = planAudit(inputOf(objects, [], first.results));
    assert.deepEqual(gone.removed, ['p']);
  });

  test('a change that leaves every verdict as it was is saved, and writes no Report', () => {
    const objects: [string, AuditedObject][] = [['/v1/configmaps/a', { u: 'a', v: '1' }]];
    const first = run(inputOf(objects, [policy('p')]));
    // Another object changed (the count moved) and this one got a new resourceVersion.
    const input = {
      ...inputOf([['/v1/configmaps/a', { u: 'a', v: '2' }]], [policy('p')], first.results),
      seen: 2,
    };
    const again = run(input, 200);
    assert.equal(again.evaluations, 1);
    assert.ok(again.saved.has('p'));
    assert.ok(!again.reported.has('p'));
    const quiet = run({ ...input, previous: again.results }, 300);
    assert.deepEqual([quiet.evaluations, quiet.saved.size, quiet.reported.size], [0, 0, 0]);
  });

  test('a Policy waiting for its new generation keeps its results', () => {
    const objects: [string, AuditedObject][] = [['/v1/configmaps/a', { u: 'a', v: '1' }]];
    const first = run(inputOf(objects, [policy('p')]));
    const input = { ...inputOf(objects, [], first.results), waiting: new Set(['p']) };
    assert.deepEqual(planAudit(input).removed, []);
  });

  test('an excluded namespace judges nothing', () => {
    const input = {
      ...inputOf([['/v1/configmaps/a', { u: 'a', v: '1' }]], [policy('p')]),
      namespace: 'kube-system',
    };
    assert.equal(planAudit(input).judge.size, 0);
  });

  test('a Namespace is chosen by its own labels, and the excluded ones never', () => {
    const namespaces: AuditedResource = {
      group: '',
      version: 'v1',
      resource: 'namespaces',
      kind: 'Namespace',
      namespaced: false,
    };
    const owner = { owner: 'x' };
    const input: AuditInput = {
      ...inputOf(
        [
          ['/v1/namespaces/team-a', { u: 'a', v: '1', l: { team: 'a' } }],
          ['/v1/namespaces/team-b', { u: 'b', v: '1', l: { team: 'b' } }],
          ['/v1/namespaces/kube-system', { u: 's', v: '1', l: { team: 'a' } }],
        ],
        [
          policy('ns', {
            rules: [rule('namespaces')],
            namespaceSelector: { matchLabels: { team: 'a' } },
            objectSelector: { matchExpressions: [{ key: 'owner', operator: 'DoesNotExist' }] },
          }),
        ],
      ),
      namespace: CLUSTER_SCOPE,
      namespaceLabels: undefined,
      resources: new Map([['/v1/namespaces', namespaces]]),
    };
    assert.deepEqual([...planAudit(input).judge.keys()], ['/v1/namespaces/team-a']);
    assert.ok(judges(input.policies[0]!, namespaces, { team: 'a' }, undefined));
    assert.ok(!judges(input.policies[0]!, namespaces, { team: 'a', ...owner }, undefined));
  });

  test('a retry verdict is not recorded, so the next run judges the pair again', () => {
    const input = inputOf([['/v1/configmaps/a', { u: 'a', v: '1' }]], [policy('p')]);
    const plan = planAudit(input);
    const judged = new Map([
      [
        '/v1/configmaps/a',
        new Map([
          [
            'p',
            { resourceVersion: '1', verdict: { result: 'error' as const, retry: true as const } },
          ],
        ]),
      ],
    ]);
    const { results } = settleAudit(input, plan, judged, 1);
    assert.deepEqual(results.get('p')!.results, {});
    // Its summary says a pair is left, so the first pass is not complete yet.
    assert.equal(results.get('p')!.summary.pending, 1);
    assert.equal(planAudit({ ...input, previous: results }).judge.size, 1);
  });

  test('property: an incremental run ends where a run from nothing does, judging only what changed', () => {
    const labels = fc.dictionary(fc.constantFrom('p0', 'p1', 'p2', 'team'), fc.constant('x'), {
      maxKeys: 4,
    });
    const world = fc.record({
      objects: fc.dictionary(
        fc.constantFrom(
          ...Array.from({ length: 8 }, (_, i) => `/v1/configmaps/c${i}`),
          ...Array.from({ length: 4 }, (_, i) => `apps/v1/deployments/d${i}`),
        ),
        fc.record({ v: fc.constantFrom('1', '2', '3'), l: labels }),
      ),
      policies: fc.uniqueArray(
        fc.record({
          name: fc.constantFrom('p0', 'p1', 'p2'),
          generation: fc.integer({ min: 1, max: 2 }),
          deployments: fc.boolean(),
          selector: fc.constantFrom(undefined, { matchLabels: { team: 'x' } }),
        }),
        { selector: (p) => p.name, maxLength: 3 },
      ),
    });
    type World = typeof world extends fc.Arbitrary<infer T> ? T : never;
    const build = (w: World) =>
      inputOf(
        // As in the apiserver, a changed object has a new resourceVersion (an unchanged one may too).
        Object.entries(w.objects).map(([k, o]) => [
          k,
          { u: k, v: `${o.v}:${JSON.stringify(o.l)}`, l: o.l },
        ]),
        w.policies.map((p) =>
          policy(p.name, {
            generation: p.generation,
            rules: p.deployments
              ? [rule('configmaps'), rule('deployments', 'apps')]
              : [rule('configmaps')],
            ...(p.selector && { objectSelector: p.selector }),
          }),
        ),
      );
    fc.assert(
      fc.property(world, world, (before, after) => {
        const first = run(build(before));
        const incremental = run({ ...build(after), previous: first.results });
        const fresh = run(build(after));
        assert.deepEqual(shown(incremental.results), shown(fresh.results));
        // Judged: exactly the pairs whose object or Policy generation changed, or that are new.
        const input = build(after);
        let expected = 0;
        for (const p of input.policies)
          for (const [key, o] of input.objects) {
            const r = resources.get(key.slice(0, key.lastIndexOf('/')))!;
            if (!judges(p, r, o.l, input.namespaceLabels)) continue;
            const old = first.results.get(p.name);
            const stands = old?.generation === p.generation && old.results[key]?.[0] === o.v;
            if (!stands) expected += 1;
          }
        assert.equal(incremental.evaluations, expected);
      }),
      { numRuns: 300 },
    );
  });
});

describe('reportOf', () => {
  test('a Report lists failures first, counts everything and says how many it leaves out', () => {
    const objects: [string, AuditedObject][] = Array.from(
      { length: MAX_REPORT_RESULTS + 5 },
      (_, i) => [
        `/v1/configmaps/c${String(i).padStart(4, '0')}`,
        { u: `u${i}`, v: '1', l: i % 2 ? { p: 'x' } : ({} as Record<string, string>) },
      ],
    );
    const input = inputOf(objects, [policy('p')]);
    const { results } = run(input);
    const report = reportOf(policy('p'), input, results.get('p')!);
    assert.equal(report.kind, 'Report');
    assert.equal(report.metadata.namespace, 'team-a');
    assert.equal(report.results.length, MAX_REPORT_RESULTS);
    assert.equal(report.summary.fail + report.summary.pass, MAX_REPORT_RESULTS + 5);
    assert.equal(report.metadata.annotations?.[RESULTS_OMITTED_ANNOTATION], '5');
    assert.ok(report.results.slice(0, report.summary.fail).every((r) => r.result === 'fail'));
    assert.deepEqual(report.results[0]!.resources[0], {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      namespace: 'team-a',
      name: 'c0000',
      uid: 'u0',
    });
  });

  test('cluster-scoped objects go to a ClusterReport', () => {
    const input = { ...inputOf([], [policy('p')]), namespace: CLUSTER_SCOPE };
    const report = reportOf(policy('p'), input, {
      uid: 'uid-p',
      generation: 1,
      results: {},
      summary: {
        uid: 'uid-p',
        generation: 1,
        seen: 1,
        checked: 0,
        failing: 0,
        errors: 0,
        failures: [],
      },
    });
    assert.equal(report.kind, 'ClusterReport');
    assert.equal(report.metadata.namespace, undefined);
  });
});

describe('judges', () => {
  test('rules: CREATE of the resource, scope, and never a guarded or reporting resource', () => {
    const p = policy('p', { rules: [{ ...rule('*', '*'), operations: ['UPDATE'] }] });
    assert.equal(judges(p, configmaps, {}, {}), false);
    const all = policy('p', { rules: [rule('*', '*')] });
    assert.equal(judges(all, configmaps, {}, {}), true);
    const cluster = policy('p', { rules: [{ ...rule('*', '*'), scope: 'Cluster' }] });
    assert.equal(judges(cluster, configmaps, {}, {}), false);
  });

  test('a namespaceSelector looks at namespaced objects only', () => {
    const p = policy('p', {
      namespaceSelector: { matchLabels: { env: 'prod' } },
      rules: [rule('*', '*')],
    });
    assert.equal(judges(p, configmaps, {}, { env: 'dev' }), false);
    assert.equal(judges(p, { ...configmaps, namespaced: false }, {}, undefined), true);
  });
});

describe('summarizeAudit', () => {
  const summary = (
    ns: string,
    extra: Partial<NamespaceSummary> = {},
  ): [string, NamespaceSummary] => [
    ns,
    {
      uid: 'uid-p',
      generation: 1,
      seen: 3,
      checked: 10,
      failing: 2,
      errors: 0,
      failures: [{ object: `ConfigMap ${ns}/x`, message: 'm' }],
      ...extra,
    },
  ];
  const now = new Date('2026-12-06T12:00:00Z');
  const base = {
    policy: policy('p'),
    previous: undefined,
    namespaces: ['a', 'b'],
    changes: new Map([
      ['a', 3],
      ['b', 3],
    ]),
    covered: true,
    now,
  };
  test('complete once every namespace filed a summary of the generation that read its latest objects', () => {
    const done = summarizeAudit({ ...base, summaries: new Map([summary('a'), summary('b')]) });
    assert.deepEqual(
      [done.checked, done.failing, done.completedAt, done.failures?.length],
      [20, 4, now.toISOString(), 2],
    );
  });
  test('not complete: a namespace behind its objects or with pairs left, an older generation, the watches not listed', () => {
    for (const input of [
      { ...base, summaries: new Map([summary('a'), summary('b', { pending: 3 })]) },
      { ...base, summaries: new Map([summary('a'), summary('b', { seen: 2 })]) },
      { ...base, summaries: new Map([summary('a'), summary('b', { generation: 0 })]) },
      { ...base, summaries: new Map([summary('a'), summary('b')]), covered: false },
      { ...base, summaries: new Map([summary('a')]) },
    ])
      assert.equal(summarizeAudit(input).completedAt, undefined);
  });
  test('completedAt stays with its generation', () => {
    const previous = { generation: 1, checked: 1, failing: 0, completedAt: '2026-01-01T00:00:00Z' };
    const kept = summarizeAudit({ ...base, previous, summaries: new Map([summary('a')]) });
    assert.equal(kept.completedAt, previous.completedAt);
  });
});

describe('auditBatches', () => {
  test('property: every object × Policy pair goes once, to its server, within every limit', () => {
    fc.assert(
      fc.property(
        fc.array(fc.constantFrom(10, 100, 1_500_000, 3_000_000, 5_000_000), {
          minLength: 1,
          maxLength: 1200,
        }),
        fc.integer({ min: 1, max: 600 }),
        fc.integer({ min: 0, max: 2 ** 31 }),
        (sizes, policyCount, seed) => {
          const all = Array.from({ length: policyCount }, (_, i) =>
            policy(`p${i}`, { policyServer: i % 3 === 0 ? 'a' : 'b' }),
          );
          const byName = new Map(all.map((p) => [p.name, p]));
          // Object i is judged by a pseudo-random run of Policies (all of them for object 0).
          const names = new Map<string, string[]>();
          const objects = sizes.map((size, i) => {
            const name = `o${i}`;
            const from = (seed + i * 7919) % policyCount;
            const count = i === 0 ? policyCount : 1 + ((seed + i) % 5);
            const run = Array.from({ length: count }, (_, k) => `p${(from + k) % policyCount}`);
            names.set(name, [...new Set(run)]);
            const data = 'x'.repeat(size);
            return { metadata: { name, resourceVersion: String(i) }, data };
          });
          const sent = new Set<string>();
          for (const [server, batches] of auditBatches(configmaps, objects, names, byName))
            for (const { request, keys, versions, bytes } of batches) {
              auditRequestSchema.parse(request);
              assert.ok(request.items.length <= AUDIT_MAX_ITEMS);
              assert.ok(request.policies.length <= AUDIT_MAX_POLICIES);
              assert.ok(bytes <= AUDIT_MAX_BYTES || request.items.length === 1);
              request.items.forEach((item, i) => {
                const name = item.object.metadata.name;
                assert.equal(keys[i], `/v1/configmaps/${name}`);
                assert.equal(versions[i], name.slice(1));
                for (const index of item.policies) {
                  const p = request.policies[index]!;
                  assert.equal(byName.get(p.name)!.policyServer, server);
                  const pair = `${name}|${p.name}`;
                  assert.ok(!sent.has(pair), `${pair} sent twice`);
                  sent.add(pair);
                }
              });
            }
          const wanted = [...names].flatMap(([o, ps]) => ps.map((p) => `${o}|${p}`));
          assert.deepEqual([...sent].sort(), wanted.sort());
        },
      ),
      { numRuns: 30 },
    );
  });
});
