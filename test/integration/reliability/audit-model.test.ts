// The continuous audit under faults (issue 38, acceptance 5): every rollcall process killed
// mid-pass, and Redis emptied mid-pass, each end with exactly the Reports a model computes from
// the objects the test made: per namespace × Policy, every object's result, message and
// generation (the full sets, not counts). Real policy servers (rollcall's image, run by the
// node agent) judge; rollcall runs as its ServiceAccounts on a Redis of this test's own, so
// FLUSHALL touches nobody else.
//
// The worker runs one job at a time, so that a pass over the namespaces lasts long enough for
// "some Reports written, not all" to be a moment the test can catch.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { stringify } from 'yaml';
import { MANAGED_BY, MANAGED_BY_LABEL } from '../../../api/constants.ts';
import { OPENREPORTS_API_VERSION } from '../../../api/audit.ts';
import { Processes } from '../../support/driver.ts';
import { prepareIdentities, type Identities } from '../../support/identities.ts';
import { testCluster, testKubeConfig, watchUntil } from '../../support/kube.ts';
import { CASE_LABEL, createRule, policyManifest } from '../../support/manifests.ts';
import { PrivateRedis } from '../../support/private-redis.ts';
import { resultLines, rollcallReports, type ReportObject } from '../../support/reports.ts';
import { lastProblems, type RollcallProcess } from '../../support/rollcall.ts';
import {
  apply,
  kubectlAsync,
  listVersion,
  replicaProcesses,
  startPolicyServer,
  until,
  waitPolicy,
  type PolicyObject,
} from '../../support/scenario.ts';

const kc = testKubeConfig();
const namespace = 'rel-audit'; // rollcall's own
const SERVER = 'relaudit';
const REPLICAS = 2;
const NAMESPACES = ['ra-0', 'ra-1', 'ra-2', 'ra-3'];
const CASE = 'rel-audit';
const OWNER = 'ra-owner'; // [Audit]: every ConfigMap of the case needs an owner label
const BIG = 'ra-big'; // [Warn]: web-tier ConfigMaps must not be big; `skip`-labelled ones are not judged
const ALL_REPORTS = `/apis/${OPENREPORTS_API_VERSION}/reports`;

// ---------------------------------------------------------------- the world and its model

/** One ConfigMap as the test made it. */
interface Cm {
  ns: string;
  name: string;
  owner: boolean;
  web: boolean;
  big: boolean;
  skip: boolean;
}

/** The ConfigMaps that exist, by `<ns>/<name>`, and each Policy's generation. */
interface World {
  cms: Map<string, Cm>;
  ownerGeneration: number;
}

const ownerMessage = (generation: number) =>
  `generation ${generation}: configmaps need an owner label`;
const BIG_MESSAGE = 'web configmaps must not be big';

/** A varied ConfigMap: which label and data it has follows from its index. */
const cmAt = (ns: string, i: number, prefix = 'cm'): Cm => ({
  ns,
  name: `${prefix}-${String(i).padStart(3, '0')}`,
  owner: i % 4 !== 0,
  web: i % 3 === 0,
  big: i % 5 === 0,
  skip: i % 7 === 0,
});

const manifest = (c: Cm) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name: c.name,
    namespace: c.ns,
    labels: {
      [CASE_LABEL]: CASE,
      ...(c.owner && { owner: 'ra' }),
      ...(c.web && { tier: 'web' }),
      ...(c.skip && { skip: 'skipped' }), // not 'yes': YAML 1.1 (kubectl) reads a boolean
    },
  },
  data: c.big ? { big: '1' } : { n: c.name },
});

const ownerPolicy = (generation: number) =>
  policyManifest(OWNER, SERVER, {
    rules: [createRule('configmaps')],
    namespaceSelector: {
      matchExpressions: [
        { key: 'kubernetes.io/metadata.name', operator: 'In', values: NAMESPACES },
      ],
    },
    objectSelector: { matchLabels: { [CASE_LABEL]: CASE } },
    validationActions: ['Audit'],
    validations: [
      { expression: "'owner' in object.metadata.labels", message: ownerMessage(generation) },
    ],
  });

const bigPolicy = policyManifest(BIG, SERVER, {
  rules: [createRule('configmaps')],
  namespaceSelector: {
    matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'In', values: NAMESPACES }],
  },
  objectSelector: { matchLabels: { [CASE_LABEL]: CASE, tier: 'web' } },
  validationActions: ['Warn'],
  matchConditions: [{ name: 'not-skipped', expression: "!('skip' in object.metadata.labels)" }],
  validations: [{ expression: "!('big' in object.data)", message: BIG_MESSAGE }],
});

