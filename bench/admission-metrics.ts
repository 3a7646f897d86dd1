// Prometheus text read from outside the subjects (the apiserver's /metrics with the admin
// token, a policy server's /metrics over its own HTTPS port), reduced to the few sums the
// admission bench compares: how many calls, how long in total, where.
import { readFileSync } from 'node:fs';
import { request, type RequestOptions } from 'node:https';

export type Scrape = string;

/** GET an HTTPS URL (any certificate when no CA is given: loopback only). */
export function scrape(
  url: string,
  tls: Pick<RequestOptions, 'ca' | 'cert' | 'key' | 'headers'> = {},
): Promise<Scrape> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        ...tls,
        rejectUnauthorized: tls.ca !== undefined,
        timeout: 10_000,
      },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () =>
          res.statusCode === 200
            ? resolve(body)
            : reject(new Error(`GET ${url}: ${res.statusCode} ${body.slice(0, 200)}`)),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

/** Sum of the samples of `name` whose labels contain every `match` pair. */
export function sum(text: Scrape, name: string, match: Record<string, string> = {}): number {
  let total = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = m[2] ?? '';
    if (Object.entries(match).every(([k, v]) => labels.includes(`${k}="${v}"`)))
      total += Number(m[3]);
  }
  return total;
}

/**
 * Samples of `name` summed by the values of the labels `keys` (joined by `/`, a missing
 * label as ''): e.g. the apiserver's webhook calls by webhook and HTTP code.
 */
export function sumBy(text: Scrape, name: string, keys: readonly string[]): Map<string, number> {
  const totals = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels = new Map(
      [...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]),
    );
    const key = keys.map((k) => labels.get(k) ?? '').join('/');
    totals.set(key, (totals.get(key) ?? 0) + Number(m[3]));
  }
  return totals;
}

/** Names of the histograms in a scrape (their `_count` series), to find an unknown one. */
export function histograms(text: Scrape): string[] {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) histogram$/gm)) names.add(m[1]!);
  return [...names];
}

/** Calls and mean milliseconds of a histogram between two scrapes. */
export function histogramDelta(
  before: Scrape,
  after: Scrape,
  name: string,
  match: Record<string, string> = {},
): { count: number; meanMs: number; overMs: (ms: number) => number } {
  const count = sum(after, `${name}_count`, match) - sum(before, `${name}_count`, match);
  const seconds = sum(after, `${name}_sum`, match) - sum(before, `${name}_sum`, match);
  /** Calls slower than the smallest bucket bound ≥ ms (histograms only know their buckets). */
  const overMs = (ms: number) => {
    const bound = bucketBounds(after, name).find((b) => b >= ms / 1000);
    if (bound === undefined) return NaN;
    const le = { ...match, le: String(bound) };
    const within = sum(after, `${name}_bucket`, le) - sum(before, `${name}_bucket`, le);
    return count - within;
  };
  return { count, meanMs: count ? (seconds / count) * 1000 : NaN, overMs };
}

function bucketBounds(text: Scrape, name: string): number[] {
  const bounds = new Set<number>();
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{[^}]*le="([^"]+)"`, 'gm')))
    if (m[1] !== '+Inf') bounds.add(Number(m[1]));
  return [...bounds].sort((a, b) => a - b);
}

/** CPU time (user + system) a process has used, in ms, from /proc; 0 when it is gone. */
export function cpuMs(pid: number | undefined): number {
  if (!pid) return 0;
  try {
    // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks;
  } catch {
    return 0;
  }
}
/** USER_HZ: 100 on every Linux this runs on. */
const clockTicks = 100;

/** CPU ms by component (a component may be several processes). */
export type CpuSnapshot = Record<string, number>;
export function cpuSnapshot(pids: Record<string, (number | undefined)[]>): CpuSnapshot {
  return Object.fromEntries(
    Object.entries(pids).map(([name, list]) => [
      name,
      list.reduce((n: number, p) => n + cpuMs(p), 0),
    ]),
  );
}

interface Acc {
  count: number;
  totalMs: number;
}
const mean = (a: Acc) => (a.count ? a.totalMs / a.count : NaN);

/**
 * A subject's time, layer by layer, summed over its rounds: the apiserver's validating
 * admission step, its calls to webhooks (as the apiserver timed them, with how many were slow),
 * its ValidatingAdmissionPolicy checks, its egress dials (a new connection to a policy server
 * through the CONNECT proxy), and each policy server's own request histograms.
 */
