// What every phase of `npm run bench` shares: the sizes, the cluster's API clients, the
// counting proxy and the Policy recorder, the processes started, the results, and the data
// plane, which the bench plays itself (it writes the replica reports) to control timing.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Pod,
} from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION, REPORT_MAX_BYTES } from '../api/constants.ts';
import type { Policy } from '../api/v1alpha1.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { policyManifest } from '../test/support/manifests.ts';
import { CountingProxy, PolicyRecorder, sleep, startRollcall, type Proc } from './support.ts';
import { metric } from '../test/support/prom-text.ts';

export interface Sizes {
  /** Report flips of the latency phase. */
  flips: number;
  /** Policies on server `lat`. */
  latPolicies: number;
  /** Policies on server `storm`. */
  storm: number;
  /** Bare policy-server pods and policies of the memory phase. */
  memPods: number;
  memPolicies: number;
}

/** The sizes of a quick or full run; BENCH_FLIPS, BENCH_STORM, BENCH_MEM_PODS, BENCH_MEM_POLICIES override them. */
export function sizesFor(quick: boolean): Sizes {
  const defaults = quick
    ? { flips: 12, latPolicies: 100, storm: 200, memPods: 500, memPolicies: 300 }
    : { flips: 200, latPolicies: 100, storm: 1000, memPods: 10_000, memPolicies: 5000 };
  const sizeFrom = (env: string, fallback: number) =>
    process.env[env] ? Number(process.env[env]) : fallback;
  return {
    ...defaults,
    flips: sizeFrom('BENCH_FLIPS', defaults.flips),
    storm: sizeFrom('BENCH_STORM', defaults.storm),
    memPods: sizeFrom('BENCH_MEM_PODS', defaults.memPods),
    memPolicies: sizeFrom('BENCH_MEM_POLICIES', defaults.memPolicies),
  };
}

export const namespace = 'rollcall-bench';
/** rollcall's default --concurrency; the floor and the poller write with it too. */
export const concurrency = 8;
export const group = 'rollcall.dev';
export const version = 'v1alpha1';
export const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);
/** A phase that has not converged after this long is reported as "> limit". */
export const phaseTimeoutMs = 600_000;

