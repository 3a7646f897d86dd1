// What the admission bench (bench/admission.ts) and the attack (bench/attack.ts) share: their
// command line, a local cluster of their own with its API clients, rollcall `run` with a
// PolicyServer whose replicas are real `rollcall policy-server` processes (the node agent runs
// them), waits until a Policy is Ready and denies through the apiserver, the replicas'
// processes and /metrics, a teardown, and the report's machine line, table and JSON file.
import { mkdirSync, writeFileSync } from 'node:fs';
import type { Agent } from 'node:https';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
} from '@kubernetes/client-node';
import { down, kubectl, up, type ClusterState } from '../tooling/cluster/cluster.ts';
import { POLICY_SERVER_ACCOUNT } from '../tooling/demo/identities.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { readNodeAgentState } from '../tooling/cluster/node-agent-state.ts';
import { startRedis, type RunningRedis } from '../tooling/cluster/redis.ts';
import { PooledKubeConfig } from '../lib/kube/kube-config.ts';
import { openLoop, pooledAgent, type LoadOptions, type Target } from './admission-load.ts';
import { scrape, type Scrape } from './admission-metrics.ts';
import { sleep, startRollcall, waitHttpOk, type Proc } from './support.ts';

/**
 * The command line: `--help` prints `usage` and exits before any cluster starts; `flag(name)`
 * reads `--name=value`.
 */
