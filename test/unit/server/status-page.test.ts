import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { readReplicaReport } from '../../../api/report.ts';
import { aPod, aPolicy, aPolicyServer, NOW, reportOf } from '../../fixtures/builders.ts';
import { projectPod } from '../../../control-plane/projections/project.ts';
import {
  auditView,
  cellFor,
  renderStatusPage,
  statusModel,
} from '../../../control-plane/http/status-page.ts';
import type { PolicyStatus } from '../../../api/v1alpha1.ts';

const annotation = (r: unknown) => readReplicaReport(JSON.stringify(r));

describe('cellFor: what one replica says about one policy', () => {
  const cases = [
    {
      name: 'no annotation yet',
      reading: readReplicaReport(undefined),
      want: { state: 'Missing', message: 'no report yet' },
    },
    {
      name: 'loaded at the current generation',
      reading: annotation(reportOf('p', 4, 'Loaded')),
      want: { state: 'Loaded' },
    },
    {
      name: 'failed, with the replica message',
      reading: annotation(reportOf('p', 4, 'Failed', { message: 'boom' })),
      want: { state: 'Failed', message: 'boom' },
    },
    {
      name: 'an older generation is stale',
      reading: annotation(reportOf('p', 3, 'Loaded')),
      want: { state: 'Stale', message: 'reported generation 3, current 4' },
    },
    {
      name: 'a report without the policy',
      reading: annotation(reportOf('other', 4, 'Loaded')),
      want: { state: 'Missing', message: 'not in report' },
    },
    {
      name: 'an unreadable report fails the cell with the reason',
      reading: readReplicaReport('{nope'),
      want: { state: 'Failed' },
    },
  ] as const;
  for (const c of cases)
    test(c.name, () => {
      const cell = cellFor(c.reading, 'p', 4);
      assert.equal(cell.state, c.want.state);
      if ('message' in c.want) assert.equal(cell.message, c.want.message);
    });
});

test('the model puts each server’s policies against its pods, sorted, with READY from status', () => {
  const policy = aPolicy({
    name: 'deny',
    generation: 2,
    status: { ready: '1/2', summary: 'Stalled', readyReplicas: 1, replicas: 2 },
  });
  const pods = [
    aPod('pod-b', { report: reportOf('deny', 2, 'Failed', { message: 'module 404' }) }),
    aPod('pod-a', { report: reportOf('deny', 2, 'Loaded'), ready: false }),
  ];
  const model = statusModel(
    [policy, aPolicy({ name: 'lost', spec: { policyServer: 'gone' } }), { junk: true }],
    [aPolicyServer()],
    new Map([['default', pods.map(projectPod)]]),
  );
  const [server] = model.servers;
  assert.deepEqual(
    server?.replicas.map((r) => [r.pod, r.ready]),
    [
      ['pod-a', false],
      ['pod-b', true],
    ],
  );
  assert.deepEqual(server?.policies[0]?.cells, [
    { state: 'Loaded' },
    { state: 'Failed', message: 'module 404' },
  ]);
  assert.equal(server?.policies[0]?.ready, '1/2');
  assert.equal(server?.policies[0]?.summary, 'Stalled');
  assert.deepEqual(model.orphans, [{ name: 'lost', server: 'gone', summary: 'Unknown' }]);
  assert.deepEqual(model.invalid, ['(unnamed)']);
});

test('the page escapes replica messages, links to failed jobs of a stalled policy and refreshes itself', async () => {
  const policy = aPolicy({
    name: 'deny',
    generation: 1,
    status: { summary: 'Stalled', ready: '0/1' },
  });
  const model = statusModel(
    [policy],
    [aPolicyServer()],
    new Map([
      [
        'default',
        [
          projectPod(
            aPod('pod-a', {
              report: reportOf('deny', 1, 'Failed', { message: '<script>x</script>' }),
            }),
          ),
        ],
      ],
    ]),
  );
  const page = String(
    await renderStatusPage(model, { queueName: 'reconcile', refreshSeconds: 5, now: NOW }),
  );
  assert.match(page, /<meta http-equiv="refresh" content="5"/);
  assert.match(page, /&lt;script&gt;x&lt;\/script&gt;/);
  assert.doesNotMatch(page, /<script>x/);
  assert.match(page, /href="\/queues\/queue\/reconcile\?status=failed"/);
  assert.match(page, /data-state="Failed"/);
});

// ---------------------------------------------------------------- actions and the audit

const audited = (audit: PolicyStatus['audit'], extra: Partial<PolicyStatus> = {}) =>
  aPolicy({
    name: 'no-passwords',
    generation: 2,
    status: { summary: 'Ready', ready: '3/3', actions: 'Audit', ...extra, ...(audit && { audit }) },
  });

const render = async (policies: unknown[]) =>
  String(
    await renderStatusPage(statusModel(policies, [aPolicyServer()], new Map()), {
      queueName: 'reconcile',
      refreshSeconds: 5,
      now: NOW,
    }),
  );

