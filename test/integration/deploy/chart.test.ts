// charts/rollcall: `helm lint` finds nothing; with default values it renders the objects of
// deploy/ (kustomize), and with its optional parts those of deploy/'s components, except for
// the differences listed in `asTheChartRendersIt`; the rendering passes a server-side dry run
// on the local cluster; and each value does what values.yaml says. Helm is built from its Go
// module (tooling/cluster/build.ts, cached). rbac.test.ts runs the RBAC checks on the chart's accounts.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { parse } from 'yaml';
import { parseRedisUrl } from '../../../lib/redis/url.ts';
import { installCrds } from '../../../control-plane/install-crds.ts';
import { testCluster, testKubeConfig } from '../../support/kube.ts';
import {
  build,
  chartDir,
  deployDir,
  helmRun,
  kubectlOk,
  kubectlRun,
  NAMESPACE,
  parseManifests,
  renderChart,
  toYaml,
  withNamespaceForDryRuns,
  type Manifest,
} from './manifests.ts';

/** deploy/namespace.yaml's Pod Security labels, as `kubectl label` takes them. */
const PSA_LABELS = Object.entries(
  (parse(readFileSync(join(deployDir, 'namespace.yaml'), 'utf8')) as Manifest).metadata.labels ??
    {},
).map(([k, v]) => `${k}=${v}`);

const OPENREPORTS = '.openreports.io';
/** The objects a helm run printed, or its failure. */
const parseManifestsOf = (out: { status: number; stdout: string; stderr: string }) => {
  assert.equal(out.status, 0, out.stderr);
  return parseManifests(out.stdout);
};
const OPENREPORTS_CRDS = ['reports.openreports.io', 'clusterreports.openreports.io'];
/** The names of the OpenReports CRDs among `ms`. */
const openReportsCrds = (ms: Manifest[]) =>
  ms
    .filter((m) => m.kind === 'CustomResourceDefinition' && m.metadata.name.endsWith(OPENREPORTS))
    .map((m) => m.metadata.name)
    .sort();
const key = (m: Manifest) => `${m.kind}/${m.metadata.namespace ?? ''}/${m.metadata.name}`;
const HELM_LABELS = ['helm.sh/chart', 'app.kubernetes.io/managed-by'];
type PodTemplate = { metadata: { annotations?: Record<string, string> } };
const podTemplate = (m: Manifest) => (m.spec as { template?: PodTemplate } | undefined)?.template;

/**
 * The chart's objects without what Helm charts conventionally add: two labels on each, and
 * on the pods of redis.mode sentinel a checksum of their start script (difference 4 below),
 * and without the Secret of Redis' password it generates (difference 5).
 */
function withoutHelmConventions(chart: Manifest[]): Manifest[] {
  const generated = (m: Manifest) => m.kind === 'Secret' && m.metadata.name === 'rollcall-redis';
  const ours = chart.filter((m) => !generated(m));
  return ours.map((m) => {
    const copy = structuredClone(m);
    for (const label of HELM_LABELS) delete copy.metadata.labels?.[label];
    const template = podTemplate(copy);
    if (template?.metadata.annotations) {
      for (const name of Object.keys(template.metadata.annotations))
        if (name.startsWith('checksum/')) delete template.metadata.annotations[name];
      if (Object.keys(template.metadata.annotations).length === 0)
        delete template.metadata.annotations;
    }
    return copy;
  });
}

/** kustomize's generated names (`<name>-<hash of the content>`) of deploy/ and its components. */
const GENERATED = ['rollcall-ui', 'rollcall-redis-scripts'];

