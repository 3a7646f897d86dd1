// Observation tools for the benchmark: a counting proxy in front of the apiserver, processes
// run as the image runs them, their /metrics and RSS, and a watch that records every Policy
// status change. Nothing here asks the code under test about itself except /metrics.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { CustomObjectsApi, Watch, type KubeConfig } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import type { Policy } from '../api/v1alpha1.ts';
import {
  startApiProxy,
  writeProxyKubeconfig,
  type ApiProxy,
} from '../tooling/cluster/api-proxy.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { freePort } from '../tooling/cluster/ports.ts';
import { readDockerfile, runtimeEnv } from '../tooling/image/dockerfile.ts';

export const benchDir = join(repoRoot, '.rollcall', 'bench');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What one subject asked of the apiserver, as seen on the wire. */
export interface ApiCounts {
  /** GET without watch (gets and lists). */
  reads: number;
  watches: number;
  /** PATCH/PUT of policies/<name>/status. */
  policyStatusWrites: number;
  /** POST of Events. */
  events: number;
  otherWrites: number;
  /** Time from request to response end at the proxy (the apiserver's part of a write), summed. */
  policyStatusWriteMs: number;
  eventMs: number;
}

const zeroCounts = (): ApiCounts => ({
  reads: 0,
  watches: 0,
  policyStatusWrites: 0,
  events: 0,
  otherWrites: 0,
  policyStatusWriteMs: 0,
  eventMs: 0,
});
export const diffCounts = (a: ApiCounts, b: ApiCounts): ApiCounts =>
  Object.fromEntries(
    Object.entries(b).map(([k, v]) => [k, v - a[k as keyof ApiCounts]]),
  ) as unknown as ApiCounts;

/**
 * A plain-HTTP proxy on loopback that forwards to the apiserver with the admin token and
 * counts requests. Subjects get a kubeconfig pointing at it, so their API traffic is
 * counted outside their process, by request, exactly.
 */
export class CountingProxy {
  counts = zeroCounts();
  kubeconfig = '';
  private proxy: ApiProxy | undefined;

  async start(kc: KubeConfig, file: string): Promise<void> {
    this.proxy = await startApiProxy(kc, (req, res) => {
      const timed = this.count(req.method ?? 'GET', req.url ?? '/');
      if (!timed) return;
      const t0 = performance.now();
      res.once('finish', () => (this.counts[timed] += performance.now() - t0));
    });
    this.kubeconfig = writeProxyKubeconfig(this.proxy.url, file);
  }

  /** Counts a request; returns the sum its time goes to, for the writes that are timed. */
  private count(method: string, url: string): 'policyStatusWriteMs' | 'eventMs' | undefined {
    const path = url.split('?')[0] ?? '';
    if (method === 'GET') {
      if (/[?&]watch=(true|1)/.test(url)) this.counts.watches++;
      else this.counts.reads++;
    } else if (
      /^\/apis\/rollcall\.dev\/v1alpha1\/policies\/[^/]+\/status$/.test(path) &&
      (method === 'PATCH' || method === 'PUT')
    ) {
      this.counts.policyStatusWrites++;
      return 'policyStatusWriteMs';
    } else if (method === 'POST' && /\/events$/.test(path)) {
      this.counts.events++;
      return 'eventMs';
    } else this.counts.otherWrites++;
    return undefined;
  }

  snapshot(): ApiCounts {
    return { ...this.counts };
  }

  close(): void {
    void this.proxy?.close();
  }
}

export interface Proc {
  name: string;
  child: ChildProcess;
  port: number;
  stop(): Promise<void>;
}

/** Runs a node script (rollcall's CLI or a bench-local one) with output in .rollcall/bench/logs. */
export function startProcess(
  name: string,
  script: string,
  args: string[],
  env: Record<string, string>,
): Promise<Proc> {
  return startCommand(name, process.execPath, [join(repoRoot, script), ...args], env);
}