/**
 * What the Reports must say: by namespace, by Report name, its result lines (as resultLines
 * writes them). A Policy with no object in a namespace has no Report there.
 */
function expectedReports(world: World): Map<string, Map<string, string[]>> {
  const out = new Map<string, Map<string, string[]>>(NAMESPACES.map((ns) => [ns, new Map()]));
  const add = (ns: string, policy: string, line: string) => {
    const reports = out.get(ns)!;
    const name = `rollcall-${policy}`;
    reports.set(name, [...(reports.get(name) ?? []), line]);
  };
  for (const c of world.cms.values()) {
    const at = `${c.ns}/${c.name}`;
    const g = world.ownerGeneration;
    add(c.ns, OWNER, c.owner ? `${at} pass @${g}` : `${at} fail [${ownerMessage(g)}] @${g}`);
    if (c.web)
      add(
        c.ns,
        BIG,
        c.skip ? `${at} skip @1` : c.big ? `${at} warn [${BIG_MESSAGE}] @1` : `${at} pass @1`,
      );
  }
  for (const reports of out.values()) for (const lines of reports.values()) lines.sort();
  return out;
}

/** What each Policy's status.audit must say once the pass is complete. */
function expectedAudit(
  world: World,
): Record<string, { generation: number; checked: number; failing: number }> {
  const cms = [...world.cms.values()];
  const web = cms.filter((c) => c.web);
  return {
    [OWNER]: {
      generation: world.ownerGeneration,
      checked: cms.length,
      failing: cms.filter((c) => !c.owner).length,
    },
    [BIG]: {
      generation: 1,
      checked: web.length,
      failing: web.filter((c) => !c.skip && c.big).length,
    },
  };
}

/** The Reports rollcall wrote in the test's namespaces: by namespace, by name, result lines; plus problems with their summaries. */
async function observedReports(): Promise<{
  reports: Map<string, Map<string, string[]>>;
  problems: string[];
}> {
  const reports = new Map<string, Map<string, string[]>>();
  const problems: string[] = [];
  for (const ns of NAMESPACES) {
    const found = await rollcallReports(kc, ns);
    reports.set(ns, new Map([...found].map(([name, r]) => [name, resultLines(r)])));
    for (const [name, r] of found) {
      const counts: Record<string, number> = { pass: 0, fail: 0, warn: 0, error: 0, skip: 0 };
      for (const x of r.results ?? []) counts[x.result] = (counts[x.result] ?? 0) + 1;
      if (JSON.stringify(counts) !== JSON.stringify({ ...counts, ...r.summary }))
        problems.push(
          `${ns}/${name}: summary ${JSON.stringify(r.summary)} but results count ${JSON.stringify(counts)}`,
        );
    }
  }
  return { reports, problems };
}

