import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { reportsFromPods } from '../../../api/report.ts';
import { policy, progressDelayMs, rereadDelayMs } from '../../../control-plane/functions/policy.ts';
import { requeueAfter } from '../../../control-plane/queue/index.ts';
import { buildWebhookConfiguration } from '../../../control-plane/functions/webhook-core.ts';
import type { PolicyView } from '../../../control-plane/projections/store.ts';
import {
  aPod,
  aPolicy,
  aServerWithDeployment,
  NAMESPACE,
  reportOf,
  threePods,
} from '../../fixtures/builders.ts';
import { functionContext } from '../../fixtures/function-context.ts';

/** One run of the policy function on a view; what it enqueued and wrote. */
async function run(
  view: Omit<PolicyView, 'policyServer' | 'deployment' | 'replicaSets'>,
  statusWritten = true,
  writesCongested = false,
) {
  const { server, deployment, replicaSet } = aServerWithDeployment();
  const enqueued: string[] = [];
  const writes: string[] = [];
  const statuses: { summary?: string }[] = [];
  const store = {
    policyView: async (): Promise<PolicyView> => ({
      ...view,
      policyServer: server,
      deployment,
      replicaSets: [replicaSet],
    }),
  };
  const kube = {
    patchStatus: async (_plural: string, _name: string, status: { summary?: string }) => (
      writes.push('status'),
      statuses.push(status),
      statusWritten
    ),
  };
  const events = { record: () => void writes.push('event') };
  const ctx = functionContext({
    store,
    kube,
    events,
    enqueue: async (keys) => void enqueued.push(...keys),
    writesCongested,
  });
  const outcome = await policy.handle(view.policy!.metadata.name, ctx);
  return { enqueued, writes, statuses, outcome };
}

/** A Policy at generation 4 that every replica loaded. */
const loaded = aPolicy();
const pods = threePods(reportOf(loaded.metadata.name, 4, 'Loaded'));
const reports = reportsFromPods(pods, loaded.metadata.name);

describe('the policy function enqueues the webhook only when the readiness moves it', () => {
  const { server } = aServerWithDeployment();
  const serving = (generation: number) =>
    buildWebhookConfiguration(aPolicy({ generation }), server, { namespace: NAMESPACE }, 'Q0EK');

  test('every replica loaded generation 4, the webhook serves 3: the webhook runs', async () => {
    const { enqueued, writes } = await run({ policy: loaded, pods, reports, webhook: serving(3) });
    assert.deepEqual(enqueued, ['webhook/require-labels']);
    assert.deepEqual(writes, ['status', 'event']);
  });

  test('the webhook already serves 4: no webhook run', async () => {
    const { enqueued } = await run({ policy: loaded, pods, reports, webhook: serving(4) });
    assert.deepEqual(enqueued, []);
  });

  test('still loading: the webhook keeps what it serves, no webhook run', async () => {
    const loading = threePods(reportOf(loaded.metadata.name, 4, 'Loading'));
    const { enqueued } = await run({
      policy: loaded,
      pods: loading,
      reports: reportsFromPods(loading, loaded.metadata.name),
      webhook: serving(3),
    });
    assert.deepEqual(enqueued, []);
  });
});

test('a status write refused (the Policy changed since it was read) records no Event and runs again', async () => {
  const { writes, outcome } = await run(
    { policy: loaded, pods, reports, webhook: undefined },
    false,
  );
  assert.deepEqual(writes, ['status']);
  assert.deepEqual(outcome, requeueAfter(rereadDelayMs));
});

/** The loaded Policy before any status was written, on `replicas`. */
const statuslessOn = (replicas: ReturnType<typeof threePods>) => ({
  policy: { ...loaded, status: undefined },
  pods: replicas,
  reports: reportsFromPods(replicas, loaded.metadata.name),
  webhook: undefined,
});

describe('while writes are congested, progress waits and end states do not', () => {
  const loading = threePods(reportOf(loaded.metadata.name, 4, 'Loading'));
  const failed = threePods(reportOf(loaded.metadata.name, 4, 'Failed'));
  const cases = [
    { name: 'Reconciling', pods: loading, deferred: true },
    { name: 'Ready', pods, deferred: false },
    { name: 'Stalled', pods: failed, deferred: false },
  ];
  for (const { name, pods: replicas, deferred } of cases)
    test(`${name}: ${deferred ? 'runs again later, nothing written' : 'written at once'}`, async () => {
      const view = statuslessOn(replicas);
      const congested = await run(view, true, true);
      assert.deepEqual(congested.writes.length === 0, deferred);
      if (deferred) assert.deepEqual(congested.outcome, requeueAfter(progressDelayMs));
      // Not congested: every status is written.
      assert.deepEqual((await run(view, true, false)).writes[0], 'status');
    });
});

test('property: under congestion only a Reconciling status waits, whatever the replicas report', async () => {
  const state = fc.constantFrom('Loading', 'Loaded', 'Failed', 'absent');
  await fc.assert(
    fc.asyncProperty(
      fc.tuple(state, state, state),
      fc.integer({ min: 3, max: 4 }),
      async (states, generation) => {
        const replicas = states.map((s, i) =>
          aPod(`ps-${i}`, {
            ...(s === 'absent' ? {} : { report: reportOf(loaded.metadata.name, generation, s) }),
          }),
        );
        const view = statuslessOn(replicas);
        const free = await run(view, true, false);
        const summary = free.statuses[0]?.summary;
        const congested = await run(view, true, true);
        if (summary === 'Reconciling') {
          assert.deepEqual(congested.writes, []);
          assert.deepEqual(congested.outcome, requeueAfter(progressDelayMs));
        } else assert.deepEqual(congested.writes, free.writes);
      },
    ),
  );
});
