// What the audit bench (bench/audit.ts) sees of rollcall's OpenReports Reports, from outside:
// a watch of every Report rollcall manages, timed on arrival, for the pass's end and each
// change's result; and a paged list of them once quiet, for their sizes and counts.
import {
  CustomObjectsApi,
  Watch,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { AUDIT_RESULTS, OPENREPORTS_GROUP, type OpenReport } from '../api/audit.ts';
import { MANAGED_BY, MANAGED_BY_LABEL, POLICY_LABEL } from '../api/constants.ts';

export const reportSelector = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;
const api = { group: OPENREPORTS_GROUP, version: 'v1alpha1', plural: 'reports' } as const;

type Report = OpenReport & KubernetesObject;

/** The sum of a summary's counts (every result, shown or omitted). */
export const summaryTotal = (summary: Partial<Record<string, number>> | undefined) =>
  AUDIT_RESULTS.reduce((n, r) => n + (summary?.[r] ?? 0), 0);

interface Seen {
  total: number;
  fail: number;
  /** Only for the Reports of the Policy the bench follows: object name → result. */
  results?: Map<string, string>;
}

/**
 * Watches every Report rollcall manages (all namespaces) and keeps, per Report, its summary's
 * total and failures, and for Reports named `followed` each object's result. Waiters are
 * checked on each event and resolve with the event's arrival time.
 */
export class ReportRecorder {
  readonly seen = new Map<string, Seen>();
  private waiters: { check: () => boolean; resolve: (t: number) => void }[] = [];
  private controller: AbortController | undefined;
  private stopped = false;
  private rv = '';
  private readonly kc: KubeConfig;
  private readonly followed: string;
  /** Watch events received (ADDED, MODIFIED, DELETED). */
  events = 0;

  constructor(kc: KubeConfig, followed: string) {
    this.kc = kc;
    this.followed = followed;
  }

  async start(): Promise<void> {
    const custom = this.kc.makeApiClient(CustomObjectsApi);
    let next: string | undefined;
    do {
      const page = (await custom.listClusterCustomObject({
        ...api,
        labelSelector: reportSelector,
        limit: 100,
        _continue: next,
      })) as { items: Report[]; metadata: { resourceVersion: string; continue?: string } };
      for (const r of page.items) this.note('ADDED', r);
      this.rv = page.metadata.resourceVersion;
      next = page.metadata.continue || undefined;
    } while (next);
    await this.watch();
  }

  private note(phase: string, r: Report): void {
    const key = `${r.metadata.namespace}/${r.metadata.name}`;
    if (phase === 'DELETED') {
      this.seen.delete(key);
      return;
    }
    const entry: Seen = { total: summaryTotal(r.summary), fail: r.summary?.fail ?? 0 };
    if (r.metadata.name === this.followed)
      entry.results = new Map(
        (r.results ?? []).map((x) => [x.resources?.[0]?.name ?? '', x.result] as const),
      );
    this.seen.set(key, entry);
  }

  private async watch(): Promise<void> {
    this.controller = await new Watch(this.kc).watch(
      `/apis/${OPENREPORTS_GROUP}/v1alpha1/reports`,
      { allowWatchBookmarks: true, resourceVersion: this.rv, labelSelector: reportSelector },
      (phase, obj: Report) => {
        const t = performance.now();
        if (obj.metadata?.resourceVersion) this.rv = obj.metadata.resourceVersion;
        if (phase === 'BOOKMARK') return;
        this.events++;
        this.note(phase, obj);
        this.waiters = this.waiters.filter((w) => (w.check() ? (w.resolve(t), false) : true));
      },
      () => {
        // Ended (client inactivity, server timeout): resume from the last resourceVersion.
        if (!this.stopped) void this.watch().catch(() => setTimeout(() => void this.watch(), 500));
      },
    );
  }

  /** Every result the Reports count (their summaries, shown or omitted). */
  total(): number {
    let n = 0;
    for (const s of this.seen.values()) n += s.total;
    return n;
  }

  /** The result of object `name` in `namespace`'s Report of the followed Policy. */
  resultOf(namespace: string, name: string): string | undefined {
    return this.seen.get(`${namespace}/${this.followed}`)?.results?.get(name);
  }

  /**
   * Resolves with the arrival time of the event after which `check` holds (now, when it
   * already does), or with Infinity after `timeoutMs`.
   */
  until(check: () => boolean, timeoutMs: number): Promise<number> {
    if (check()) return Promise.resolve(performance.now());
    return new Promise((resolve) => {
      const waiter = {
        check,
        resolve: (t: number) => (clearTimeout(timer), resolve(t)),
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(Infinity);
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  stop(): void {
    this.stopped = true;
    this.controller?.abort();
  }
}

/** The Reports as stored, listed once the run is quiet: how many, how big, what they count. */
export interface ReportCensus {
  reports: number;
  /** Sum of each Report's JSON size as the apiserver returns it (managedFields included). */
  bytes: number;
  maxBytes: number;
  /** Summary counts summed over the Reports, by result. */
  summary: Record<string, number>;
  /** Results listed in the Reports (at most 1,000 each; the summary counts every one). */
  listed: number;
  /** Failures by Policy (the rollcall.dev/policy label), from the summaries. */
  failByPolicy: Record<string, number>;
  /** Results by Policy, from the summaries. */
  totalByPolicy: Record<string, number>;
}

export async function reportCensus(kc: KubeConfig): Promise<ReportCensus> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const census: ReportCensus = {
    reports: 0,
    bytes: 0,
    maxBytes: 0,
    summary: Object.fromEntries(AUDIT_RESULTS.map((r) => [r, 0])),
    listed: 0,
    failByPolicy: {},
    totalByPolicy: {},
  };
  let next: string | undefined;
  do {
    const page = (await custom.listClusterCustomObject({
      ...api,
      labelSelector: reportSelector,
      limit: 50,
      _continue: next,
    })) as { items: Report[]; metadata: { continue?: string } };
    for (const r of page.items) {
      const bytes = Buffer.byteLength(JSON.stringify(r));
      census.reports++;
      census.bytes += bytes;
      census.maxBytes = Math.max(census.maxBytes, bytes);
      for (const result of AUDIT_RESULTS) census.summary[result]! += r.summary?.[result] ?? 0;
      census.listed += r.results?.length ?? 0;
      const policy = r.metadata.labels?.[POLICY_LABEL] ?? '?';
      census.failByPolicy[policy] = (census.failByPolicy[policy] ?? 0) + (r.summary?.fail ?? 0);
      census.totalByPolicy[policy] = (census.totalByPolicy[policy] ?? 0) + summaryTotal(r.summary);
    }
    next = page.metadata.continue || undefined;
  } while (next);
  return census;
}