export class Breakdown {
  private step: Acc = { count: 0, totalMs: 0 };
  private webhook: Acc & { over5ms: number; over25ms: number } = {
    count: 0,
    totalMs: 0,
    over5ms: 0,
    over25ms: 0,
  };
  private vap: Acc = { count: 0, totalMs: 0 };
  private dials = 0;
  private requests = 0;
  private cpu: Record<string, number> = {};
  /** By histogram name, then by pod. */
  private servers = new Map<string, Map<string, Acc>>();

  add(
    requests: number,
    cpuBefore: CpuSnapshot,
    cpuAfter: CpuSnapshot,
    apiBefore: Scrape,
    apiAfter: Scrape,
    serversBefore?: Map<string, Scrape>,
    serversAfter?: Map<string, Scrape>,
  ): void {
    this.requests += requests;
    for (const [name, ms] of Object.entries(cpuAfter))
      this.cpu[name] = (this.cpu[name] ?? 0) + ms - (cpuBefore[name] ?? 0);
    const addTo = (acc: Acc, d: { count: number; meanMs: number }) => {
      acc.count += d.count;
      if (d.count) acc.totalMs += d.meanMs * d.count;
    };
    addTo(
      this.step,
      histogramDelta(apiBefore, apiAfter, 'apiserver_admission_step_admission_duration_seconds', {
        operation: 'CREATE',
        type: 'validate',
      }),
    );
    const webhook = histogramDelta(
      apiBefore,
      apiAfter,
      'apiserver_admission_webhook_admission_duration_seconds',
      { operation: 'CREATE', type: 'validating' },
    );
    addTo(this.webhook, webhook);
    if (webhook.count) {
      this.webhook.over5ms += webhook.overMs(5);
      this.webhook.over25ms += webhook.overMs(25);
    }
    addTo(
      this.vap,
      histogramDelta(
        apiBefore,
        apiAfter,
        'apiserver_validating_admission_policy_check_duration_seconds',
      ),
    );
    this.dials +=
      sum(apiAfter, 'apiserver_egress_dialer_dial_start_total') -
      sum(apiBefore, 'apiserver_egress_dialer_dial_start_total');
    for (const [pod, after] of serversAfter ?? []) {
      const before = serversBefore?.get(pod) ?? '';
      for (const h of histograms(after)) {
        if (/^(nodejs|process)_/.test(h)) continue;
        const byPod = this.servers.get(h) ?? new Map<string, Acc>();
        this.servers.set(h, byPod);
        const acc = byPod.get(pod) ?? { count: 0, totalMs: 0 };
        byPod.set(pod, acc);
        addTo(acc, histogramDelta(before, after, h));
      }
    }
  }

  summary() {
    return {
      apiserverValidateStep: { count: this.step.count, meanMs: mean(this.step) },
      apiserverWebhookCalls: { ...this.webhook, meanMs: mean(this.webhook) },
      apiserverVapChecks: { count: this.vap.count, meanMs: mean(this.vap) },
      egressDials: this.dials,
      cpuMsPerRequest: Object.fromEntries(
        Object.entries(this.cpu).map(([name, ms]) => [name, ms / (this.requests || 1)]),
      ),
      policyServers: Object.fromEntries(
        [...this.servers].map(([h, byPod]) => [
          h,
          Object.fromEntries(
            [...byPod].map(([pod, a]) => [pod, { count: a.count, meanMs: mean(a) }]),
          ),
        ]),
      ),
    };
  }

  line(): string {
    const f = (n: number) => n.toFixed(2);
    const cpu = Object.entries(this.cpu)
      .filter(([, ms]) => ms > 0)
      .map(([name, ms]) => `${name} ${f(ms / (this.requests || 1))}`)
      .join(', ');
    const parts = [
      `CPU ms per request: ${cpu}`,
      `apiserver validate step ${this.step.count} × ${f(mean(this.step))} ms`,
    ];
    if (this.vap.count) parts.push(`VAP checks ${this.vap.count} × ${f(mean(this.vap))} ms`);
    if (this.webhook.count)
      parts.push(
        `webhook calls (apiserver-timed) ${this.webhook.count} × ${f(mean(this.webhook))} ms, > 5 ms: ${this.webhook.over5ms}, > 25 ms: ${this.webhook.over25ms}; egress dials ${this.dials}`,
      );
    for (const [h, byPod] of this.servers) {
      const all = [...byPod.values()];
      const total = { count: 0, totalMs: 0 };
      for (const a of all) ((total.count += a.count), (total.totalMs += a.totalMs));
      if (total.count)
        parts.push(
          `policy server ${h} ${total.count} × ${f(mean(total))} ms (per pod: ${all.map((a) => a.count).join('/')})`,
        );
    }
    return parts.join('; ');
  }
}
