// deploy/ is valid against a real API server: `kubectl apply --dry-run=server -k deploy/`
// (which runs admission and schema validation but persists nothing), plus offline checks of
// what a reviewer would otherwise check by eye.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { policyServerLabels } from '../../../control-plane/functions/policyserver-core.ts';
import { parseRedisUrl } from '../../../lib/redis/url.ts';
import {
  build,
  deployDir,
  kubectlRun,
  toYaml,
  withNamespaceForDryRuns,
  type Manifest,
} from './manifests.ts';

type Container = {
  name: string;
  image: string;
  args?: string[];
  env?: { name: string }[];
  resources?: { requests?: object; limits?: object };
  securityContext?: Record<string, unknown>;
  livenessProbe?: { httpGet?: { path: string } };
  readinessProbe?: { httpGet?: { path: string } };
};
type PodSpec = {
  serviceAccountName?: string;
  securityContext?: Record<string, unknown>;
  containers: Container[];
};
const podSpec = (m: Manifest) => (m.spec as { template: { spec: PodSpec } }).template.spec;
const find = (ms: Manifest[], kind: string, name: string) => {
  const m = ms.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(m, `${kind}/${name} is in the build`);
  return m;
};

describe('deploy/ (kustomize)', () => {
  withNamespaceForDryRuns();

  test('kubectl apply --dry-run=server -k deploy/ succeeds', () => {
    const out = kubectlRun(['apply', '--dry-run=server', '-k', deployDir]);
    assert.equal(out.status, 0, out.stderr);
    for (const kind of [
      'deployment.apps/rollcall-watcher',
      'deployment.apps/rollcall-worker',
      'statefulset.apps/rollcall-redis',
      'networkpolicy.networking.k8s.io/rollcall-redis',
      'networkpolicy.networking.k8s.io/rollcall-policy-server-egress',
    ]) {
      assert.match(
        out.stdout,
        new RegExp(`${kind} (created|configured|unchanged) \\(server dry run\\)`),
      );
    }
  });

  test('the optional components build, and all but the ServiceMonitor (its CRD is absent here) pass a server dry run', () => {
    const all = build(join(import.meta.dirname, 'overlay'));
    assert.ok(all.some((m) => m.kind === 'ServiceMonitor'));
    assert.ok(all.some((m) => m.kind === 'HorizontalPodAutoscaler'));
    const redis = find(all, 'StatefulSet', 'rollcall-redis').spec as {
      volumeClaimTemplates?: unknown[];
      template: { spec: PodSpec & { volumes?: { name: string }[] } };
    };
    assert.equal(redis.volumeClaimTemplates?.length, 1);
    assert.deepEqual(
      redis.template.spec.volumes ?? [],
      [],
      'the emptyDir is replaced by the claim',
    );
    assert.ok(redis.template.spec.containers[0]!.args!.includes('noeviction'));
    const out = kubectlRun(
      ['apply', '--dry-run=server', '-f', '-'],
      all
        .filter((m) => m.kind !== 'ServiceMonitor')
        .map((m) => JSON.stringify(m))
        .join('\n---\n'),
    );
    assert.equal(out.status, 0, out.stderr);
    assert.doesNotMatch(
      kubectlRun(['api-resources']).stdout,
      /servicemonitors/,
      'no ServiceMonitor CRD here: the default kustomization must not include one',
    );
  });

  test('components/redis-sentinel: 3 Redis and 3 Sentinels, rollcall on redis+sentinel:// naming them, passes a server dry run', () => {
    const all = build(join(import.meta.dirname, 'overlay-sentinel'));
    const replicas = (name: string) =>
      (find(all, 'StatefulSet', name).spec as { replicas: number }).replicas;
    assert.equal(replicas('rollcall-redis'), 3);
    assert.equal(replicas('rollcall-redis-sentinel'), 3);
    assert.ok(
      !all.some((m) => m.kind === 'Service' && m.metadata.name === 'rollcall-redis'),
      'no Service spreads clients over replicas',
    );
    for (const name of ['rollcall-watcher', 'rollcall-worker']) {
      const env = podSpec(find(all, 'Deployment', name)).containers[0]!.env as {
        name: string;
        value?: string;
      }[];
      const target = parseRedisUrl(env.find((e) => e.name === 'REDIS_URL')?.value ?? '');
      assert.equal(target.kind, 'sentinel');
      assert.deepEqual(
        target.kind === 'sentinel' && target.sentinels.map((n) => `${n.host}:${n.port}`),
        [0, 1, 2].map((i) => `rollcall-redis-sentinel-${i}.rollcall-redis-sentinel:26379`),
      );
    }
    // The start scripts are POSIX sh (the official image's alpine has no bash).
    const scripts = all.find(
      (m) => m.kind === 'ConfigMap' && m.metadata.name.startsWith('rollcall-redis-scripts'),
    );
    for (const [file, text] of Object.entries((scripts?.data ?? {}) as Record<string, string>))
      assert.equal(spawnSync('sh', ['-n'], { input: text }).status, 0, `${file} parses`);
    assert.equal(Object.keys((scripts?.data ?? {}) as object).length, 2);
    const out = kubectlRun(['apply', '--dry-run=server', '-f', '-'], toYaml(all));
    assert.equal(out.status, 0, out.stderr);
  });

  test('the default build has no ServiceMonitor, and the CRDs come from deploy/crds', () => {
    const ms = build();
    assert.equal(ms.filter((m) => m.kind === 'ServiceMonitor').length, 0);
    assert.deepEqual(
      ms
        .filter((m) => m.kind === 'CustomResourceDefinition')
        .map((m) => m.metadata.name)
        .sort(),
      [
        'clusterreports.openreports.io',
        'policies.rollcall.dev',
        'policyrevisions.rollcall.dev',
        'policyservers.rollcall.dev',
        'reports.openreports.io',
      ],
      "rollcall's CRDs, and OpenReports' where the audit writes",
    );
  });

  test('watcher and worker run the image with their role, their own account, probes, limits and a read-only root', () => {
    const ms = build();
    for (const [role, replicas] of [
      ['watcher', 2],
      ['worker', 2],
    ] as const) {
      const d = find(ms, 'Deployment', `rollcall-${role}`);
      const spec = podSpec(d);
      const c = spec.containers[0]!;
      assert.equal((d.spec as { replicas: number }).replicas, replicas);
      assert.equal(spec.serviceAccountName, `rollcall-${role}`);
      assert.deepEqual(
        c.args,
        [role],
        'the entrypoint (node cli/rollcall.ts) + the role: what the tests run',
      );
      assert.match(c.image, /^rollcall:\d+\.\d+\.\d+$/, 'a pinned tag, never latest');
      assert.equal(c.livenessProbe?.httpGet?.path, '/healthz');
      assert.equal(c.readinessProbe?.httpGet?.path, '/readyz');
      assert.ok(c.resources?.requests && c.resources?.limits);
      assert.equal(c.securityContext?.readOnlyRootFilesystem, true);
      assert.equal(c.securityContext?.allowPrivilegeEscalation, false);
      assert.equal(spec.securityContext?.runAsNonRoot, true);
      const env = new Set(c.env?.map((e) => e.name));
      for (const name of ['PORT', 'REDIS_URL', 'ROLLCALL_NAMESPACE', 'ROLLCALL_UI_CREDENTIALS'])
        assert.ok(env.has(name), `${role} sets ${name}`);
      assert.equal(
        env.has('POD_NAME'),
        role === 'watcher',
        'the watcher gets its leader identity from the downward API',
      );
      find(ms, 'PodDisruptionBudget', `rollcall-${role}`);
      find(ms, 'Service', `rollcall-${role}`);
    }
  });

  test('Redis: noeviction, reachable only from the watcher and worker pods', () => {
    const ms = build();
    const redis = find(ms, 'StatefulSet', 'rollcall-redis');
    const args = podSpec(redis).containers[0]!.args!;
    assert.equal(args[args.indexOf('--maxmemory-policy') + 1], 'noeviction');
    const np = find(ms, 'NetworkPolicy', 'rollcall-redis').spec as {
      podSelector: { matchLabels: Record<string, string> };
      ingress: {
        from: { podSelector: { matchExpressions: { key: string; values: string[] }[] } }[];
      }[];
    };
    assert.equal(np.podSelector.matchLabels['app.kubernetes.io/component'], 'redis');
    assert.equal(np.ingress.length, 1);
    const components = np.ingress[0]!.from[0]!.podSelector.matchExpressions.find(
      (e) => e.key === 'app.kubernetes.io/component',
    );
    assert.deepEqual(components?.values, ['watcher', 'worker']);
  });

  test('policy-server pods reach DNS, and HTTPS and the apiserver anywhere but link-local (cloud metadata)', () => {
    const np = find(build(), 'NetworkPolicy', 'rollcall-policy-server-egress').spec as {
      podSelector: { matchLabels: Record<string, string> };
      policyTypes: string[];
      egress: {
        to?: { ipBlock: { cidr: string; except?: string[] } }[];
        ports: { port: number; protocol: string }[];
      }[];
    };
    // Labels rollcall puts on every policy-server pod, whichever PolicyServer it serves.
    const podLabels = policyServerLabels('any');
    for (const [label, value] of Object.entries(np.podSelector.matchLabels))
      assert.equal(podLabels[label], value, `policy-server pods carry ${label}=${value}`);
    assert.deepEqual(Object.keys(np.podSelector.matchLabels).sort(), [
      'app.kubernetes.io/managed-by',
      'app.kubernetes.io/name',
    ]);
    assert.deepEqual(np.policyTypes, ['Egress'], 'ingress (the webhook calls) is left alone');
    const [dns, https] = np.egress;
    assert.equal(dns?.to, undefined);
    assert.deepEqual(
      dns?.ports.map((p) => `${p.port}/${p.protocol}`),
      ['53/UDP', '53/TCP'],
    );
    assert.deepEqual(https?.to, [
      { ipBlock: { cidr: '0.0.0.0/0', except: ['169.254.0.0/16'] } },
      { ipBlock: { cidr: '::/0', except: ['fe80::/10'] } },
    ]);
    assert.deepEqual(
      https?.ports.map((p) => `${p.port}/${p.protocol}`),
      ['443/TCP', '6443/TCP'],
    );
    assert.equal(np.egress.length, 2, 'nothing else: no plain HTTP, no other port');
  });
});
