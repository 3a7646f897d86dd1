// Observation tools for the benchmark: a counting proxy in front of the apiserver, processes
// run as the image runs them, their /metrics and RSS, and a watch that records every Policy
// status change. Nothing here asks the code under test about itself except /metrics.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync, readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { CustomObjectsApi, Watch, type KubeConfig } from '@kubernetes/client-node';
import type { Policy } from '../api/v1alpha1.ts';
import { startApiProxy, writeProxyKubeconfig, type ApiProxy } from '../cluster/api-proxy.ts';
import { repoRoot } from '../cluster/paths.ts';
import { freePort } from '../cluster/ports.ts';

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
}

export const zeroCounts = (): ApiCounts => ({
  reads: 0,
  watches: 0,
  policyStatusWrites: 0,
  events: 0,
  otherWrites: 0,
});
export const diffCounts = (a: ApiCounts, b: ApiCounts): ApiCounts => ({
  reads: b.reads - a.reads,
  watches: b.watches - a.watches,
  policyStatusWrites: b.policyStatusWrites - a.policyStatusWrites,
  events: b.events - a.events,
  otherWrites: b.otherWrites - a.otherWrites,
});

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
    this.proxy = await startApiProxy(kc, (req) => this.count(req.method ?? 'GET', req.url ?? '/'));
    this.kubeconfig = writeProxyKubeconfig(this.proxy.url, file);
  }

  private count(method: string, url: string): void {
    const path = url.split('?')[0] ?? '';
    if (method === 'GET') {
      if (/[?&]watch=(true|1)/.test(url)) this.counts.watches++;
      else this.counts.reads++;
    } else if (
      /^\/apis\/rollcall\.dev\/v1alpha1\/policies\/[^/]+\/status$/.test(path) &&
      (method === 'PATCH' || method === 'PUT')
    )
      this.counts.policyStatusWrites++;
    else if (method === 'POST' && /\/events$/.test(path)) this.counts.events++;
    else this.counts.otherWrites++;
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
export async function startProcess(
  name: string,
  script: string,
  args: string[],
  env: Record<string, string>,
): Promise<Proc> {
  mkdirSync(join(benchDir, 'logs'), { recursive: true });
  const log = createWriteStream(join(benchDir, 'logs', `${name}.log`), { flags: 'a' });
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [join(repoRoot, script), ...args.map((a) => (a === '$PORT' ? String(port) : a))],
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

/** `rollcall <role>` exactly as the image runs it, against the proxy's kubeconfig. */
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
  return startProcess(name, 'cli/rollcall.ts', args, { KUBECONFIG: opts.kubeconfig });
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

/** Sum of a Prometheus metric's samples whose labels contain every `match` pair. */
export async function metric(
  port: number,
  name: string,
  match: Record<string, string> = {},
): Promise<number> {
  const { body } = await httpGet(port, '/metrics');
  let sum = 0;
  for (const line of body.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = m[2] ?? '';
    if (Object.entries(match).every(([k, v]) => labels.includes(`${k}="${v}"`)))
      sum += Number(m[3]);
  }
  return sum;
}

/** Resident set size of a process, in MiB, from /proc. */
export function rssMiB(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
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
