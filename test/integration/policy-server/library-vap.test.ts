// The policy library converted to Kubernetes' own ValidatingAdmissionPolicy (issue 37,
// acceptance 4): `rollcall convert --to vap` of every library file must give objects the local
// apiserver accepts, and each native policy must give rollcall's verdict on the library's test
// resources (policies/tests/*/rollcall-test.yaml, whose results `rollcall test policies/`
// proves are rollcall's, test/unit/policies/library.test.ts).
//
// Each resource of an expected result is dry-run created (or, for an UPDATE, dry-run updated)
// in a copy of its namespace, with a label that only that policy's binding selects: the
// apiserver reports only the first denial of a request, so one policy judges each request.
// The bindings also select only this run's namespaces; everything is deleted afterwards.
//
// The one change to the converted objects: a first validation that denies objects labelled
// `rollcall-probe`, so the test knows when each policy has become active (as
// vap-conformance.test.ts does).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { dirname, join, relative, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { repoRoot } from '../../../tooling/cluster/paths.ts';
import { kubeConfigTarget } from '../../../lib/kube/api.ts';
import { testKubeConfig, uniqueName } from '../../support/kube.ts';
import { mapLimit } from '../../support/map-limit.ts';

const api = kubeConfigTarget(testKubeConfig());
const run = uniqueName('lvap').slice(0, 22);
/** Selects, on an object, the one policy whose binding judges it. */
const POLICY_LABEL = 'rollcall.dev/library-vap';
const PROBE_LABEL = 'rollcall-probe';

const LIBRARY = [
  'best-practices.yaml',
  'pod-security-baseline.yaml',
  'pod-security-restricted.yaml',
];
const SUITES = ['best-practices', 'pod-security-baseline', 'pod-security-restricted'].map((s) =>
  join(repoRoot, 'policies', 'tests', s, 'rollcall-test.yaml'),
);

/**
 * Test resources the apiserver refuses as invalid (422) before any admission policy runs, so
 * no native verdict exists to compare; the test checks that they are refused.
 */
const INVALID: Record<string, string> = {
  'Pod/team-a/proc-mount-unmasked':
    'procMount Unmasked needs hostUsers: false; the suite keeps it to show the Baseline control, which a valid pod never fails',
};

// ---------------------------------------------------------------- requests

type Obj = Record<string, unknown> & {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
};

interface Answer {
  status: number;
  body: Record<string, unknown>;
  /** The Warning headers, joined. */
  warnings: string;
}

/** One request, with the Warning headers kept (lib/kube/api.ts does not return headers). */
async function call(
  method: string,
  path: string,
  body?: unknown,
  query: Record<string, string> = {},
): Promise<Answer> {
  const url = new URL(api.server + path);
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
  const options = await api.requestOptions();
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((ok, fail) => {
    const req = https.request(url, {
      ...options,
      method,
      headers: {
        Accept: 'application/json',
        ...(payload !== undefined && { 'Content-Type': 'application/json' }),
        ...options.headers,
      },
    });
    req.on('error', fail);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', fail);
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let parsed: Record<string, unknown> = {};
        try {
          parsed = JSON.parse(text) as Record<string, unknown>;
        } catch {
          parsed = { message: text };
        }
        const warning = res.headers.warning;
        ok({
          status: res.statusCode ?? 0,
          body: parsed,
          // `299 - "text"`, quoted as an HTTP quoted-string: `\"` stands for `"`.
          warnings: (Array.isArray(warning) ? warning.join('\n') : (warning ?? '')).replace(
            /\\(.)/g,
            '$1',
          ),
        });
      });
    });
    req.end(payload);
  });
}

async function must(
  method: string,
  path: string,
  body?: unknown,
): Promise<Record<string, unknown>> {
  const answer = await call(method, path, body);
  if (answer.status >= 300)
    throw new Error(`${method} ${path}: ${answer.status} ${String(answer.body.message)}`);
  return answer.body;
}

