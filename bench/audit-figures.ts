// The audit bench's figures (bench/audit.ts): what changed between two scrapes of the apiserver,
// the replicas and the workers, the shapes of the phases' results, and the printed table with
// its goals and the JSON file.
import { machineInfo, printColumns, writeResults } from './admission-cluster.ts';
import { sum, sumBy, type CpuSnapshot, type Scrape } from './admission-metrics.ts';
import type { ReportCensus } from './audit-reports.ts';
import { percentile } from './support.ts';

export interface Scrapes {
  api: Scrape;
  servers: Scrape[];
  workers: Scrape[];
  cpu: CpuSnapshot;
}

/**
 * What changed between two scrapes: API requests other than reads, evaluations, runs, CPU.
 * `own`: requests the bench itself made (its Policy creates, its pod patches), left out of
 * `otherWrites`; kwok's node and lease heartbeats are left out too.
 */
export function delta(a: Scrapes, b: Scrapes, own: Record<string, number> = {}) {
  const keys = ['verb', 'group', 'resource', 'subresource'];
  const before = sumBy(a.api, 'apiserver_request_total', keys);
  const requests: Record<string, number> = {};
  for (const [k, v] of sumBy(b.api, 'apiserver_request_total', keys)) {
    const d = v - (before.get(k) ?? 0);
    if (d > 0 && !/^(GET|LIST|WATCH)\//.test(k)) requests[k] = d;
  }
  const total = (texts: Scrape[], name: string, match: Record<string, string> = {}) =>
    texts.reduce((n, t) => n + sum(t, name, match), 0);
  const diff = (texts: [Scrape[], Scrape[]], name: string, match: Record<string, string> = {}) =>
    total(texts[1], name, match) - total(texts[0], name, match);
  const pick = (which: (k: string) => boolean) =>
    Object.entries(requests).reduce((n, [k, v]) => (which(k) ? n + v : n), 0);
  return {
    requests,
    reportWrites: pick((k) => k.split('/')[1] === 'openreports.io'),
    policyStatusWrites: pick((k) => /^[A-Z]+\/rollcall\.dev\/policies\/status$/.test(k)),
    auditBatches: pick((k) => k.endsWith('/services/proxy')),
    otherWrites:
      pick(
        (k) =>
          k.split('/')[1] !== 'openreports.io' &&
          !/^[A-Z]+\/rollcall\.dev\/policies\/status$/.test(k) &&
          !k.endsWith('/services/proxy') &&
          !/^[A-Z]+\/coordination\.k8s\.io\/leases\/$/.test(k) &&
          !/^[A-Z]+\/\/nodes\/status$/.test(k),
      ) - Object.values(own).reduce((n, v) => n + v, 0),
    own,
    /** rollcall_policy_server_audit_evaluations_total over the replicas; NaN: not exposed. */
    evaluations: b.servers.some((t) => t.includes('rollcall_policy_server_audit_evaluations_total'))
      ? diff([a.servers, b.servers], 'rollcall_policy_server_audit_evaluations_total')
      : NaN,
    auditRuns: diff([a.workers, b.workers], 'rollcall_queue_run_duration_seconds_count', {
      function: 'audit',
    }),
    summaryRuns: diff([a.workers, b.workers], 'rollcall_queue_run_duration_seconds_count', {
      function: 'audit-summary',
    }),
    workerWrites: diff([a.workers, b.workers], 'rollcall_kube_requests_total'),
    cpuSeconds: Object.fromEntries(
      Object.entries(b.cpu).map(([k, v]) => [k, +((v - (a.cpu[k] ?? 0)) / 1000).toFixed(1)]),
    ),
  };
}
export type Delta = ReturnType<typeof delta>;

/** Peak RSS in MiB of the watcher, the largest worker, the largest replica and Redis. */
export interface Memory {
  watcherMiB: number;
  workerMiB: number;
  policyServerMiB: number;
  redisMiB: number;
}

export interface Pass {
  createdS: number;
  readyS: number;
  servedS: number;
  /** Every Policy's status.audit complete at its generation: the pass. */
  auditedS: number;
  /** The Report watch counts pods × policies results. */
  reportsS: number;
  checked: number;
  failing: number;
  delta: Delta;
  memory: Memory;
}

export interface Change {
  pod: string;
  namespace: string;
  /** The result the change makes. */
  to: 'pass' | 'fail';
  patchMs: number;
  /** From the patch sent to the Report event showing the new result (Infinity: not seen). */
  reportMs: number;
  /** From the patch sent to the Policy's status.audit.failing counting it (Infinity: not seen). */
  statusMs: number;
}

export interface ChangePhase {
  samples: Change[];
  delta: Delta;
  memory: Memory;
}

/** What printReport needs of a run. */
export interface Run {
  quick: boolean;
  settings: {
    pods: number;
    namespaces: number;
    policies: number;
    replicas: number;
    workers: number;
    changes: number;
  };
  serverName: string;
  goals: { passS: number; changeP99Ms: number; watcherMiB: number; workerMiB: number };
  expected: { reports: number; results: number; fail: number };
  load0: number[];
  results: Record<string, unknown>;
  failure: string | undefined;
}

export function printReport(run: Run): void {
  const { quick, serverName, goals, expected, load0, results, failure } = run;
  const {
    pods,
    namespaces,
    policies: policyCount,
    replicas,
    workers: workerCount,
    changes,
  } = run.settings;
  const pass = results.pass as Pass | undefined;
  const census = results.census as ReportCensus | undefined;
  const phase = results.changes as ChangePhase | undefined;
  const steady = results.steady as { watcherMiB: number; workerMiB: number } | undefined;
  const fmt = (n: number | undefined, digits = 1) =>
    n === undefined ? '-' : Number.isFinite(n) ? n.toFixed(digits) : 'not seen';
  const verdict = (met: boolean | undefined) => (met === undefined ? '-' : met ? 'met' : 'missed');
  const sorted = (f: (c: Change) => number) =>
    (phase?.samples ?? [])
      .map(f)
      .filter((x) => !Number.isNaN(x))
      .sort((a, b) => a - b);
  const reportMs = sorted((c) => c.reportMs);
  const statusMs = sorted((c) => c.statusMs);
  const patchMs = sorted((c) => c.patchMs);
  const p = (xs: number[], q: number) => (xs.length ? percentile(xs, q) : undefined);
  const evalRate = pass && pass.checked / pass.auditedS;
  const metricRate = pass && pass.delta.evaluations / pass.auditedS;
  const peak = (which: 'watcherMiB' | 'workerMiB') =>
    pass ? Math.max(pass.memory[which], phase?.memory[which] ?? 0) : undefined;
  const peakWatcher = peak('watcherMiB');
  const peakWorker = peak('workerMiB');
  const MiB = 2 ** 20;

  const rows: string[][] = [
    ['figure', 'value', 'goal', 'verdict'],
    [
      'initial pass: Policies created → every status.audit complete',
      `${fmt(pass?.auditedS)} s`,
      `≤ ${goals.passS} s`,
      verdict(pass && pass.auditedS <= goals.passS),
    ],
    [
      '  of which: every Policy Ready / served',
      `${fmt(pass?.readyS)} / ${fmt(pass?.servedS)} s`,
      '',
      '',
    ],
    ['  the Report watch counts every result', `${fmt(pass?.reportsS)} s`, '', ''],
    [
      'evaluations: Σ status.audit.checked / pass',
      pass ? `${pass.checked} (${fmt(evalRate, 0)}/s)` : '-',
      '',
      '',
    ],
    [
      '  policy servers’ audit evaluations metric / pass',
      pass ? `${fmt(pass.delta.evaluations, 0)} (${fmt(metricRate, 0)}/s)` : '-',
      '',
      '',
    ],
    [
      'API writes in the pass: Reports / Policy status / other',
      pass
        ? `${pass.delta.reportWrites} / ${pass.delta.policyStatusWrites} / ${pass.delta.otherWrites}`
        : '-',
      '',
      '',
    ],
    [
      '  audit batches (service proxy), audit runs',
      pass ? `${pass.delta.auditBatches}, ${pass.delta.auditRuns}` : '-',
      '',
      '',
    ],
    [
      'Reports: count, total bytes, largest',
      census
        ? `${census.reports}, ${fmt(census.bytes / MiB)} MiB, ${fmt(census.maxBytes / 1024)} KiB`
        : '-',
      '',
      '',
    ],
    [
      'one change → its result in the Report: p50 / p99 / max',
      `${fmt(p(reportMs, 50), 0)} / ${fmt(p(reportMs, 99), 0)} / ${fmt(reportMs.at(-1), 0)} ms`,
      `p99 ≤ ${goals.changeP99Ms} ms`,
      verdict(reportMs.length ? p(reportMs, 99)! <= goals.changeP99Ms : undefined),
    ],
    [
      '  → the Policy’s status.audit.failing: p50 / p99 / max',
      `${fmt(p(statusMs, 50), 0)} / ${fmt(p(statusMs, 99), 0)} / ${fmt(statusMs.at(-1), 0)} ms`,
      '',
      '',
    ],
    [
      '  writes per change: Reports / Policy status / other',
      phase && changes
        ? `${fmt(phase.delta.reportWrites / changes, 2)} / ${fmt(phase.delta.policyStatusWrites / changes, 2)} / ${fmt(phase.delta.otherWrites / changes, 2)}`
        : '-',
      '',
      '',
    ],
    [
      'watcher RSS: after, peak',
      `${fmt(steady?.watcherMiB, 0)}, ${fmt(peakWatcher, 0)} MiB`,
      `≤ ${goals.watcherMiB} MiB`,
      verdict(steady && steady.watcherMiB <= goals.watcherMiB),
    ],
    [
      'worker RSS (largest): after, peak',
      `${fmt(steady?.workerMiB, 0)}, ${fmt(peakWorker, 0)} MiB`,
      `≤ ${goals.workerMiB} MiB`,
      verdict(steady && steady.workerMiB <= goals.workerMiB),
    ],
    [
      'policy-server replica (largest), Redis: peak RSS',
      pass ? `${fmt(pass.memory.policyServerMiB, 0)}, ${fmt(pass.memory.redisMiB, 0)} MiB` : '-',
      '',
      '',
    ],
  ];
  console.log(
    `\nrollcall audit bench (${quick ? 'quick' : 'full'}), ${new Date().toISOString()}: ${pods} pods in ${namespaces} namespaces (Running on kwok's node, created before the Policies) × ${policyCount} [Audit] Policies of inline CEL on PolicyServer ${serverName} (${replicas} real policy-server replicas); rollcall: a watcher and ${workerCount} worker(s), as deployed; ${changes} changes one at a time`,
  );
  console.log(JSON.stringify(machineInfo(load0)));
  printColumns(rows);
  console.log(
    'pass: from the first Policy create to every Policy’s status.audit.completedAt set at its generation (Policy watch); writes: the apiserver’s apiserver_request_total (not GET/LIST/WATCH) over the phase; audit runs: the workers’ rollcall_queue_run_duration_seconds_count{function="audit"}; RSS: VmRSS sampled every 200 ms, "after" once the changes are done and the queue is idle; a change: a merge patch adding or removing the pod’s team label, timed from the send to the Report watch event showing the new result of require-team-label',
  );
  if (pass) {
    console.log(`CPU seconds in the pass: ${JSON.stringify(pass.delta.cpuSeconds)}`);
    console.log(
      `apiserver writes in the pass (verb/group/resource/subresource): ${JSON.stringify(pass.delta.requests)}`,
    );
    console.log(
      `Policy status: Σ checked ${pass.checked} (expected ${expected.results}), Σ failing ${pass.failing} (expected ${expected.fail})`,
    );
  }
  if (census)
    console.log(
      `Reports: ${census.reports} (expected ${expected.reports}); summaries count ${JSON.stringify(census.summary)} (expected ${expected.results} results, ${expected.fail} fail); ${census.listed} results listed`,
    );
  if (phase) {
    console.log(`change phase CPU seconds: ${JSON.stringify(phase.delta.cpuSeconds)}`);
    console.log(`patch round trip p50 ${fmt(p(patchMs, 50), 0)} ms`);
  }
  console.log(
    'published, not measured here (other workloads and machines): Kyverno re-scans existing resources in the background every hour by default (kyverno.io docs, "Background Scans"), and its docs report 10,254 PolicyReports using 483 MB of etcd; Kubewarden’s audit scanner is a CronJob of full scans.',
  );
  if (failure) console.log(`not measured: ${failure}`);
  writeResults('audit', quick, {
    settings: run.settings,
    goals,
    expected,
    machine: machineInfo(load0),
    ...results,
    failure,
  });
}
