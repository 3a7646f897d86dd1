import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { readReplicaReport } from '../../../api/report.ts';
import { aPod, aPolicy, aPolicyServer, NOW, reportOf } from '../../fixtures/builders.ts';
import { projectPod } from '../../../control-plane/projections/project.ts';
import { cellFor, renderStatusPage, statusModel } from '../../../control-plane/http/status-page.ts';

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
