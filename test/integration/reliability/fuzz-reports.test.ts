// Fault 7: malformed replica reports. 10,000 fuzzed annotations go through the report reader
// and the Policy core in-process; 200 more are written on one real pod while its siblings keep
// good reports. A bad report makes only its pod fail, with a clear message; nothing crashes.
import assert from 'node:assert/strict';
import { CoreV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { test } from 'node:test';
import { REPORT_ANNOTATION } from '../../../api/constants.ts';
import { readReplicaReport, reportsFromPods } from '../../../api/report.ts';
import { computePolicy } from '../../../control-plane/functions/policy-core.ts';
import { aPod, aPolicy, aServerWithDeployment, NOW, POLICY_UID } from '../../fixtures/builders.ts';
import { testKubeConfig } from '../../support/kube.ts';
import { policyManifest } from '../../support/manifests.ts';
import { apply, waitPolicy as watchPolicy, type PolicyObject } from '../../support/scenario.ts';
import { faultScenario, rng, seedFromEnv } from '../../support/driver.ts';
import { fuzzedReport } from './fuzz.ts';

const seed = seedFromEnv();
const failedMessage =
  /^invalid rollcall\.dev\/policies annotation: report (is \d+ bytes, over|is not valid JSON|must be a JSON object|has wrong types)/;

test(`10,000 fuzzed reports never throw, and only ever fail their own pod with a clear message (seed ${seed})`, () => {
  const random = rng(seed);
  const { server, deployment, replicaSet } = aServerWithDeployment();
  const good = JSON.stringify({
    'require-labels': { uid: POLICY_UID, generation: 4, state: 'Loaded' },
  });
  let invalid = 0;
  for (let i = 0; i < 10_000; i++) {
    const annotation = fuzzedReport(random, 'require-labels', POLICY_UID, 4);
    const reading = readReplicaReport(annotation);
    const pods = [
      aPod('ps-a', { report: annotation }),
      aPod('ps-b', { report: good }),
      aPod('ps-c', { report: good }),
    ];
    const decision = computePolicy({
      policy: aPolicy(),
      policyServer: server,
      deployment,
      replicaSets: [replicaSet],
      pods,
      reports: reportsFromPods(pods, 'require-labels'),
      servedGeneration: undefined,
      now: NOW,
    });
    const at = `case ${i} (seed ${seed}): ${JSON.stringify(annotation.slice(0, 200))}`;
    const ready = decision.status.conditions?.find((c) => c.type === 'Ready');
    assert.ok(Buffer.byteLength(ready?.message ?? '') <= 32768, at);
    if (reading.kind === 'invalid') {
      invalid++;
      // Never trusted in part: the pod is failed, the good pods still count.
      assert.equal(decision.status.readyReplicas, 2, at);
      assert.deepEqual(
        decision.status.failures?.map((f) => f.pod),
        ['ps-a'],
        at,
      );
      assert.match(decision.status.failures?.[0]?.message ?? '', failedMessage, at);
      assert.ok(Buffer.byteLength(decision.status.failures?.[0]?.message ?? '') <= 1024, at);
      assert.equal(decision.status.summary, 'Stalled', at);
      assert.match(
        ready?.message ?? '',
        /failed to load on pod ps-a: invalid rollcall\.dev\/policies annotation/,
        at,
      );
    } else {
      // A report that survived the mutations is well-formed: the siblings are untouched either way.
      assert.ok(decision.status.readyReplicas! >= 2, at);
      assert.ok(!decision.status.failures?.some((f) => f.pod !== 'ps-a'), at);
    }
  }
  assert.ok(invalid > 8000, `most fuzzed reports should be invalid, got ${invalid}`);
});

test(
  `200 fuzzed reports on a real pod fail only that pod, and rollcall keeps running (seed ${seed})`,
  { timeout: 90_000 },
  async () => {
    const kc = testKubeConfig();
    const namespace = 'rel-fuzz';
    const { s, rollcall, sim } = await faultScenario(namespace, { servers: 1, seed });
    const [server] = [...s.model.servers.keys()];
    await s.scale(server!, 3);
    const name = 'rel-fuzzed';
    await apply(policyManifest(name, server!, { module: 'sim://ok' }));
    const waitPolicy = (done: (p: PolicyObject) => boolean) => watchPolicy(kc, name, done);
    const uid = (await waitPolicy((p) => p.status?.ready === '3/3')).metadata.uid ?? '';
    // From now on the reports are ours: the simulator would overwrite them.
    await sim.stop();

    const core = kc.makeApiClient(CoreV1Api);
    const pods = await core.listNamespacedPod({
      namespace,
      labelSelector: `rollcall.dev/policy-server=${server}`,
    });
    const victim = pods.items.find((p) => !p.metadata?.deletionTimestamp)!.metadata!.name!;
    const random = rng(seed + 1);
    const patch = (value: string) =>
      core.patchNamespacedPod(
        {
          name: victim,
          namespace,
          body: { metadata: { annotations: { [REPORT_ANNOTATION]: value } } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    let written = 0;
    for (let i = 0; i < 200; i++) {
      // The API caps all annotations at 256 KiB together; larger values never reach a pod.
      const value = fuzzedReport(random, name, uid, 1).slice(0, 200_000);
      if (
        await patch(value).then(
          () => true,
          () => false,
        )
      )
        written++;
    }
    assert.ok(written >= 190, `the API accepted only ${written} of 200 fuzzed reports`);
    // End on a known-bad one, so the final state is certain.
    await patch(`{"rel-fuzzed": {"uid": "${uid}", "generation": "1", "state": "Loaded"}}`);
    const final = await waitPolicy(
      (p) =>
        p.status?.failures?.[0]?.message.includes('has wrong types: rel-fuzzed.generation') ??
        false,
    );
    assert.equal(final.status?.readyReplicas, 2, 'the two good pods still count');
    assert.equal(final.status?.failedReplicas, 1);
    assert.equal(final.status?.failures?.[0]?.pod, victim);
    assert.match(
      final.status?.failures?.[0]?.message ?? '',
      /invalid rollcall\.dev\/policies annotation: report has wrong types: rel-fuzzed\.generation/,
    );
    assert.equal(rollcall.child.exitCode, null, 'rollcall is still running');
    assert.equal(rollcall.child.signalCode, null);
  },
);