describe('auditView: a Policy’s status.audit as the page shows it', () => {
  test('absent until the audit-summary function wrote it', () => {
    assert.equal(auditView(undefined), undefined);
  });
  test('the failing objects not listed are counted, never negative', () => {
    const failures = [{ object: 'ConfigMap a/x', message: 'm' }];
    assert.deepEqual(auditView({ generation: 2, checked: 100, failing: 30, failures }), {
      generation: 2,
      checked: 100,
      failing: 30,
      errors: 0,
      failures,
      more: 29,
    });
    // A status written by hand (or an older rollcall) may list more than it counts.
    assert.equal(auditView({ generation: 1, checked: 1, failing: 0, failures })?.more, 0);
  });
  test('completedAt is kept as written', () => {
    const view = auditView({
      generation: 3,
      checked: 0,
      failing: 0,
      completedAt: NOW.toISOString(),
    });
    assert.equal(view?.completedAt, NOW.toISOString());
  });
});

test('the model shows MODE from status.actions, else from the spec (validationActions, else mode)', () => {
  const model = statusModel(
    [
      audited(undefined, { actions: 'Warn,Audit' }),
      aPolicy({ name: 'legacy-monitor', spec: { mode: 'monitor' } }),
      aPolicy({ name: 'spec-only', spec: { validationActions: ['Deny', 'Audit'] } }),
    ],
    [aPolicyServer()],
    new Map(),
  );
  assert.deepEqual(
    model.servers[0]?.policies.map((p) => [p.name, p.actions]),
    [
      ['legacy-monitor', 'Warn'],
      ['no-passwords', 'Warn,Audit'],
      ['spec-only', 'Deny,Audit'],
    ],
  );
});

test('a policy with failing objects: counts in its row, up to 10 objects with messages, "and N more", and where the Reports are', async () => {
  const failures = Array.from({ length: 10 }, (_, i) => ({
    object: `ConfigMap shop/cm-${i}`,
    message: 'ConfigMaps must not hold passwords',
  }));
  const page = await render([
    audited({
      generation: 2,
      checked: 100,
      failing: 30,
      errors: 1,
      completedAt: '2024-05-01T11:59:00.000Z',
      failures,
    }),
  ]);
  assert.match(page, /<td data-actions="Audit">Audit<\/td>/);
  assert.match(page, /data-audit-checked="100"\s+data-audit-failing="30"\s+data-audit-errors="1"/);
  assert.match(page, /30 failing of\s+100, 1 errors/);
  assert.match(page, /gen 2 ·\s+pass complete 2024-05-01T11:59:00\.000Z/);
  assert.equal(page.match(/<tr data-failure>/g)?.length, 10);
  assert.match(page, /ConfigMap shop\/cm-9<\/td>/);
  assert.match(page, /<span data-more="20">and 20 more\.<\/span>/);
  assert.match(page, /no-passwords: 30 failing\s+objects, 1 not judged \(error\)/);
  assert.match(page, /<code>kubectl get reports -A -l rollcall\.dev\/policy=no-passwords<\/code>/);
  assert.match(page, /<code>kubectl get report rollcall-no-passwords -n NAMESPACE -o yaml<\/code>/);
});

test('a clean audit has no failures block; a running first pass says so; no audit says "not audited"', async () => {
  const clean = await render([audited({ generation: 2, checked: 4, failing: 0 })]);
  assert.match(clean, /0 failing of\s+4/);
  assert.match(clean, /first pass running/);
  assert.doesNotMatch(clean, /data-audit-failures/);
  const none = await render([aPolicy()]);
  assert.match(none, /data-audit="none">not audited</);
  const exact = await render([
    audited({
      generation: 1,
      checked: 2,
      failing: 1,
      failures: [{ object: 'Namespace dev', message: 'm' }],
    }),
  ]);
  assert.match(exact, /no-passwords: 1 failing\s+object\s/);
  assert.doesNotMatch(exact, /data-more/, 'every failing object is listed');
});

test('hostile strings in status (failure object and message, actions, completedAt) are escaped, never markup', async () => {
  const hostile = '"><script>alert(1)</script><img src=x onerror=alert(2)>';
  const page = await render([
    audited(
      {
        generation: 1,
        checked: 1,
        failing: 1,
        completedAt: hostile,
        failures: [{ object: hostile, message: `</td></tr></table>${hostile}` }],
      },
      { actions: hostile },
    ),
  ]);
  assert.doesNotMatch(page, /<script|<img|<\/table><script/);
  assert.match(page, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/);
  assert.match(page, /data-actions="&quot;&gt;&lt;script&gt;/);
});

test('property: whatever the status strings, the page’s markup is that of a page with plain ones', async () => {
  // Escaping holds when the tags, quotes and angle brackets of the page do not depend on the
  // strings: each is compared with the same page whose strings are replaced by "x".
  const markup = (page: string) => ({
    tags: page.match(/<\/?[a-zA-Z][a-zA-Z0-9-]*/g),
    quotes: page.split('"').length,
    apostrophes: page.split("'").length,
    brackets: page.split(/[<>]/).length,
  });
  const page = (object: string, message: string, actions: string, completedAt: string) =>
    render([
      audited(
        { generation: 1, checked: 3, failing: 2, completedAt, failures: [{ object, message }] },
        { actions },
      ),
    ]);
  const text = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 });
  await fc.assert(
    fc.asyncProperty(text, text, text, text, async (object, message, actions, completedAt) => {
      assert.deepEqual(
        markup(await page(object, message, actions, completedAt)),
        markup(await page('x', 'x', 'x', 'x')),
      );
    }),
    { numRuns: 200 },
  );
});