/** The collection path of a kind the suites use. */
function collection(kind: string, namespace: string): string {
  const core = (resource: string) => `/api/v1/namespaces/${namespace}/${resource}`;
  const group = (g: string, resource: string) =>
    `/apis/${g}/v1/namespaces/${namespace}/${resource}`;
  const paths: Record<string, string> = {
    Pod: core('pods'),
    Service: core('services'),
    ConfigMap: core('configmaps'),
    Secret: core('secrets'),
    Deployment: group('apps', 'deployments'),
    StatefulSet: group('apps', 'statefulsets'),
    DaemonSet: group('apps', 'daemonsets'),
    ReplicaSet: group('apps', 'replicasets'),
    Job: group('batch', 'jobs'),
    CronJob: group('batch', 'cronjobs'),
  };
  const path = paths[kind];
  if (!path) throw new Error(`no request path for kind ${kind}`);
  return path;
}

// ---------------------------------------------------------------- the suites

interface Expectation {
  suite: string;
  policy: string;
  resource: string;
  operation: 'CREATE' | 'UPDATE';
  oldResource?: string;
  result: 'pass' | 'fail' | 'skip' | 'error';
  message?: string;
}

function readObjects(file: string): Obj[] {
  return parseAllDocuments(readFileSync(file, 'utf8'))
    .map((d) => d.toJS() as Obj | null)
    .filter((o): o is Obj => o !== null);
}
const refOf = (o: Obj) =>
  [o.kind, o.metadata.namespace, o.metadata.name].filter((p) => p !== undefined).join('/');

const resources = new Map<string, Obj>();
const oldResources = new Map<string, Obj>();
const namespaceLabels = new Map<string, Record<string, string>>();
const expectations: Expectation[] = [];
for (const file of SUITES) {
  const suite = parse(readFileSync(file, 'utf8')) as {
    resources?: string[];
    oldResources?: string[];
    results: (Omit<Expectation, 'suite' | 'resource' | 'operation'> & {
      resource: string | string[];
      operation?: 'CREATE' | 'UPDATE';
    })[];
  };
  const base = dirname(file);
  for (const path of suite.resources ?? [])
    for (const o of readObjects(resolve(base, path))) {
      if (o.kind === 'Namespace') namespaceLabels.set(o.metadata.name, o.metadata.labels ?? {});
      else resources.set(refOf(o), o);
    }
  for (const path of suite.oldResources ?? [])
    for (const o of readObjects(resolve(base, path))) oldResources.set(refOf(o), o);
  for (const r of suite.results)
    for (const resource of [r.resource].flat())
      expectations.push({
        ...r,
        suite: relative(repoRoot, file),
        resource,
        operation: r.operation ?? 'CREATE',
      });
}

/** This run's copy of a suite namespace (`default` stays: a policy is about it). */
const copyOf = (namespace: string) => (namespace === 'default' ? 'default' : `${run}-${namespace}`);
/** The namespace of the stored old object of the i-th UPDATE expectation. */
const updateNamespace = (i: number) => `${run}-u${i}`;

// ---------------------------------------------------------------- the conversion

interface Converted {
  policy: string;
  vap: Obj & { spec: Record<string, unknown> };
  binding: Obj & { spec: Record<string, unknown> };
  /** The binding's validationActions, as converted. */
  actions: string[];
}

function convert(file: string): { converted: Converted[]; stderr: string } {
  const out = spawnSync(
    process.execPath,
    [
      join(repoRoot, 'cli', 'rollcall.ts'),
      'convert',
      '--to',
      'vap',
      join(repoRoot, 'policies', file),
    ],
    { encoding: 'utf8', cwd: repoRoot },
  );
  assert.equal(out.status, 0, `rollcall convert --to vap policies/${file}: ${out.stderr}`);
  const objects = parseAllDocuments(out.stdout).map((d) => d.toJS() as Obj);
  const converted: Converted[] = [];
  for (const vap of objects.filter((o) => o.kind === 'ValidatingAdmissionPolicy')) {
    const binding = objects.find(
      (o) =>
        o.kind === 'ValidatingAdmissionPolicyBinding' &&
        (o.spec as { policyName?: string }).policyName === vap.metadata.name,
    );
    assert.ok(binding, `no binding for ${vap.metadata.name}`);
    converted.push({
      policy: vap.metadata.name,
      vap: vap as Converted['vap'],
      binding: binding as Converted['binding'],
      actions: (binding.spec as { validationActions: string[] }).validationActions,
    });
  }
  return { converted, stderr: out.stderr };
}