/** Runs a program; `$PORT` in its arguments becomes the free port the Proc reports. */
export async function startCommand(
  name: string,
  command: string,
  args: string[],
  env: Record<string, string>,
): Promise<Proc> {
  mkdirSync(join(benchDir, 'logs'), { recursive: true });
  const log = createWriteStream(join(benchDir, 'logs', `${name}.log`), { flags: 'a' });
  const port = await freePort();
  const child = spawn(
    command,
    args.map((a) => a.replaceAll('$PORT', String(port))),
    {
      cwd: repoRoot,
      env: { ...process.env, LOG_LEVEL: 'warn', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    name,
    child,
    port,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** NODE_OPTIONS of a role's container in deploy/ (the watcher's, or the worker's for `run`). */
export function deployedNodeOptions(role: string): string {
  const file = join(repoRoot, 'deploy', role === 'watcher' ? 'watcher.yaml' : 'worker.yaml');
  const docs = parseAllDocuments(readFileSync(file, 'utf8')).map((d) => d.toJS() as DeployedRole);
  const deployment = docs.find((d) => d.kind === 'Deployment');
  const env = deployment?.spec.template.spec.containers[0]?.env;
  return env?.find((e) => e.name === 'NODE_OPTIONS')?.value ?? '';
}

interface DeployedRole {
  kind: string;
  spec: { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } };
}

/** The environment the image's runtime sets (its compile cache is filled below, for the bench). */
const imageEnv = runtimeEnv(readDockerfile(repoRoot));

let compileCache: string | undefined;

/** Node's compile cache of the runtime, filled once per bench run as the image's build fills it. */
function filledCompileCache(): string {
  if (compileCache !== undefined) return compileCache;
  const dir = join(benchDir, 'compile-cache');
  rmSync(dir, { recursive: true, force: true });
  const filled = spawnSync(process.execPath, [join(repoRoot, 'cli', 'compile-cache.ts')], {
    env: { ...process.env, NODE_COMPILE_CACHE: dir },
    encoding: 'utf8',
  });
  if (filled.status !== 0) throw new Error(`cli/compile-cache.ts failed: ${filled.stderr}`);
  return (compileCache = dir);
}

/**
 * `rollcall <role>` exactly as the image runs it (its environment, NODE_OPTIONS and compile
 * cache too), against the proxy's kubeconfig.
 */
export function startRollcall(
  name: string,
  role: string,
  opts: { namespace: string; redisUrl: string; kubeconfig: string; extra?: string[] },
): Promise<Proc> {
  const args = [
    role,
    '--namespace',
    opts.namespace,
    '--redis-url',
    opts.redisUrl,
    '--port',
    '$PORT',
    ...(opts.extra ?? []),
  ];
  // BENCH_NODE_OPTIONS adds to the manifests' options, e.g. `--cpu-prof --cpu-prof-dir=DIR`.
  const nodeOptions = [deployedNodeOptions(role), process.env['BENCH_NODE_OPTIONS'] ?? ''];
  return startProcess(name, 'cli/rollcall.ts', args, {
    ...imageEnv,
    KUBECONFIG: opts.kubeconfig,
    NODE_OPTIONS: nodeOptions.join(' ').trim(),
    NODE_COMPILE_CACHE: filledCompileCache(),
  });
}

export async function httpGet(
  port: number,
  path: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

export async function waitHttpOk(port: number, path: string, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const ok = await httpGet(port, path).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    await sleep(200);
  }
  throw new Error(`127.0.0.1:${port}${path} not ready after ${timeoutMs} ms`);
}

/** Resident set size of a process, in MiB, from /proc. */
function rssMiB(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * CPU time (user + system) some processes have used so far, in seconds, from /proc: on a
 * shared machine a steadier figure of a subject's own cost than wall-clock time.
 */
export function cpuSeconds(pids: readonly (number | undefined)[]): number {
  let ticks = 0;
  for (const pid of pids) {
    if (!pid) continue;
    try {
      // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // the process is gone: it used nothing more
    }
  }
  return ticks / 100; // USER_HZ, 100 on Linux
}

/** Samples the peak RSS of some processes until stopped. */
export function rssSampler(pids: () => (number | undefined)[]): { stop(): number } {
  let peak = 0;
  const timer = setInterval(
    () =>
      (peak = Math.max(
        peak,
        pids().reduce((n: number, p) => n + rssMiB(p), 0),
      )),
    200,
  );
  return {
    stop() {
      clearInterval(timer);
      return Math.max(
        peak,
        pids().reduce((n: number, p) => n + rssMiB(p), 0),
      );
    },
  };
}

export interface StatusChange {
  t: number;
  name: string;
}

/**
 * Watches every Policy from the bench's own connection and records each status change
 * (a MODIFIED event whose status differs from the last one seen) with its arrival time.
 */
export class PolicyRecorder {
  readonly latest = new Map<string, Policy>();
  readonly changes: StatusChange[] = [];
  private waiters: { check: () => boolean; resolve: () => void }[] = [];
  private controller: AbortController | undefined;
  private stopped = false;
  private rv = '';
  private readonly kc: KubeConfig;

  constructor(kc: KubeConfig) {
    this.kc = kc;
  }

  async start(): Promise<void> {
    const list = (await this.kc.makeApiClient(CustomObjectsApi).listClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural: 'policies',
    })) as {
      metadata: { resourceVersion: string };
      items: Policy[];
    };
    for (const p of list.items) this.latest.set(p.metadata.name, p);
    this.rv = list.metadata.resourceVersion;
    await this.watch();
  }

  private async watch(): Promise<void> {
    this.controller = await new Watch(this.kc).watch(
      '/apis/rollcall.dev/v1alpha1/policies',
      { allowWatchBookmarks: true, resourceVersion: this.rv },
      (phase, obj: Policy) => {
        if (obj.metadata?.resourceVersion) this.rv = obj.metadata.resourceVersion;
        if (phase === 'BOOKMARK') return;
        const name = obj.metadata.name;
        const before = this.latest.get(name);
        if (phase === 'DELETED') this.latest.delete(name);
        else this.latest.set(name, obj);
        if (phase === 'MODIFIED' && !isDeepStrictEqual(before?.status, obj.status))
          this.changes.push({ t: performance.now(), name });
        this.waiters = this.waiters.filter((w) => (w.check() ? (w.resolve(), false) : true));
      },
      () => {
        // Ended (client inactivity, server timeout): resume from the last resourceVersion.
        if (!this.stopped) void this.watch().catch(() => setTimeout(() => void this.watch(), 500));
      },
    );
  }

  /** Resolves when `check` holds (checked at once and on every event). */
  until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)),
        timeoutMs,
      );
      this.waiters.push({ check, resolve: () => (clearTimeout(timer), resolve()) });
    });
  }

  /** Resolves once no status change arrived for `quietMs`. */
  async quiet(quietMs: number, timeoutMs = 120_000): Promise<void> {
    const end = performance.now() + timeoutMs;
    while (performance.now() < end) {
      const last = this.changes.at(-1)?.t ?? 0;
      if (performance.now() - last >= quietMs) return;
      await sleep(100);
    }
  }

  changesSince(t: number, names?: (n: string) => boolean): number {
    return this.changes.filter((c) => c.t >= t && (!names || names(c.name))).length;
  }

  stop(): void {
    this.stopped = true;
    this.controller?.abort();
  }
}

/** Runs `fn` over `items` with at most `concurrency` at once. */
export async function pool<T>(
  items: readonly T[],
  concurrency: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, lane));
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}