export const log = (line: string) =>
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}`);

const names = (length: number, name: (i: number) => string) =>
  Array.from({ length }, (_, i) => name(i));

/**
 * No job waiting, delayed or running, and no Event left to write (a watcher has none), per the
 * process's /metrics (a real queue read).
 */
export async function queueIdle(port: number): Promise<boolean> {
  let n = await metric(port, 'rollcall_events_pending');
  for (const state of ['waiting', 'active', 'delayed', 'prioritized'])
    n += await metric(port, 'rollcall_queue_depth', { state });
  return n === 0;
}

export const isReady = (pod: V1Pod) =>
  !pod.metadata?.deletionTimestamp &&
  (pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false);

/** A Policy on `server` that the simulator loads. */
export const policyBody = (name: string, server: string) =>
  policyManifest(name, server, { module: 'sim://ok' });

export class Bench {
  readonly quick: boolean;
  readonly size: Sizes;
  readonly kc: KubeConfig;
  readonly custom: CustomObjectsApi;
  readonly core: CoreV1Api;
  readonly apps: AppsV1Api;
  readonly proxy = new CountingProxy();
  readonly recorder: PolicyRecorder;
  /** Processes to stop at teardown. */
  readonly running = new Set<Proc>();
  /** The private Redis; each subject gets its own database. */
  readonly redisUrl: string;
  /** The private redis-server's pid (0 with REDIS_URL): rollcall's Redis CPU is part of its cost. */
  redisPid = 0;
  readonly results: Record<string, unknown>;
  readonly resultsFile: string;
  /** Report and spec writes the bench made as the data plane and the user. */
  dataPlaneWrites = 0;
  readonly latNames: string[];
  readonly stormNames: string[];
  readonly memNames: string[];
  readonly generation = { lat: 1, storm: 1 };
  /** The controller-runtime peer's binary (bench/peer-build.ts), set once built. */
  peerBinary = '';
  /** The last Redis database taken by the memory and scale-out phases (subjects use 1–3). */
  phaseDb = 10;

  constructor(kc: KubeConfig, redisUrl: string, quick: boolean, results: Record<string, unknown>) {
    this.kc = kc;
    this.redisUrl = redisUrl;
    this.quick = quick;
    this.size = sizesFor(quick);
    this.results = results;
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.recorder = new PolicyRecorder(kc);
    this.latNames = names(this.size.latPolicies, (i) => `lat-${String(i).padStart(3, '0')}`);
    this.stormNames = names(this.size.storm, (i) => `s${String(i).padStart(4, '0')}`);
    this.memNames = names(this.size.memPolicies, (i) => `m${String(i).padStart(4, '0')}`);
    this.resultsFile = join(
      repoRoot,
      'bench',
      'out',
      `bench-${quick ? 'quick' : 'full'}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`,
    );
  }

  /** Written after every phase, so a long run that is stopped still leaves its figures. */
  save(): void {
    mkdirSync(join(repoRoot, 'bench', 'out'), { recursive: true });
    // A timed-out figure (Infinity) would become null in JSON.
    const timedOut = (_: string, v: unknown) => (v === Infinity ? 'timed out' : v);
    writeFileSync(this.resultsFile, JSON.stringify(this.results, timedOut, 2));
  }

  /**
   * A replica report (contract v2: every entry carries the Policy's uid, read from the Policy
   * watch); short keys and messages keep 1,000 policies under the report size limit.
   */
  report(
    policies: readonly string[],
    gen: number,
    state: string,
    override: Record<string, object> = {},
  ): string {
    const entries = Object.fromEntries(
      policies.map((n) => [
        n,
        { uid: this.uidOf(n), ...(override[n] ?? { generation: gen, state }) },
      ]),
    );
    const json = JSON.stringify(entries);
    if (Buffer.byteLength(json) > REPORT_MAX_BYTES)
      throw new Error(
        `report of ${policies.length} policies is ${Buffer.byteLength(json)} bytes, over ${REPORT_MAX_BYTES / 1024} KiB`,
      );
    return json;
  }

  private uidOf(policy: string): string {
    const uid = this.recorder.latest.get(policy)?.metadata.uid;
    if (!uid) throw new Error(`the Policy watch has not seen ${policy} yet: no uid to report`);
    return uid;
  }

  async writeReport(pod: string, json: string): Promise<void> {
    this.dataPlaneWrites++;
    await this.core.patchNamespacedPod(
      { name: pod, namespace, body: { metadata: { annotations: { [REPORT_ANNOTATION]: json } } } },
      mergePatch,
    );
  }

  async podsOf(server: string): Promise<V1Pod[]> {
    const list = await this.core.listNamespacedPod({
      namespace,
      labelSelector: `${POLICY_SERVER_LABEL}=${server}`,
    });
    return list.items.sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1));
  }

  async readyPods(server: string, want: number, timeoutMs = 120_000): Promise<string[]> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const pods = await this.podsOf(server);
      const ready = pods.filter(isReady).map((p) => p.metadata!.name!);
      if (ready.length === want && pods.length === want) return ready;
      if (Date.now() > end)
        throw new Error(
          `server ${server}: ${ready.length}/${want} ready pods after ${timeoutMs} ms`,
        );
      await sleep(100);
    }
  }

  /** Every replica of both servers reports every policy Loaded at the current generation. */
  async heal(): Promise<void> {
    const all = [...this.latNames, ...this.stormNames];
    await this.recorder.until(
      () => all.every((n) => this.recorder.latest.get(n)?.metadata.uid),
      60_000,
      'the Policy watch to see every policy',
    );
    for (const [server, policies, gen] of [
      ['lat', this.latNames, this.generation.lat],
      ['storm', this.stormNames, this.generation.storm],
    ] as const) {
      for (const pod of await this.readyPods(server, 3))
        await this.writeReport(pod, this.report(policies, gen, 'Loaded'));
    }
  }

  allHealthy(): boolean {
    const ok = (p: Policy | undefined, gen: number) =>
      p?.status?.observedGeneration === gen &&
      p.status.summary === 'Ready' &&
      p.status.readyReplicas === 3;
    const { latest } = this.recorder;
    return (
      this.latNames.every((n) => ok(latest.get(n), this.generation.lat)) &&
      this.stormNames.every((n) => ok(latest.get(n), this.generation.storm))
    );
  }

  /** A rollcall process through the counting proxy, stopped at teardown if still running. */
  async startRole(
    name: string,
    role: 'run' | 'watcher' | 'worker',
    redisUrl: string,
    extra: string[] = [],
  ): Promise<Proc> {
    const p = await startRollcall(name, role, {
      namespace,
      redisUrl,
      kubeconfig: this.proxy.kubeconfig,
      extra,
    });
    this.running.add(p);
    return p;
  }

  /** Workers `<prefix>0…` on one Redis database. */
  async startWorkers(
    prefix: string,
    count: number,
    redisUrl: string,
    extra: string[] = [],
  ): Promise<Proc[]> {
    const workers: Proc[] = [];
    for (let i = 0; i < count; i++)
      workers.push(await this.startRole(`${prefix}${i}`, 'worker', redisUrl, extra));
    return workers;
  }

  /** Stops processes one at a time and forgets them. */
  async stopAll(procs: readonly Proc[]): Promise<void> {
    for (const p of procs) {
      await p.stop();
      this.running.delete(p);
    }
  }
}