export function benchArgs(usage: string) {
  const args = process.argv.slice(2);
  if (args.includes('--help')) {
    console.log(usage);
    process.exit(0);
  }
  return {
    args,
    flag: (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.split('=')[1],
    quick: args.includes('--quick'),
    keepCluster: args.includes('--keep-cluster'),
  };
}

/** rollcall's namespace: `run` and the policy-server pods live here. */
export const rollcallNamespace = 'rollcall-system';
const policyApi = { group: 'rollcall.dev', version: 'v1alpha1' } as const;
const mergePatch = setHeaderOptions('Content-Type', PatchStrategy.MergePatch);

interface PolicyStatus {
  summary?: string;
  readyReplicas?: number;
  replicas?: number;
}

/** A live policy-server process, from the node agent's file. */
export interface PolicyServerProcess {
  pod: string;
  port: number;
  pid: number;
  ready: boolean;
}

/**
 * A bench's own local cluster (.rollcall/bench-<name>), its API clients, the apiserver as a
 * load target, and what the bench started on it, stopped by `teardown`.
 */
export class BenchCluster {
  readonly dir: string;
  readonly state: ClusterState;
  /** The apiserver as a load target, with the admin's credentials. */
  readonly apiserver: Target;
  readonly core: CoreV1Api;
  readonly admission: AdmissionregistrationV1Api;
  readonly custom: CustomObjectsApi;
  readonly #log: (line: string) => void;
  /** Processes the bench started, stopped by `teardown`. */
  readonly running: Proc[] = [];
  readonly #keepCluster: boolean;
  readonly #agents: Agent[] = [];
  #redis: RunningRedis | undefined;
  #stopping: Promise<void> | undefined;

  private constructor(
    dir: string,
    state: ClusterState,
    kc: PooledKubeConfig,
    apiserver: Target,
    log: (line: string) => void,
    keepCluster: boolean,
  ) {
    this.dir = dir;
    this.state = state;
    this.apiserver = apiserver;
    this.core = kc.makeApiClient(CoreV1Api);
    this.admission = kc.makeApiClient(AdmissionregistrationV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.#log = log;
    this.#keepCluster = keepCluster;
  }

  /** Starts (or finds) the cluster; Ctrl-C tears it down. */
  static async up(
    name: string,
    log: (line: string) => void,
    keepCluster: boolean,
  ): Promise<BenchCluster> {
    const dir = join(repoRoot, '.rollcall', `bench-${name}`);
    const state = await up(dir, log);
    const kc = new PooledKubeConfig();
    kc.loadFromFile(state.kubeconfig);
    const url = new URL(state.server);
    const tls: Target['tls'] = {};
    await kc.applyToHTTPSOptions(tls);
    const apiserver: Target = { host: url.hostname, port: Number(url.port), tls };
    const bench = new BenchCluster(dir, state, kc, apiserver, log, keepCluster);
    process.once('SIGINT', () => void bench.teardown().then(() => process.exit(130)));
    return bench;
  }

  /** A connection pool of its own to the apiserver, destroyed by `teardown`. */
  agent(): Agent {
    const agent = pooledAgent(this.apiserver);
    this.#agents.push(agent);
    return agent;
  }

  teardown(): Promise<void> {
    this.#stopping ??= (async () => {
      await Promise.all(this.running.map((p) => p.stop()));
      await this.#redis?.stop();
      for (const agent of this.#agents) agent.destroy();
      if (!this.#keepCluster) await down(this.dir, () => {});
    })();
    return this.#stopping;
  }

  /** A create that finds the object already there (a cluster kept from an earlier run) is fine. */
  async created(create: Promise<unknown>): Promise<void> {
    await create.catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
  }

  ensureNamespace(name: string): Promise<void> {
    return this.created(this.core.createNamespace({ body: { metadata: { name } } }));
  }

  /** `rollcall run` (and its Redis) as the image runs it, Ready; it installs the CRDs. */
  async startRollcall(name: string): Promise<void> {
    await this.ensureNamespace(rollcallNamespace);
    // The policy servers' account and its guards, as deploy/ installs them: the node agent runs
    // each replica under a token of its pod's ServiceAccount.
    const identities = ['rbac.yaml', 'guard-identities.yaml'].map((f) =>
      join(repoRoot, 'deploy', f),
    );
    kubectl(this.state, ['apply', ...identities.flatMap((f) => ['-f', f])]);
    this.#redis = await startRedis({ dir: join(this.dir, 'redis'), log: this.#log });
    // No --webhook-url: webhooks name the policy server's Service, as in a real cluster.
    const p = await startRollcall(name, 'run', {
      namespace: rollcallNamespace,
      redisUrl: `${this.#redis.url}/0`,
      kubeconfig: this.state.kubeconfig,
      extra: ['--install-crds'],
    });
    this.running.push(p);
    await waitHttpOk(p.port, '/readyz', 120_000);
  }

  createPolicyServer(name: string, spec: Record<string, unknown>): Promise<void> {
    return this.created(
      this.custom.createClusterCustomObject({
        ...policyApi,
        plural: 'policyservers',
        body: {
          apiVersion: 'rollcall.dev/v1alpha1',
          kind: 'PolicyServer',
          metadata: { name },
          spec: { serviceAccountName: POLICY_SERVER_ACCOUNT, ...spec },
        },
      }),
    );
  }

  async patchPolicyServer(name: string, spec: Record<string, unknown>): Promise<void> {
    await this.custom.patchClusterCustomObject(
      { ...policyApi, plural: 'policyservers', name, body: { spec } },
      mergePatch,
    );
  }

  createPolicy(body: object): Promise<void> {
    return this.created(
      this.custom.createClusterCustomObject({ ...policyApi, plural: 'policies', body }),
    );
  }

  async untilPolicyReady(name: string, replicas: number, timeoutMs = 180_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    let last: PolicyStatus | undefined;
    while (Date.now() < end) {
      const p = (await this.custom.getClusterCustomObject({
        ...policyApi,
        plural: 'policies',
        name,
      })) as { status?: PolicyStatus };
      last = p.status;
      if (
        last?.summary === 'Ready' &&
        last.readyReplicas === replicas &&
        last.replicas === replicas
      )
        return;
      await sleep(500);
    }
    throw new Error(
      `Policy ${name} not Ready with ${replicas} replicas after ${timeoutMs} ms: ${JSON.stringify(last)}`,
    );
  }

  /** Probes through the apiserver until `request` is denied with `expected` in the answer. */
  async untilDenied(
    agent: Agent,
    request: LoadOptions['request'],
    expected: string,
    what: string,
    timeoutMs = 120_000,
  ): Promise<void> {
    const end = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < end) {
      const r = await openLoop(this.apiserver, agent, {
        rate: 1,
        count: 1,
        timeoutMs: 15_000,
        okStatus: 201,
        request,
      });
      last = r.latencies.length ? 'admitted' : (r.samples[0] ?? JSON.stringify(r.errors));
      if (!r.latencies.length && last.includes(expected)) return;
      await sleep(500);
    }
    throw new Error(`${what} does not deny after ${timeoutMs} ms (last answer: ${last})`);
  }

  /** The live policy-server processes. */
  policyServers(): PolicyServerProcess[] {
    const pods = readNodeAgentState(this.dir)?.pods ?? {};
    return Object.entries(pods)
      .filter(([, p]) => p.namespace === rollcallNamespace)
      .map(([pod, { port, pid, ready }]) => ({ pod, port, pid, ready }));
  }

  /** Waits (up to 30 s) until the node agent runs `replicas` policy-server processes. */
  async untilPolicyServers(replicas: number): Promise<void> {
    for (let i = 0; i < 60 && this.policyServers().length !== replicas; i++) await sleep(500);
  }

  /** Each policy server's /metrics by pod ('' when it does not answer within the scrape's 10 s). */
  async serverScrapes(): Promise<Map<string, Scrape>> {
    const list = this.policyServers();
    const texts = await Promise.all(
      list.map(({ port }) => scrape(`https://127.0.0.1:${port}/metrics`).catch(() => '')),
    );
    return new Map(list.map(({ pod }, i) => [pod, texts[i]!]));
  }

  apiserverMetrics(): Promise<Scrape> {
    return scrape(`${this.state.server}/metrics`, this.apiserver.tls);
  }
}

/** The machine a report was measured on; `load0` is the load average at the start. */
export function machineInfo(load0: number[]) {
  const load1 = loadavg();
  return {
    cores: cpus().length,
    cpu: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadavg: { start: load0.map((l) => +l.toFixed(2)), end: load1.map((l) => +l.toFixed(2)) },
  };
}

/** Prints rows as columns: the first left-aligned, the others right-aligned. */
export function printColumns(rows: string[][]): void {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows)
    console.log(
      row.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  '),
    );
}

/** Writes `results` to bench/out/<name>-<quick|full>-<time>.json and says where. */
export function writeResults(name: string, quick: boolean, results: unknown): void {
  mkdirSync(join(repoRoot, 'bench', 'out'), { recursive: true });
  const file = join(
    repoRoot,
    'bench',
    'out',
    `${name}-${quick ? 'quick' : 'full'}-${new Date().toISOString().replace(/[:.]/g, '-')}.json`,
  );
  writeFileSync(file, JSON.stringify(results, null, 2));
  console.log(`JSON: ${file}`);
}
