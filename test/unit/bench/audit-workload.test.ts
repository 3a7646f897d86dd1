// The audit bench checks rollcall's Reports against `violations(i)`, what it says each Pod
// breaks; this proves that what it says is what the policy server's own engine finds:
// `rollcall test` (the replica's load path and engine, offline) on every Policy of the bench
// and Pods 0..599 (every residue the flaws use), with the results `violations` predicts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { stringify } from 'yaml';
import {
  BENCH_NAMESPACE_LABEL,
  CHECKS,
  auditPolicy,
  benchPod,
  flaws,
  namespaceName,
  namespaceOf,
  podName,
  violations,
} from '../../../bench/audit-workload.ts';
import { inProcess, scratch } from '../cli/helpers.ts';

const PODS = 600;
const NAMESPACES = 7;

test('rollcall’s engine fails exactly the Pods violations() names, for every bench Policy', async () => {
  const namespaces = Array.from({ length: NAMESPACES }, (_, n) => ({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: namespaceName(n), labels: { [BENCH_NAMESPACE_LABEL]: 'true' } },
  }));
  const pods = Array.from({ length: PODS }, (_, i) => {
    const pod = benchPod(i, 'kwok-node-0');
    return { ...pod, metadata: { ...pod.metadata, namespace: namespaceOf(i, NAMESPACES) } };
  });
  const ref = (i: number) => `Pod/${namespaceOf(i, NAMESPACES)}/${podName(i)}`;
  const results = CHECKS.flatMap((check) =>
    (['pass', 'fail'] as const)
      .map((result) => ({
        policy: check.name,
        resource: pods
          .map((_, i) => i)
          .filter((i) => violations(i).has(check.name) === (result === 'fail'))
          .map(ref),
        result,
      }))
      .filter((r) => r.resource.length > 0),
  );
  const dir = scratch({
    'policies.yaml': CHECKS.map((c) => stringify(auditPolicy(c, 'audit'))).join('---\n'),
    'resources.yaml': [...namespaces, ...pods].map((o) => stringify(o)).join('---\n'),
    'rollcall-test.yaml': stringify({
      name: 'audit bench workload',
      policies: ['policies.yaml'],
      resources: ['resources.yaml'],
      results,
    }),
  });
  const ran = await inProcess(['test', dir]);
  assert.equal(ran.code, 0, `${ran.stdout}\n${ran.stderr}`);
});

test('every check fails some Pods and passes most, so the Reports hold both', () => {
  for (const check of CHECKS.filter(
    (c) => !['max-containers', 'pod-name-dns-label'].includes(c.name),
  )) {
    const failing = Array.from({ length: 10_000 }, (_, i) => i).filter((i) =>
      violations(i).has(check.name),
    ).length;
    assert.ok(failing > 0 && failing < 5000, `${check.name}: ${failing} of 10,000 fail`);
  }
});

test('a Pod’s image flaws never overlap, so its one image shows each', () => {
  fc.assert(
    fc.property(fc.nat(1_000_000), (i) => {
      const f = flaws(i);
      assert.ok([f.tagless, f.foreign, f.latest].filter(Boolean).length <= 1);
      // The apiserver refuses privileged with allowPrivilegeEscalation false.
      const c = benchPod(i).spec.containers[0]!.securityContext;
      assert.ok(!(c.privileged && c.allowPrivilegeEscalation === false));
    }),
  );
});
