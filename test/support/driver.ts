// The scenario driver: runs rollcall and the simulated data plane as processes, applies seeded
// random operations to the cluster while recording them in the model, and waits — through
// watches, never by polling — until the cluster matches the model, or fails with the diff.
import {
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  Watch,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { after } from 'node:test';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import { installCrds } from '../../control-plane/install-crds.ts';
import { getJson, kubeConfigTarget } from '../../lib/kube/api.ts';
import { testKubeConfig, watchUntil } from './kube.ts';
import { createRule, policyManifest, policyServerManifest, SIM_IMAGE } from './manifests.ts';
import {
  deleteRollcallObjects,
  ensureNamespace,
  startRollcall,
  testDb,
  type RollcallProcess,
} from './rollcall.ts';
import {
  diff,
  emptyModel,
  type Model,
  type Observed,
  type PolicyLike,
  type WebhookLike,
} from './model.ts';

/** mulberry32: a tiny seeded PRNG, so a failing run can be replayed from its seed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed: REL_SEED replays a run; otherwise a fresh one, printed by every failure. */
export const seedFromEnv = () =>
  Number(process.env.REL_SEED ?? Math.floor(Math.random() * 2 ** 31));

const group = { group: 'rollcall.dev', version: 'v1alpha1' };
const merge = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
const resourceChoices = [['pods'], ['services'], ['configmaps'], ['pods', 'services']];

export type Op = 'create' | 'update' | 'delete' | 'scale' | 'delete-pod';

export class Scenario {
  readonly model: Model = emptyModel();
  readonly random: () => number;
  readonly log: string[] = [];
  private readonly custom: CustomObjectsApi;
  private readonly core: CoreV1Api;
  private next = 0;
  /** Names unique to this process, so a leftover of an earlier run never collides. */
  private readonly prefix = `rel${process.pid}`;
  readonly seed: number;
  readonly kc: KubeConfig;
  readonly namespace: string;

  constructor(kc: KubeConfig, namespace: string, seed: number) {
    this.kc = kc;
    this.namespace = namespace;
    this.seed = seed;
    this.random = rng(seed);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.core = kc.makeApiClient(CoreV1Api);
  }

  private pick<T>(list: readonly T[]): T {
    return list[Math.floor(this.random() * list.length)]!;
  }

  /** Creates `servers` PolicyServers with 1–3 replicas (the namespace first). */
  async setup(servers: number): Promise<void> {
    await deleteRollcallObjects(this.kc); // leftovers of an interrupted run
    await ensureNamespace(this.kc, this.namespace);
    for (let i = 0; i < servers; i++) {
      const name = `${this.prefix}-ps-${i}`;
      const replicas = 1 + Math.floor(this.random() * 3);
      await this.custom.createClusterCustomObject({
        ...group,
        plural: 'policyservers',
        body: policyServerManifest(name, { image: SIM_IMAGE, replicas }),
      });
      this.model.servers.set(name, { replicas });
    }
  }

  /** A random module: mostly loading, sometimes failing with a message unique to this write. */
  private module(): { module: string; failMessage: string | undefined } {
    if (this.random() < 0.65) return { module: 'sim://ok', failMessage: undefined };
    const failMessage = `load failed ${Math.floor(this.random() * 1e6)}`;
    return { module: `sim://fail?message=${encodeURIComponent(failMessage)}`, failMessage };
  }

  private record(
    name: string,
    server: string,
    generation: number,
    failMessage: string | undefined,
    resources: string[],
  ): void {
    const p = this.model.policies.get(name) ?? {
      server,
      generation,
      failMessage,
      resourcesByGeneration: new Map(),
      okGenerations: new Set<number>(),
    };
    Object.assign(p, { server, generation, failMessage });
    p.resourcesByGeneration.set(generation, resources);
    if (failMessage === undefined) p.okGenerations.add(generation);
    this.model.policies.set(name, p);
  }

  async createPolicy(
    name = `${this.prefix}-pol-${this.next++}`,
    server = this.pick([...this.model.servers.keys()]),
  ): Promise<void> {
    const { module, failMessage } = this.module();
    const resources = this.pick(resourceChoices);
    const created = (await this.custom.createClusterCustomObject({
      ...group,
      plural: 'policies',
      body: policyManifest(name, server, { module, rules: [createRule(...resources)] }),
    })) as KubernetesObject;
    this.record(name, server, created.metadata?.generation ?? 1, failMessage, resources);
    this.log.push(`create ${name} on ${server}: ${module} ${resources.join(',')}`);
  }

  async updatePolicy(name: string): Promise<void> {
    const p = this.model.policies.get(name)!;
    const { module, failMessage } = this.module();
    const resources = this.pick(resourceChoices);
    const patch = { spec: { module, rules: [createRule(...resources)] } };
    const updated = (await this.custom.patchClusterCustomObject(
      { ...group, plural: 'policies', name, body: patch },
      merge,
    )) as KubernetesObject;
    this.record(
      name,
      p.server,
      updated.metadata?.generation ?? p.generation,
      failMessage,
      resources,
    );
    this.log.push(
      `update ${name}: ${module} ${resources.join(',')} → generation ${updated.metadata?.generation}`,
    );
  }

  async deletePolicy(name: string): Promise<void> {
    await this.custom.deleteClusterCustomObject({ ...group, plural: 'policies', name });
    this.model.policies.delete(name);
    this.log.push(`delete ${name}`);
  }

  async scale(server: string, replicas = 1 + Math.floor(this.random() * 3)): Promise<void> {
    await this.custom.patchClusterCustomObject(
      { ...group, plural: 'policyservers', name: server, body: { spec: { replicas } } },
      merge,
    );
    this.model.servers.set(server, { replicas });
    this.log.push(`scale ${server} to ${replicas}`);
  }

  async deletePod(server: string): Promise<void> {
    const pods = await this.core.listNamespacedPod({
      namespace: this.namespace,
      labelSelector: `rollcall.dev/policy-server=${server}`,
    });
    const live = pods.items.filter((p) => !p.metadata?.deletionTimestamp);
    if (live.length === 0) return;
    const pod = this.pick(live).metadata!.name!;
    await this.core
      .deleteNamespacedPod({ name: pod, namespace: this.namespace, gracePeriodSeconds: 0 })
      .catch(() => {});
    this.log.push(`delete pod ${pod}`);
  }

  /**
   * One random operation; creates while there are few policies. `policiesOnly` leaves pods
   * and replica counts alone (see `storm`).
   */
  async randomOp({ policiesOnly = false }: { policiesOnly?: boolean } = {}): Promise<Op> {
    const names = [...this.model.policies.keys()];
    const servers = [...this.model.servers.keys()];
    const r = policiesOnly ? this.random() * 0.7 : this.random();
    const op: Op =
      names.length < 3 || r < 0.3
        ? 'create'
        : r < 0.6
          ? 'update'
          : r < 0.7
            ? 'delete'
            : r < 0.85
              ? 'scale'
              : 'delete-pod';
    if (op === 'create') await this.createPolicy();
    else if (op === 'update') await this.updatePolicy(this.pick(names));
    else if (op === 'delete') await this.deletePolicy(this.pick(names));
    else if (op === 'scale') await this.scale(this.pick(servers));
    else await this.deletePod(this.pick(servers));
    return op;
  }

  /**
   * `count` random operations, `gapMs` apart (so faults can land between them).
   * `policiesOnly` is for just after an apiserver restart: a ReplicaSet whose pod informer
   * has not caught up yet never learns of a pod it created and the storm then deleted, and
   * waits out its 5-minute expectations before replacing it (the controller-manager's
   * behaviour, not rollcall's).
   */
  async storm(count: number, gapMs = 50, { policiesOnly = false } = {}): Promise<void> {
    for (let i = 0; i < count; i++) {
      await this.randomOp({ policiesOnly });
      await new Promise((r) => setTimeout(r, gapMs * this.random() * 2));
    }
  }

  /** Now, and every Policy's generation now: firstStatusAfter waits for a status newer than these. */
  mark(): Mark {
    return {
      at: Date.now(),
      generations: new Map([...this.model.policies].map(([n, p]) => [n, p.generation])),
    };
  }

  /**
   * Every policy-server pod as the data plane left it, for a failure message: which ones the
   * ReplicaSets made, kwok readied and the simulator reported on.
   */
  private async podSummary(): Promise<string[]> {
    const pods = await this.core
      .listNamespacedPod({ namespace: this.namespace, labelSelector: POLICY_SERVER_LABEL })
      .catch((err: unknown) => ({ items: [], error: String(err) }));
    if ('error' in pods) return [`could not list pods: ${pods.error}`];
    return pods.items.map((p) => {
      const ready = p.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'unknown';
      const report = p.metadata?.annotations?.[REPORT_ANNOTATION];
      return [
        p.metadata?.name,
        `node ${p.spec?.nodeName ?? 'none'}`,
        `Ready ${ready}`,
        p.metadata?.deletionTimestamp ? 'terminating' : '',
        report === undefined ? 'no report' : `report ${report.slice(0, 160)}`,
      ]
        .filter(Boolean)
        .join(', ');
    });
  }

  /** Resolves once the cluster equals the model; otherwise fails with the diff, the seed and the operations. */
  async converge(timeoutMs = 60_000): Promise<void> {
    const last = await observeUntil(this.kc, (seen) => diff(this.model, seen), timeoutMs);
    if (last.length > 0) {
      throw new Error(
        `cluster did not converge to the model within ${timeoutMs / 1000} s (seed ${this.seed}; replay with REL_SEED=${this.seed}):\n  ` +
          last.slice(0, 40).join('\n  ') +
          `\noperations:\n  ${this.log.slice(-30).join('\n  ')}` +
          `\npods now:\n  ${(await this.podSummary()).join('\n  ')}`,
      );
    }
  }
}

/** A moment of a scenario (a fault), and every Policy's generation then. */
export interface Mark {
  at: number;
  generations: Map<string, number>;
}

/**
 * Resolves with the ms from the mark (once `mark()` returns one) to the first Policy status
 * that observed a generation made after it: the first status write that needed the system
 * as it was after the fault (a write already under way at the fault does not count).
 */
export function firstStatusAfter(kc: KubeConfig, mark: () => Mark | undefined): Promise<number> {
  return watchUntil<PolicyLike & KubernetesObject>(
    kc,
    '/apis/rollcall.dev/v1alpha1/policies',
    (p) => {
      const m = mark();
      const observed = p.status?.observedGeneration ?? 0;
      return m !== undefined && observed > (m.generations.get(p.metadata.name ?? '') ?? 0);
    },
    { timeoutMs: 120_000 },
  ).then(() => Date.now() - mark()!.at);
}

/** One watched collection, relisted whenever its watch ends (apiserver restarts, 410s). */
class Mirror<T extends KubernetesObject> {
  readonly objects = new Map<string, T>();
  private controller: AbortController | undefined;
  private stopped = false;
  private readonly kc: KubeConfig;
  private readonly path: string;
  private readonly onChange: () => void;
  private readonly labelSelector: string | undefined;

  constructor(kc: KubeConfig, path: string, onChange: () => void, labelSelector?: string) {
    this.kc = kc;
    this.path = path;
    this.onChange = onChange;
    this.labelSelector = labelSelector;
  }

  async start(): Promise<void> {
    while (!this.stopped) {
      try {
        const list = (await getJson(kubeConfigTarget(this.kc), this.path, {
          labelSelector: this.labelSelector,
        })) as {
          metadata: { resourceVersion: string };
          items: T[];
        };
        this.objects.clear();
        for (const item of list.items) this.objects.set(item.metadata!.name!, item);
        this.onChange();
        await new Promise<void>((ended) => {
          new Watch(this.kc)
            .watch(
              this.path,
              {
                resourceVersion: list.metadata.resourceVersion,
                labelSelector: this.labelSelector,
                allowWatchBookmarks: true,
              },
              (phase, obj: T) => {
                if (phase === 'BOOKMARK' || phase === 'ERROR') return;
                if (phase === 'DELETED') this.objects.delete(obj.metadata!.name!);
                else this.objects.set(obj.metadata!.name!, obj);
                this.onChange();
              },
              () => ended(),
            )
            .then(
              (c) => (this.controller = c),
              () => ended(),
            );
        });
      } catch {
        // apiserver away: try again shortly
      }
      if (!this.stopped) await new Promise((r) => setTimeout(r, 300));
    }
  }

  stop(): void {
    this.stopped = true;
    this.controller?.abort();
  }
}

/** Watches policies, policy servers and rollcall's webhooks until `check` returns no differences; returns the last differences. */
async function observeUntil(
  kc: KubeConfig,
  check: (seen: Observed) => string[],
  timeoutMs: number,
): Promise<string[]> {
  let last = ['nothing observed yet'];
  let done: () => void = () => {};
  const finished = new Promise<void>((r) => (done = r));
  const evaluate = () => {
    last = check({
      policies: policies.objects as Map<string, PolicyLike & KubernetesObject>,
      servers: servers.objects as Map<string, PolicyLike & KubernetesObject>,
      webhooks: new Map(
        [...webhooks.objects].map(([name, w]) => [name.replace(/^rollcall-/, ''), w]),
      ),
    });
    if (last.length === 0) done();
  };
  // Evaluate after each burst of events, not per event.
  let scheduled = false;
  const onChange = () => {
    if (scheduled) return;
    scheduled = true;
    setTimeout(() => ((scheduled = false), evaluate()), 100);
  };
  const policies = new Mirror<PolicyLike & KubernetesObject>(
    kc,
    '/apis/rollcall.dev/v1alpha1/policies',
    onChange,
  );
  const servers = new Mirror<PolicyLike & KubernetesObject>(
    kc,
    '/apis/rollcall.dev/v1alpha1/policyservers',
    onChange,
  );
  const webhooks = new Mirror<WebhookLike & KubernetesObject>(
    kc,
    '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations',
    onChange,
    'app.kubernetes.io/managed-by=rollcall',
  );
  const mirrors = [policies, servers, webhooks];
  for (const m of mirrors) void m.start();
  const timer = setTimeout(done, timeoutMs);
  await finished;
  clearTimeout(timer);
  for (const m of mirrors) m.stop();
  return last;
}

/** rollcall's processes for one test: watchers, workers and the simulator, separately killable. */
export class Processes {
  readonly all: RollcallProcess[] = [];
  private readonly namespace: string;
  private readonly env: Record<string, string>;
  private readonly tag: string;
  private n = 0;

  constructor(namespace: string, env: Record<string, string> = {}) {
    this.namespace = namespace;
    this.env = env;
    this.tag = namespace;
  }

  private start(role: string, args: string[], env: Record<string, string> = {}): RollcallProcess {
    const p = startRollcall(
      `${this.tag}-${role}-${this.n++}`,
      [role, '--namespace', this.namespace, ...args],
      { db: testDb(), env: { ...this.env, ...env } },
    );
    this.all.push(p);
    return p;
  }

  watcher(identity = `watcher-${this.n}`, args: string[] = []): RollcallProcess {
    return this.start('watcher', ['--port', '0', '--identity', identity, ...args]);
  }

  worker(args: string[] = [], env: Record<string, string> = {}): RollcallProcess {
    return this.start('worker', ['--port', '0', ...args], env);
  }

  run(args: string[] = [], env: Record<string, string> = {}): RollcallProcess {
    return this.start('run', ['--port', '0', ...args], env);
  }

  sim(): RollcallProcess {
    const p = startRollcall(`${this.tag}-sim-${this.n++}`, ['sim', '--namespace', this.namespace], {
      db: testDb(),
    });
    this.all.push(p);
    return p;
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.all.map((p) => p.stop()));
  }

  /** The cluster as an install leaves it: the namespace (and `more`) and the CRDs. */
  async prepare(...more: string[]): Promise<void> {
    const kc = testKubeConfig();
    for (const namespace of [this.namespace, ...more]) await ensureNamespace(kc, namespace);
    await installCrds(kc, { info: () => {} });
  }

  /** Stops every process and deletes every rollcall object, so the next file starts clean. */
  async cleanUp(): Promise<void> {
    await this.stopAll();
    await deleteRollcallObjects(testKubeConfig());
  }
}

/**
 * The start of most fault tests, inside the test: the cluster prepared, rollcall (`run` with
 * `runArgs`) and the simulator running for `namespace` (with `env`), and a Scenario with
 * `servers` PolicyServers. After the test every process stops and every rollcall object goes.
 */
export async function faultScenario(
  namespace: string,
  {
    env = {},
    runArgs = [],
    servers = 2,
    seed = seedFromEnv(),
  }: { env?: Record<string, string>; runArgs?: string[]; servers?: number; seed?: number } = {},
) {
  const procs = new Processes(namespace, env);
  await procs.prepare();
  after(() => procs.cleanUp());
  const s = new Scenario(testKubeConfig(), namespace, seed);
  const rollcall = procs.run(runArgs);
  const sim = procs.sim();
  await s.setup(servers);
  return { s, procs, rollcall, sim };
}