const nativeName = (policy: string) => `${run}-${policy}`;

/** The converted VAP as applied: renamed, with the activation probe as first validation. */
function applied(c: Converted): Obj {
  const spec = structuredClone(c.vap.spec) as { validations: unknown[] };
  spec.validations = [
    {
      expression: `!('${PROBE_LABEL}' in object.metadata.?labels.orValue({}))`,
      message: PROBE_LABEL,
    },
    ...spec.validations,
  ];
  return { ...c.vap, metadata: { name: nativeName(c.policy) }, spec };
}

/** The converted binding as applied: renamed, and scoped to this run's objects. */
function appliedBinding(c: Converted, namespaces: string[]): Obj {
  return {
    ...c.binding,
    metadata: { name: nativeName(c.policy) },
    spec: {
      ...c.binding.spec,
      policyName: nativeName(c.policy),
      matchResources: {
        namespaceSelector: {
          matchExpressions: [
            { key: 'kubernetes.io/metadata.name', operator: 'In', values: namespaces },
          ],
        },
        objectSelector: { matchLabels: { [POLICY_LABEL]: c.policy } },
      },
    },
  };
}

// ---------------------------------------------------------------- verdicts

type Native =
  | { verdict: 'denied' | 'warned'; message: string }
  | { verdict: 'allowed' }
  | { verdict: 'invalid' | 'other'; status: number; message: string };

/** What the apiserver made of one request, as far as the policy `vap` is concerned. */
function nativeVerdict(answer: Answer, vap: string): Native {
  const marker = `ValidatingAdmissionPolicy '${vap}' with binding '${vap}'`;
  const message = String(answer.body.message ?? '');
  if (answer.status >= 400 && message.includes(marker))
    return { verdict: 'denied', message: message.slice(message.indexOf(marker)) };
  // Admission allows before storage refuses an existing name: for a dry run that is allowed.
  const admitted = answer.status < 300 || answer.status === 409;
  if (admitted && answer.warnings.includes(marker))
    return { verdict: 'warned', message: answer.warnings.slice(answer.warnings.indexOf(marker)) };
  if (admitted) return { verdict: 'allowed' };
  return { verdict: answer.status === 422 ? 'invalid' : 'other', status: answer.status, message };
}

const labelled = (o: Obj, policy: string, namespace: string): Obj => ({
  ...structuredClone(o),
  metadata: {
    ...structuredClone(o.metadata),
    namespace,
    labels: { ...o.metadata.labels, [POLICY_LABEL]: policy },
  },
});

/** A pod stored for real stays unscheduled, so its spec does not change under the update. */
const HOLD = [{ name: 'rollcall.dev/hold' }];
const held = (o: Obj): Obj =>
  o.kind === 'Pod' ? { ...o, spec: { ...(o.spec as object), schedulingGates: HOLD } } : o;

interface PodSpecLike {
  containers: { image?: string }[];
  initContainers?: { image?: string }[];
  ephemeralContainers?: unknown[];
}

/**
 * The stored object changed as the suite's UPDATE changes it: labels, and for a Pod its images
 * and ephemeral containers (the fields a pod update may change), for another kind its spec.
 * Starting from the stored object keeps what admission and defaulting added at its creation.
 */
function updated(stored: Obj, suiteNew: Obj): { next: Obj; subresource: string } {
  const next = structuredClone(stored);
  delete (next.metadata as { resourceVersion?: string }).resourceVersion;
  next.metadata.labels = { ...suiteNew.metadata.labels };
  if (next.kind !== 'Pod') {
    const spec = { ...(stored.spec as object), ...(suiteNew.spec as object) } as Record<
      string,
      unknown
    >;
    if (next.kind === 'Service') {
      // A Service keeps the addresses and node ports it was given.
      const was = stored.spec as Record<string, unknown>;
      Object.assign(spec, {
        clusterIP: was.clusterIP,
        clusterIPs: was.clusterIPs,
        ports: was.ports,
      });
    }
    next.spec = spec;
    return { next, subresource: '' };
  }
  const spec = next.spec as PodSpecLike;
  const want = suiteNew.spec as PodSpecLike;
  spec.containers.forEach((c, i) => (c.image = want.containers[i]?.image ?? c.image));
  spec.initContainers?.forEach((c, i) => (c.image = want.initContainers?.[i]?.image ?? c.image));
  const ephemeral = want.ephemeralContainers ?? [];
  // Only the pods/ephemeralcontainers subresource can add ephemeral containers.
  if (JSON.stringify(ephemeral) === JSON.stringify(spec.ephemeralContainers ?? []))
    return { next, subresource: '' };
  spec.ephemeralContainers = ephemeral;
  return { next, subresource: '/ephemeralcontainers' };
}