/** Every difference between the expected and the observed Reports, one line each. */
function reportDiff(
  want: Map<string, Map<string, string[]>>,
  got: Map<string, Map<string, string[]>>,
): string[] {
  const out: string[] = [];
  for (const ns of NAMESPACES) {
    const w = want.get(ns) ?? new Map<string, string[]>();
    const g = got.get(ns) ?? new Map<string, string[]>();
    for (const name of new Set([...w.keys(), ...g.keys()])) {
      const wl = w.get(name);
      const gl = g.get(name);
      if (!gl) out.push(`${ns}/${name}: missing (want ${wl!.length} results)`);
      else if (!wl) out.push(`${ns}/${name}: exists, want none (${gl.length} results)`);
      else {
        const gs = new Set(gl);
        const ws = new Set(wl);
        const missing = wl.filter((l) => !gs.has(l));
        const extra = gl.filter((l) => !ws.has(l));
        if (missing.length > 0)
          out.push(`${ns}/${name}: missing ${missing.length}: ${missing.slice(0, 5).join(' | ')}`);
        if (extra.length > 0)
          out.push(`${ns}/${name}: unexpected ${extra.length}: ${extra.slice(0, 5).join(' | ')}`);
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- the faults

/** `kubectl apply` of ConfigMaps (one call), recorded in the world. */
async function put(world: World, cms: readonly Cm[]): Promise<void> {
  if (cms.length === 0) return;
  await kubectlAsync(
    ['apply', '-f', '-'],
    stringify({ apiVersion: 'v1', kind: 'List', items: cms.map(manifest) }),
  );
  for (const c of cms) world.cms.set(`${c.ns}/${c.name}`, c);
}

async function remove(world: World, cms: readonly Cm[]): Promise<void> {
  for (const ns of new Set(cms.map((c) => c.ns))) {
    const names = cms.filter((c) => c.ns === ns).map((c) => c.name);
    await kubectlAsync(['delete', 'configmap', '-n', ns, '--wait=false', ...names]);
  }
  for (const c of cms) world.cms.delete(`${c.ns}/${c.name}`);
}

const inNs = (world: World, ns: string) => [...world.cms.values()].filter((c) => c.ns === ns);

/**
 * Resolves with the first Report rollcall writes in the test's namespaces (from `version` on)
 * for which `which` holds.
 */
function firstReport(version: string, which: (r: ReportObject) => boolean): Promise<ReportObject> {
  return watchUntil<ReportObject>(
    kc,
    ALL_REPORTS,
    (r, phase) =>
      phase !== 'DELETED' && NAMESPACES.includes(r.metadata.namespace ?? '') && which(r),
    {
      labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}`,
      resourceVersion: version,
      timeoutMs: 120_000,
    },
  );
}

describe("the audit's Reports after faults equal the model", () => {
  const redis = new PrivateRedis(join(testCluster().dir, 'rel-audit-redis'));
  let procs: Processes; // once Redis has its port
  let ids: Identities | undefined;
  const world: World = { cms: new Map(), ownerGeneration: 1 };
  let rollcall: RollcallProcess[] = [];

  /** The watcher (one identity throughout: a restart takes its lease back at once) and one worker. */
  // A killed worker's job runs again once its lock expires: 2 s, not the default 30 s.
  const startRollcall = () => {
    rollcall = [
      procs.watcher('ra-watcher', ['--kubeconfig', ids!.watcher]),
      procs.worker(['--kubeconfig', ids!.worker, '--concurrency', '1', '--job-lock-ms', '2000']),
    ];
  };

  /** Waits until the Reports equal the model and each Policy's status sums it up. */
  async function converge(what: string, timeoutMs = 120_000): Promise<number> {
    const started = Date.now();
    const want = expectedReports(world);
    let last: string[] = ['nothing observed yet'];
    await until(
      `${what}: the Reports to equal the model`,
      async () => {
        const { reports, problems } = await observedReports();
        last = [...reportDiff(want, reports), ...problems];
        return last.length === 0 ? true : undefined;
      },
      { timeoutMs, everyMs: 500 },
    ).catch((err: Error) => {
      throw new Error(
        `${err.message}\ndifferences:\n  ${last.slice(0, 30).join('\n  ')}\nrollcall's problems:\n  ${lastProblems(procs.all)}`,
      );
    });
    const audit = expectedAudit(world);
    let seen: unknown;
    for (const [policy, expected] of Object.entries(audit))
      await waitPolicy(
        kc,
        policy,
        (p: PolicyObject) => {
          const a = p.status?.audit;
          seen = a;
          return (
            a?.completedAt !== undefined &&
            JSON.stringify({ generation: a.generation, checked: a.checked, failing: a.failing }) ===
              JSON.stringify(expected)
          );
        },
        { timeoutMs: 30_000 },
      ).catch((err: Error) => {
        throw new Error(
          `${what}: ${policy} status.audit: want ${JSON.stringify(expected)}, last ${JSON.stringify(seen)} (${err.message.slice(0, 80)})`,
        );
      });
    return Date.now() - started;
  }

  before(async () => {
    await redis.start();
    procs = new Processes(namespace, { REDIS_URL: redis.url });
    await procs.prepare(...NAMESPACES);
    ids = await prepareIdentities(namespace);
    startRollcall(); // the PolicyServer's status needs its functions
    await startPolicyServer(kc, SERVER, REPLICAS);
    // 100 ConfigMaps in each of three namespaces, 10 in the fourth, before any Policy.
    for (const ns of NAMESPACES)
      await put(
        world,
        Array.from({ length: ns === 'ra-3' ? 10 : 100 }, (_, i) => cmAt(ns, i)),
      );
  });

  after(async () => {
    await procs?.cleanUp();
    ids?.remove();
    await redis.kill();
    for (const ns of NAMESPACES)
      await kubectlAsync(['delete', 'configmap', '-n', ns, '-l', CASE_LABEL, '--wait=false']).catch(
        () => {},
      );
  });

  test(
    "every rollcall process killed mid-pass (objects changed while they were down) ends with the model's Reports",
    { timeout: 300_000 },
    async (t) => {
      const version = await listVersion(kc, ALL_REPORTS);
      const first = firstReport(version, () => true);
      first.catch(() => {});
      await apply(ownerPolicy(1), bigPolicy);
      await first;
      // Kill everything at once: the watcher, the worker and the policy servers' processes.
      const servers = await replicaProcesses(kc, namespace, SERVER, REPLICAS);
      await Promise.all([
        ...rollcall.map((p) => p.kill()),
        ...servers.map(async (r) => process.kill(r.pid, 'SIGKILL')),
      ]);
      const existing = (await Promise.all(NAMESPACES.map((ns) => rollcallReports(kc, ns)))).reduce(
        (n, m) => n + m.size,
        0,
      );
      const total = [...expectedReports(world).values()].reduce((n, m) => n + m.size, 0);
      t.diagnostic(`killed with ${existing} of ${total} Reports written`);
      assert.ok(
        existing > 0 && existing < total,
        `mid-pass: ${existing} of ${total} Reports written`,
      );

      // While nothing of rollcall runs: fix 5, break 5, make 2 big, delete 5 and add 5.
      const [ra0, ra1, ra2] = ['ra-0', 'ra-1', 'ra-2'].map((ns) => inNs(world, ns));
      await put(world, [
        ...ra0!
          .filter((c) => !c.owner)
          .slice(0, 5)
          .map((c) => ({ ...c, owner: true })),
        ...ra1!
          .filter((c) => c.owner)
          .slice(0, 5)
          .map((c) => ({ ...c, owner: false })),
        ...ra2!
          .filter((c) => c.web && !c.big && !c.skip)
          .slice(0, 2)
          .map((c) => ({ ...c, big: true })),
        ...Array.from({ length: 5 }, (_, i) => cmAt('ra-2', i, 'late')),
      ]);
      await remove(world, ra2!.filter((c) => c.name.startsWith('cm-')).slice(10, 15));

      startRollcall();
      t.diagnostic(`converged ${await converge('after the restart')} ms after the restart`);
    },
  );

  test(
    'a namespace emptied while rollcall was down loses its Reports',
    { timeout: 180_000 },
    async (t) => {
      assert.equal((await rollcallReports(kc, 'ra-3')).size, 2, 'ra-3 has both Reports to lose');
      await Promise.all(rollcall.map((p) => p.kill()));
      await remove(world, inNs(world, 'ra-3'));
      startRollcall();
      t.diagnostic(
        `converged ${await converge('after emptying ra-3 while down')} ms after the restart`,
      );
    },
  );

  test(
    "Redis emptied (FLUSHALL) mid-pass of a new generation ends with the model's Reports",
    { timeout: 300_000 },
    async (t) => {
      const version = await listVersion(kc, ALL_REPORTS);
      const firstOfGeneration2 = firstReport(
        version,
        (r) =>
          r.metadata.name === `rollcall-${OWNER}` && r.results?.[0]?.properties?.generation === '2',
      );
      firstOfGeneration2.catch(() => {});
      world.ownerGeneration = 2;
      await apply(ownerPolicy(2));
      await firstOfGeneration2;
      const client = new Redis(redis.url);
      await client.flushall();
      client.disconnect();
      const atGeneration2 = (
        await Promise.all(NAMESPACES.map((ns) => rollcallReports(kc, ns)))
      ).filter(
        (m) => m.get(`rollcall-${OWNER}`)?.results?.[0]?.properties?.generation === '2',
      ).length;
      t.diagnostic(`Redis emptied with ${atGeneration2} of 3 Reports of ${OWNER} at generation 2`);
      assert.ok(atGeneration2 < 3, `mid-pass: ${atGeneration2} of 3 Reports at generation 2`);

      // While Redis is being rebuilt: more changes, and a namespace that gets objects again.
      const ra0 = inNs(world, 'ra-0');
      await put(world, [
        ...inNs(world, 'ra-1')
          .filter((c) => !c.owner)
          .slice(0, 3)
          .map((c) => ({ ...c, owner: true })),
        ...Array.from({ length: 4 }, (_, i) => cmAt('ra-3', i, 'back')),
      ]);
      await remove(world, ra0.slice(0, 3));
      t.diagnostic(`converged ${await converge('after FLUSHALL')} ms after the changes`);
    },
  );
});