/**
 * deploy/'s objects as the chart renders them. The differences, by design:
 * 1. No Namespace: Helm installs into an existing one (docs/install.md creates it with the
 *    same Pod Security labels, from deploy/namespace.yaml).
 * 2. No UI Secret: deploy/ generates an empty `rollcall-ui-<hash>`; the chart reads an existing
 *    Secret (ui.existingSecret, default rollcall-ui), optional, so the UI is off in both.
 * 3. With the worker HPA, the chart leaves the Deployment's replicas to it (a `helm upgrade`
 *    would otherwise reset what the HPA scaled).
 * 4. The redis-sentinel component's start scripts: kustomize names their ConfigMap by its
 *    content (`rollcall-redis-scripts-<hash>`), so that a new script rolls the pods; the chart
 *    names it `rollcall-redis-scripts` and rolls the pods by a `checksum/<script>` annotation.
 * 5. Redis' password: the chart generates the Secret rollcall-redis (redis-auth.test.ts);
 *    deploy/ has the operator create it (kustomize cannot make a random value).
 * 6. OpenReports' CRDs: the chart marks them helm.sh/resource-policy keep (other tools' Reports
 *    may live in them; `helm uninstall` must not delete them), and renders them from
 *    templates/ (openreports.installCRDs), not crds/.
 * And two that say the same in other words: deploy/'s components stand outside its labels
 * transformer, so their objects (the HPA, the ServiceMonitor, Sentinel's) miss the part-of
 * label every object of the chart has; and where deploy/'s redis-persistence component deletes
 * the emptyDir (`$patch: delete`), kustomize leaves `volumes: []`, which says the same as none.
 */
function asTheChartRendersIt(deploy: Manifest[], { hpa = false } = {}): Manifest[] {
  const secret = deploy.find(
    (m) => m.kind === 'Secret' && m.metadata.name.startsWith('rollcall-ui-'),
  );
  assert.ok(secret, 'deploy/ generates the UI Secret');
  assert.deepEqual(
    secret.data,
    { ROLLCALL_UI_CREDENTIALS: '' },
    "deploy/'s UI Secret is empty: the UI is off by default",
  );
  const generatedName = new RegExp(`"(${GENERATED.join('|')})-[a-z0-9]{10}"`, 'g');
  const renamed = JSON.parse(
    JSON.stringify(deploy.filter((m) => m !== secret && m.kind !== 'Namespace')).replaceAll(
      generatedName,
      '"$1"',
    ),
  ) as Manifest[];
  for (const m of renamed) {
    m.metadata.labels = { ...m.metadata.labels, 'app.kubernetes.io/part-of': 'rollcall' };
    if (m.kind === 'CustomResourceDefinition' && m.metadata.name.endsWith(OPENREPORTS))
      m.metadata.annotations = { ...m.metadata.annotations, 'helm.sh/resource-policy': 'keep' };
  }
  const worker = renamed.find(
    (m) => m.kind === 'Deployment' && m.metadata.name === 'rollcall-worker',
  );
  if (hpa) delete (worker?.spec as { replicas?: number }).replicas;
  const redis = renamed.find((m) => m.kind === 'StatefulSet')?.spec as
    { template: { spec: { volumes?: unknown[] } } } | undefined;
  if (redis?.template.spec.volumes?.length === 0) delete redis.template.spec.volumes;
  return renamed;
}

function assertSameObjects(chart: Manifest[], deploy: Manifest[]) {
  const byKey = (ms: Manifest[]) => new Map(ms.map((m) => [key(m), m]));
  const [c, d] = [byKey(chart), byKey(deploy)];
  assert.deepEqual([...c.keys()].sort(), [...d.keys()].sort(), 'the same objects');
  for (const [k, m] of d) assert.deepEqual(c.get(k), m, `${k} is the same in the chart`);
}

type Container = {
  name: string;
  image: string;
  imagePullPolicy?: string;
  env: { name: string; value?: string; valueFrom?: Record<string, Record<string, unknown>> }[];
  resources: unknown;
};
type Workload = Manifest & {
  spec: {
    replicas?: number;
    template: { spec: { containers: Container[]; imagePullSecrets?: { name: string }[] } };
  };
};
const workload = (ms: Manifest[], name: string) => {
  const w = ms.find(
    (m) => (m.kind === 'Deployment' || m.kind === 'StatefulSet') && m.metadata.name === name,
  );
  assert.ok(w, `${name} is rendered`);
  return w as Workload;
};
const container = (ms: Manifest[], name: string) =>
  workload(ms, name).spec.template.spec.containers[0]!;
