// Fault 6b (429 Too Many Requests): API Priority and Fairness puts the worker's identity in a
// priority level with almost no seats that rejects instead of queueing, so the apiserver
// answers many of its writes with 429. The worker must wait Retry-After and write again
// (not count it as a failure), and the end state must still match the model.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { stringify } from 'yaml';
import { kubectl } from '../../../tooling/cluster/cluster.ts';
import { freePort } from '../../../tooling/cluster/ports.ts';
import { testCluster, testKubeConfig } from '../../support/kube.ts';
import { Processes, Scenario, seedFromEnv } from '../../support/driver.ts';
import { metric } from '../../support/prom-text.ts';

const kc = testKubeConfig();
const namespace = 'rel-throttled';
const sa = 'rollcall-throttled';

/** A cluster-admin ServiceAccount whose requests APF rejects beyond a seat or two. */
function throttledIdentity(): object[] {
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa, namespace } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: sa },
      roleRef: {
        apiGroup: 'rbac.authorization.k8s.io',
        kind: 'ClusterRole',
        name: 'cluster-admin',
      },
      subjects: [{ kind: 'ServiceAccount', name: sa, namespace }],
    },
    {
      apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
      kind: 'PriorityLevelConfiguration',
      metadata: { name: sa },
      spec: {
        type: 'Limited',
        limited: {
          nominalConcurrencyShares: 1,
          lendablePercent: 0,
          limitResponse: { type: 'Reject' },
        },
      },
    },
    {
      apiVersion: 'flowcontrol.apiserver.k8s.io/v1',
      kind: 'FlowSchema',
      metadata: { name: sa },
      spec: {
        matchingPrecedence: 500,
        priorityLevelConfiguration: { name: sa },
        rules: [
          {
            subjects: [{ kind: 'ServiceAccount', serviceAccount: { name: sa, namespace } }],
            resourceRules: [
              {
                verbs: ['*'],
                apiGroups: ['*'],
                resources: ['*'],
                clusterScope: true,
                namespaces: ['*'],
              },
            ],
          },
        ],
      },
    },
  ];
}

test(
  '429s from API Priority and Fairness are waited out, and the end state matches',
  { timeout: 240_000 },
  async () => {
    const cluster = testCluster();
    const procs = new Processes(namespace);
    await procs.prepare();
    const identity = throttledIdentity();
    kubectl(cluster, ['apply', '-f', '-'], identity.map((o) => stringify(o)).join('---\n'));
    after(async () => {
      await procs.cleanUp();
      kubectl(
        cluster,
        ['delete', '--ignore-not-found', '-f', '-'],
        identity.map((o) => stringify(o)).join('---\n'),
      );
    });

    const token = kubectl(cluster, [
      'create',
      'token',
      sa,
      '-n',
      namespace,
      '--duration=1h',
    ]).trim();
    const admin = kc.getCurrentCluster()!;
    const kubeconfig = join(cluster.dir, 'throttled.kubeconfig');
    writeFileSync(
      kubeconfig,
      stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [
          {
            name: 'local',
            cluster: { server: admin.server, 'certificate-authority-data': kc.clusters[0]!.caData },
          },
        ],
        users: [{ name: sa, user: { token } }],
        contexts: [{ name: 'local', context: { cluster: 'local', user: sa } }],
        'current-context': 'local',
      }),
    );

    const s = new Scenario(kc, namespace, seedFromEnv());
    const port = await freePort();
    procs.watcher('w0');
    procs.sim();
    // Many concurrent jobs and no client-side rate limit: only APF holds the writes back.
    procs.worker(
      [
        '--port',
        String(port),
        '--concurrency',
        '64',
        '--write-rate',
        '1000',
        '--write-burst',
        '1000',
      ],
      { KUBECONFIG: kubeconfig },
    );
    await s.setup(2);
    await s.storm(150, 0);
    await s.converge(150_000);

    const throttled = await metric(port, 'rollcall_kube_requests_total', { code: '429' });
    const failedRuns = await metric(port, 'rollcall_queue_runs_total', { outcome: 'retry' });
    assert.ok(throttled > 0, 'the apiserver answered some writes with 429');
    assert.equal(failedRuns, 0, 'a 429 is waited out, never counted as a failed run');
  },
);