describe('the policy library converted to ValidatingAdmissionPolicy', () => {
  const converted: Converted[] = [];
  const refused = new Map<string, string>();
  const notes: string[] = [];
  /** Per expectation index: the native verdict. */
  const natives = new Map<number, Native>();
  const namespaces = new Set<string>();

  before(
    async () => {
      for (const file of LIBRARY) {
        const { converted: c, stderr } = convert(file);
        converted.push(...c);
        notes.push(...stderr.split('\n').filter(Boolean));
      }

      // Namespaces: a copy of each suite namespace, one per UPDATE's stored object, the probes'.
      const probeNamespace = `${run}-probe`;
      const wanted = new Map<string, Record<string, string>>();
      for (const e of expectations) {
        const ns = resources.get(e.resource)?.metadata.namespace;
        if (ns) wanted.set(copyOf(ns), namespaceLabels.get(ns) ?? {});
      }
      expectations.forEach((e, i) => {
        if (e.operation !== 'UPDATE') return;
        const ns = resources.get(e.resource)!.metadata.namespace!;
        wanted.set(updateNamespace(i), namespaceLabels.get(ns) ?? {});
      });
      wanted.set(probeNamespace, { 'pod-security.rollcall.dev/enforce': 'restricted' });
      for (const name of wanted.keys()) namespaces.add(name);
      await Promise.all(
        [...wanted]
          .filter(([name]) => name !== 'default')
          .map(([name, labels]) =>
            must('POST', '/api/v1/namespaces', {
              apiVersion: 'v1',
              kind: 'Namespace',
              metadata: { name, labels },
            }),
          ),
      );

      // The objects an UPDATE starts from, stored before any policy exists.
      await Promise.all(
        expectations.map(async (e, i) => {
          if (e.operation !== 'UPDATE') return;
          const old =
            oldResources.get(e.oldResource ?? e.resource) ??
            resources.get(e.oldResource ?? e.resource)!;
          const ns = updateNamespace(i);
          await must('POST', collection(old.kind, ns), held(labelled(old, e.policy, ns)));
        }),
      );

      // The native policies.
      for (const c of converted) {
        const answer = await call(
          'POST',
          '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies',
          applied(c),
        );
        if (answer.status >= 300) {
          refused.set(c.policy, `${answer.status} ${String(answer.body.message)}`);
          continue;
        }
        await must(
          'POST',
          '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings',
          appliedBinding(c, [...namespaces]),
        );
      }

      // Each is active once it judges a probe (a Pod, or a Service for Service policies).
      await mapLimit(
        converted.filter((c) => !refused.has(c.policy)),
        6,
        async (c) => {
          const rules = (
            c.vap.spec.matchConstraints as { resourceRules: { resources: string[] }[] }
          ).resourceRules;
          const kind = rules.some((r) => r.resources.includes('pods')) ? 'Pod' : 'Service';
          const probe: Obj = {
            apiVersion: 'v1',
            kind,
            metadata: {
              name: 'probe',
              labels: { [POLICY_LABEL]: c.policy, [PROBE_LABEL]: 'yes' },
            },
            spec:
              kind === 'Pod'
                ? { containers: [{ name: 'app', image: 'registry.k8s.io/pause:3.10' }] }
                : { ports: [{ port: 80 }] },
          };
          const deadline = Date.now() + 60_000;
          for (;;) {
            const answer = await call('POST', collection(kind, probeNamespace), probe, {
              dryRun: 'All',
            });
            const v = nativeVerdict(answer, nativeName(c.policy));
            if (
              (v.verdict === 'denied' || v.verdict === 'warned') &&
              v.message.includes(`: ${PROBE_LABEL}`)
            )
              return;
            if (Date.now() > deadline)
              throw new Error(`${nativeName(c.policy)} never became active: ${JSON.stringify(v)}`);
            await new Promise((r) => setTimeout(r, 250));
          }
        },
      );

      // The verdicts.
      await mapLimit(expectations, 6, async (e, i) => {
        if (refused.has(e.policy)) return;
        const object = resources.get(e.resource)!;
        const vap = nativeName(e.policy);
        if (e.operation === 'CREATE') {
          const ns = copyOf(object.metadata.namespace ?? 'default');
          const answer = await call(
            'POST',
            collection(object.kind, ns),
            labelled(object, e.policy, ns),
            {
              dryRun: 'All',
            },
          );
          natives.set(i, nativeVerdict(answer, vap));
          return;
        }
        const ns = updateNamespace(i);
        const path = `${collection(object.kind, ns)}/${object.metadata.name}`;
        const stored = (await must('GET', path)) as Obj;
        const { next, subresource } = updated(stored, labelled(object, e.policy, ns));
        const answer = await call('PUT', path + subresource, next, { dryRun: 'All' });
        natives.set(i, nativeVerdict(answer, vap));
      });
    },
    { timeout: 180_000 },
  );

  after(async () => {
    for (const c of converted) {
      await call(
        'DELETE',
        `/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/${nativeName(c.policy)}`,
      );
      await call(
        'DELETE',
        `/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/${nativeName(c.policy)}`,
      );
    }
    await Promise.all(
      [...namespaces]
        .filter((n) => n !== 'default')
        .map((n) => call('DELETE', `/api/v1/namespaces/${n}`)),
    );
  });

  test('every library policy converts, and the apiserver accepts every converted policy', () => {
    assert.equal(converted.length, 24, converted.map((c) => c.policy).join(', '));
    assert.deepEqual(Object.fromEntries(refused), {});
    assert.deepEqual(
      notes.filter((n) => n.startsWith('not converted')),
      [],
      'nothing was lost in the conversion',
    );
  });

  const policies = [...new Set(expectations.map((e) => e.policy))];
  for (const policy of policies) {
    test(`${policy}: the native policy gives rollcall's verdict on the library's test resources`, () => {
      const c = converted.find((x) => x.policy === policy);
      assert.ok(c, `${policy} was not converted`);
      assert.ok(!refused.has(policy), `the apiserver refused ${policy}: ${refused.get(policy)}`);
      const differences: string[] = [];
      expectations.forEach((e, i) => {
        if (e.policy !== policy) return;
        const native = natives.get(i);
        const at = `${e.suite} ${e.operation} ${e.resource}`;
        if (process.env.ROLLCALL_CONFORMANCE_LOG)
          console.log(`${policy} ${at}: rollcall ${e.result}, native ${JSON.stringify(native)}`);
        if (!native) return differences.push(`${at}: no native verdict`);
        if (INVALID[e.resource]) {
          if (native.verdict !== 'invalid')
            differences.push(
              `${at}: listed as invalid (${INVALID[e.resource]}) but ${JSON.stringify(native)}`,
            );
          return;
        }
        const denies = native.verdict === 'denied' || native.verdict === 'warned';
        if (native.verdict === 'invalid' || native.verdict === 'other')
          return differences.push(
            `${at}: the apiserver answered ${native.status}: ${native.message}`,
          );
        const expected = c.actions.includes('Deny') ? 'denied' : 'warned';
        if (e.result === 'fail' && native.verdict !== expected)
          differences.push(
            `${at}: rollcall fails it, the native policy: ${JSON.stringify(native)}`,
          );
        if ((e.result === 'pass' || e.result === 'skip') && denies)
          differences.push(
            `${at}: rollcall ${e.result}es it, the native policy: ${JSON.stringify(native)}`,
          );
        if (e.result === 'fail' && denies && e.message && !native.message.includes(e.message))
          differences.push(
            `${at}: the native message lacks ${JSON.stringify(e.message)}: ${native.message}`,
          );
      });
      assert.deepEqual(differences, []);
    });
  }
});