const env = (ms: Manifest[], name: string, variable: string) =>
  container(ms, name).env.find((e) => e.name === variable);
/** The start scripts of redis.mode sentinel. */
const scripts = (ms: Manifest[]) => {
  const map = ms.find(
    (m) => m.kind === 'ConfigMap' && m.metadata.name === 'rollcall-redis-scripts',
  );
  const data = map?.data as { 'redis.sh'?: string; 'sentinel.sh'?: string } | undefined;
  assert.ok(data?.['redis.sh'] && data['sentinel.sh'], 'the start scripts are rendered');
  return { 'redis.sh': data['redis.sh'], 'sentinel.sh': data['sentinel.sh'] };
};
const memoryLimit = (ms: Manifest[], name: string) =>
  (container(ms, name).resources as { limits?: { memory?: string } }).limits?.memory;

describe('charts/rollcall', () => {
  test('helm lint --strict finds nothing, with the defaults, with Sentinel and with an external Redis', async () => {
    for (const values of [
      [],
      ['--set', 'redis.mode=sentinel'],
      ['--set', 'redis.mode=external', '--set', 'redis.external.url=redis://redis:6379'],
    ]) {
      const out = await helmRun(['lint', '--strict', chartDir, ...values]);
      assert.equal(out.status, 0, out.stdout + out.stderr);
      assert.match(out.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(out.stdout + out.stderr, /\[(WARNING|ERROR)\]/);
    }
  });

  test("crds/ holds rollcall's files of deploy/crds and files/ OpenReports', unchanged", () => {
    const crds = join(deployDir, 'crds');
    const files = readdirSync(crds).filter((f) => f !== 'kustomization.yaml');
    const openReports = files.filter((f) => f.startsWith('openreports-'));
    const where = (file: string) => (openReports.includes(file) ? 'files' : 'crds');
    assert.deepEqual(
      readdirSync(join(chartDir, 'crds')).sort(),
      files.filter((f) => where(f) === 'crds').sort(),
    );
    assert.deepEqual(readdirSync(join(chartDir, 'files')).sort(), openReports.sort());
    assert.equal(openReports.length, 2);
    for (const file of files)
      assert.equal(
        readFileSync(join(chartDir, where(file), file), 'utf8'),
        readFileSync(join(crds, file), 'utf8'),
        `charts/rollcall/${where(file)}/${file} differs from deploy/crds/${file}: cp deploy/crds/${file} charts/rollcall/${where(file)}/`,
      );
  });

  test('with default values it renders the objects of deploy/', async () => {
    assertSameObjects(withoutHelmConventions(await renderChart()), asTheChartRendersIt(build()));
  });

  test('with persistence, the worker HPA and the ServiceMonitor it renders deploy/ with its components', async () => {
    const chart = await renderChart([
      '--set',
      'redis.bundled.persistence.enabled=true',
      '--set',
      'worker.autoscaling.enabled=true',
      '--set',
      'serviceMonitor.enabled=true',
    ]);
    const overlay = build(join(import.meta.dirname, 'overlay'));
    assertSameObjects(withoutHelmConventions(chart), asTheChartRendersIt(overlay, { hpa: true }));
  });

  test('with openreports.installCRDs=false it renders deploy/ with components/without-openreports-crds', async () => {
    const chart = await renderChart(['--set', 'openreports.installCRDs=false']);
    assert.deepEqual(openReportsCrds(chart), []);
    const overlay = build(join(import.meta.dirname, 'overlay-no-openreports'));
    assertSameObjects(withoutHelmConventions(chart), asTheChartRendersIt(overlay));
  });

  test("audit.readableResources narrows the audit reader as overlay-audit-narrow's kustomize patch does", async () => {
    const chart = await renderChart([
      '--set-json',
      'audit.readableResources=[{"apiGroups":[""],"resources":["configmaps"]}]',
    ]);
    const overlay = build(join(import.meta.dirname, 'overlay-audit-narrow'));
    assertSameObjects(withoutHelmConventions(chart), asTheChartRendersIt(overlay));
    const none = await renderChart(['--set-json', 'audit.readableResources=[]']);
    const reader = none.find(
      (m) => m.kind === 'ClusterRole' && m.metadata.name === 'rollcall-audit-reader',
    );
    assert.deepEqual(reader?.rules, [], '[]: the audit reads nothing');
  });

  test('with redis.mode=sentinel it renders deploy/ with components/redis-sentinel', async () => {
    const chart = await renderChart(['--set', 'redis.mode=sentinel']);
    const overlay = build(join(import.meta.dirname, 'overlay-sentinel'));
    assertSameObjects(withoutHelmConventions(chart), asTheChartRendersIt(overlay));
  });

  test("redis.sentinel sets the group's name, size, timings, spread, budgets and resources; a changed script rolls its pods", async () => {
    const sentinel = (values: string[]) =>
      renderChart([
        '--set',
        'redis.mode=sentinel',
        ...values.flatMap((v) => ['--set', `redis.sentinel.${v}`]),
      ]);
    const ms = await sentinel([
      'masterName=queue',
      'replicas=4',
      'sentinels=5',
      'quorum=3',
      'downAfterMilliseconds=2500',
      'failoverTimeout=30000',
      'parallelSyncs=2',
      'podAntiAffinity=hard',
      'pdb.maxUnavailable=2',
      'resources.limits.memory=1Gi',
      'sentinelResources.limits.memory=256Mi',
    ]);
    const sentinels = [0, 1, 2, 3, 4].map((i) => ({
      host: `rollcall-redis-sentinel-${i}.rollcall-redis-sentinel`,
      port: 26379,
    }));
    for (const role of ['rollcall-watcher', 'rollcall-worker'])
      assert.deepEqual(parseRedisUrl(env(ms, role, 'REDIS_URL')?.value ?? ''), {
        kind: 'sentinel',
        sentinels,
        name: 'queue',
        db: 0,
      });
    assert.equal(workload(ms, 'rollcall-redis').spec.replicas, 4);
    assert.equal(workload(ms, 'rollcall-redis-sentinel').spec.replicas, 5);
    assert.equal(memoryLimit(ms, 'rollcall-redis'), '1Gi');
    assert.equal(memoryLimit(ms, 'rollcall-redis-sentinel'), '256Mi');

    const started = scripts(ms);
    for (const [file, text] of Object.entries(started)) {
      assert.equal(spawnSync('sh', ['-n'], { input: text }).status, 0, `${file} parses`);
      assert.match(text, /^for i in 0 1 2 3 4; do$/m, `${file} asks each Sentinel`);
      assert.match(text, /SENTINEL get-master-addr-by-name queue\b/, file);
    }
    for (const line of [
      'sentinel monitor queue ${primary} 6379 3',
      'sentinel down-after-milliseconds queue 2500',
      'sentinel failover-timeout queue 30000',
      'sentinel parallel-syncs queue 2',
    ])
      assert.ok(started['sentinel.sh'].split('\n').includes(line), line);

    for (const component of ['redis', 'redis-sentinel']) {
      const name = `rollcall-${component}`;
      const selector = {
        matchLabels: {
          'app.kubernetes.io/name': 'rollcall',
          'app.kubernetes.io/component': component,
        },
      };
      assert.deepEqual(
        (workload(ms, name).spec.template.spec as { affinity?: unknown }).affinity,
        {
          podAntiAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: [
              { topologyKey: 'kubernetes.io/hostname', labelSelector: selector },
            ],
          },
        },
        `${name}: one pod per node`,
      );
      const budget = ms.find((m) => m.kind === 'PodDisruptionBudget' && m.metadata.name === name);
      assert.deepEqual(budget?.spec, { maxUnavailable: 2, selector });
    }

    // Each pod template carries the hash of its own script: a timing of the Sentinels rolls
    // them and leaves the Redis pods (and their data) alone.
    const checksums = (rendered: Manifest[]) => {
      const data = scripts(rendered);
      const sum = (name: string, script: keyof typeof data) => {
        const annotated = podTemplate(workload(rendered, name))?.metadata.annotations?.[
          `checksum/${script}`
        ];
        const hash = createHash('sha256').update(data[script]).digest('hex');
        assert.equal(annotated, hash, `${name} is annotated with the hash of ${script}`);
        return annotated;
      };
      return {
        redis: sum('rollcall-redis', 'redis.sh'),
        sentinel: sum('rollcall-redis-sentinel', 'sentinel.sh'),
      };
    };
    const [defaults, slower] = [
      await sentinel([]),
      await sentinel(['downAfterMilliseconds=10000']),
    ];
    assert.equal(checksums(slower).redis, checksums(defaults).redis);
    assert.notEqual(checksums(slower).sentinel, checksums(defaults).sentinel);
  });

  test('an external Redis: no Redis objects, REDIS_URL from the value or from a Secret', async () => {
    const url = 'redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/rollcall';
    // --set-literal: --set would split the URL at its commas.
    const inline = await renderChart([
      '--set',
      'redis.mode=external',
      '--set-literal',
      `redis.external.url=${url}`,
    ]);
    assert.deepEqual(
      inline.filter((m) => m.metadata.name === 'rollcall-redis').map((m) => m.kind),
      [],
      'no Service, StatefulSet or NetworkPolicy of the bundled Redis',
    );
    for (const role of ['rollcall-watcher', 'rollcall-worker'])
      assert.deepEqual(env(inline, role, 'REDIS_URL'), { name: 'REDIS_URL', value: url });

    const fromSecret = await renderChart([
      '--set',
      'redis.mode=external',
      '--set',
      'redis.external.urlSecret.name=my-redis',
    ]);
    assert.deepEqual(env(fromSecret, 'rollcall-worker', 'REDIS_URL')?.valueFrom, {
      secretKeyRef: { name: 'my-redis', key: 'REDIS_URL' },
    });

    const missing = await helmRun([
      'template',
      'rollcall',
      chartDir,
      '--set',
      'redis.mode=external',
    ]);
    assert.notEqual(missing.status, 0);
    assert.match(
      missing.stderr,
      /redis\.mode is external: set redis\.external\.url .* or redis\.external\.urlSecret\.name/,
    );
  });

  test('image, replicas, write limits, resources and the UI Secret come from values', async () => {
    const ms = await renderChart([
      '--set',
      'image.repository=registry.example/rollcall',
      '--set',
      'image.tag=1.2.3',
      '--set',
      'image.pullPolicy=Always',
      '--set',
      'imagePullSecrets[0].name=pull',
      '--set',
      'watcher.replicas=3',
      '--set',
      'worker.replicas=5',
      '--set',
      'writeLimits.rate=20',
      '--set',
      'writeLimits.burst=40',
      '--set',
      'worker.resources.limits.memory=1Gi',
      '--set',
      'ui.existingSecret=my-ui',
    ]);
    for (const role of ['rollcall-watcher', 'rollcall-worker']) {
      const c = container(ms, role);
      assert.equal(c.image, 'registry.example/rollcall:1.2.3');
      assert.equal(c.imagePullPolicy, 'Always');
      assert.deepEqual(workload(ms, role).spec.template.spec.imagePullSecrets, [{ name: 'pull' }]);
      assert.equal(
        env(ms, role, 'ROLLCALL_UI_CREDENTIALS')?.valueFrom?.secretKeyRef?.name,
        'my-ui',
      );
    }
    assert.equal(workload(ms, 'rollcall-watcher').spec.replicas, 3);
    assert.equal(workload(ms, 'rollcall-worker').spec.replicas, 5);
    assert.equal(
      env(ms, 'rollcall-worker', 'ROLLCALL_POLICY_SERVER_IMAGE')?.value,
      'registry.example/rollcall:1.2.3',
    );
    assert.equal(env(ms, 'rollcall-worker', 'ROLLCALL_WRITE_RATE')?.value, '20');
    assert.equal(env(ms, 'rollcall-worker', 'ROLLCALL_WRITE_BURST')?.value, '40');
    assert.deepEqual(container(ms, 'rollcall-worker').resources, {
      requests: { cpu: '100m', memory: '128Mi' },
      limits: { memory: '1Gi' },
    });
  });

  test("protectedNamespaces reach the workers, an empty list protecting only the release's namespace", async () => {
    const defaults = await renderChart([]);
    assert.equal(
      env(defaults, 'rollcall-worker', 'ROLLCALL_PROTECTED_NAMESPACES')?.value,
      'kube-system,kube-node-lease',
    );
    const chosen = await renderChart(['--set', 'protectedNamespaces={kube-system,cert-manager}']);
    assert.equal(
      env(chosen, 'rollcall-worker', 'ROLLCALL_PROTECTED_NAMESPACES')?.value,
      'kube-system,cert-manager',
    );
    const none = await renderChart(['--set-json', 'protectedNamespaces=[]']);
    assert.equal(env(none, 'rollcall-worker', 'ROLLCALL_PROTECTED_NAMESPACES')?.value, '');
  });

  test('a value of the wrong type, a misspelt one or one that needs another is refused, naming it', async () => {
    for (const [set, message] of [
      ['watcher.replicas=two', /at '\/watcher\/replicas': got string, want integer/],
      ['writeLimits.burst=5', /writeLimits\.burst sets the burst of a writeLimits\.rate cap/],
      ['worker.replica=3', /at '\/worker': additional properties 'replica' not allowed/],
      [
        'redis.mode=memcached',
        /at '\/redis\/mode': value must be one of 'bundled', 'sentinel', 'external'/,
      ],
      ['redis.sentinel.sentinels=2', /at '\/redis\/sentinel\/sentinels': minimum: got 2, want 3/],
      [
        'redis.sentinel.podAntiAffinity=always',
        /at '\/redis\/sentinel\/podAntiAffinity': value must be one of 'soft', 'hard'/,
      ],
      [
        'redis.sentinel.masterName=my/group',
        /at '\/redis\/sentinel\/masterName': 'my\/group' does not match pattern/,
      ],
      [
        'redis.mode=sentinel,redis.sentinel.quorum=4',
        /redis\.sentinel\.quorum is 4 but there are 3 Sentinels .*set a quorum of at most 3/,
      ],
      [
        'redis.mode=sentinel,redis.bundled.persistence.enabled=true',
        /redis\.bundled\.persistence\.enabled is for redis\.mode bundled, not sentinel/,
      ],
      ['certificates.caValidity=10y', /at '\/certificates\/caValidity': '10y' does not match/],
      [
        'openreports.installCRDs=maybe',
        /at '\/openreports\/installCRDs': got string, want boolean/,
      ],
      [
        'audit.readableResources[0].apiGroups[0]=*',
        /at '\/audit\/readableResources\/0': missing property 'resources'/,
      ],
      [
        'protectedNamespaces={Kube_System}',
        /at '\/protectedNamespaces\/0': 'Kube_System' does not match/,
      ],
    ] as const) {
      const out = await helmRun(['template', 'rollcall', chartDir, '--set', set]);
      assert.notEqual(out.status, 0, set);
      assert.match(out.stderr, message);
    }
  });

  describe('on the local cluster', () => {
    withNamespaceForDryRuns();

    test('the rendered chart passes a server-side dry run, with its optional parts (but the ServiceMonitor: no CRD here) and with Sentinel', async () => {
      for (const values of [
        [],
        ['--set', 'redis.mode=sentinel'],
        [
          '--set',
          'redis.bundled.persistence.enabled=true',
          '--set',
          'worker.autoscaling.enabled=true',
        ],
      ]) {
        const out = kubectlRun(
          ['apply', '--dry-run=server', '-f', '-'],
          toYaml(await renderChart(values)),
        );
        assert.equal(out.status, 0, out.stderr);
        assert.match(
          out.stdout,
          /deployment\.apps\/rollcall-worker (created|configured|unchanged) \(server dry run\)/,
        );
        assert.match(
          out.stdout,
          /customresourcedefinition\.apiextensions\.k8s\.io\/policies\.rollcall\.dev/,
        );
      }
    });

    test('openreports.installCRDs: CRDs another owner installed are left out, those of this release kept in', async () => {
      // The CRDs as `rollcall install-crds` (or another tool) installs them: no Helm release's.
      await installCrds(testKubeConfig(), { info: () => {} });
      const lookups = async () =>
        openReportsCrds(
          parseManifestsOf(
            await helmRun([
              'template',
              'rollcall',
              chartDir,
              '--namespace',
              NAMESPACE,
              '--dry-run=server',
              '--kubeconfig',
              testCluster().kubeconfig,
            ]),
          ),
        );
      assert.deepEqual(await lookups(), [], "another owner's are never taken over");
      const release = [
        'meta.helm.sh/release-name=rollcall',
        `meta.helm.sh/release-namespace=${NAMESPACE}`,
      ];
      kubectlOk(['annotate', 'crd', OPENREPORTS_CRDS[0]!, '--overwrite', ...release]);
      try {
        assert.deepEqual(
          await lookups(),
          [OPENREPORTS_CRDS[0]],
          "this release's stay in the chart",
        );
      } finally {
        kubectlOk([
          'annotate',
          'crd',
          OPENREPORTS_CRDS[0]!,
          'meta.helm.sh/release-name-',
          'meta.helm.sh/release-namespace-',
        ]);
      }
      // Without a cluster to ask (helm template, Argo CD) the chart renders both.
      assert.deepEqual(openReportsCrds(await renderChart()), [...OPENREPORTS_CRDS].sort());
    });

    test('helm install as docs/install.md gives it rolls out every workload under Pod Security restricted, with one Redis or with Sentinel; helm uninstall removes them', async () => {
      // Not rollcall's own image: the local node agent would run those pods as policy servers;
      // kwok plays these.
      const kubeconfig = ['--kubeconfig', testCluster().kubeconfig, '-n', NAMESPACE];
      kubectlOk(['label', 'namespace', NAMESPACE, '--overwrite', ...PSA_LABELS]);
      for (const { values, redis, notes } of [
        { values: [], redis: 'rollcall-redis=1/1', notes: /Redis: bundled \(rollcall-redis\)/ },
        {
          values: ['--set', 'redis.mode=sentinel'],
          redis: 'rollcall-redis=3/3 rollcall-redis-sentinel=3/3',
          notes: /Redis: sentinel \(3 Redis pods, 3 Sentinels with a quorum of 2, group rollcall\)/,
        },
      ]) {
        const install = await helmRun([
          'install',
          'rollcall',
          chartDir,
          ...kubeconfig,
          '--set',
          'image.repository=example.invalid/rollcall',
          ...values,
          '--wait',
          '--timeout=120s',
        ]);
        try {
          assert.equal(install.status, 0, install.stderr);
          assert.match(install.stdout, /STATUS: deployed/);
          assert.match(
            install.stdout,
            /kubectl -n rollcall-system create secret generic rollcall-ui/,
            'NOTES.txt',
          );
          assert.match(install.stdout, notes, 'NOTES.txt');
          const ready = kubectlOk([
            'get',
            'deployments,statefulsets',
            '-n',
            NAMESPACE,
            '-l',
            'app.kubernetes.io/managed-by=Helm',
            '-o',
            'jsonpath={range .items[*]}{.metadata.name}={.status.readyReplicas}/{.spec.replicas} {end}',
          ]);
          assert.equal(ready.trim(), `rollcall-watcher=2/2 rollcall-worker=2/2 ${redis}`);
        } finally {
          const uninstall = await helmRun(['uninstall', 'rollcall', ...kubeconfig, '--wait']);
          assert.equal(uninstall.status, 0, uninstall.stderr);
        }
        assert.equal(
          kubectlOk(['get', 'deployments,statefulsets', '-n', NAMESPACE, '-o', 'name']).trim(),
          '',
        );
      }
    });
  });
});
