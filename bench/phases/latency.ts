// Phase 1, single-change latency: one replica's report flips one policy between Failed and
// Loaded; each flip is timed until the Policy's status shows it (seen through a watch).
import { parsePrometheusText, sumOf } from '../../test/support/prom-text.ts';
import { log, type Bench } from '../context.ts';
import type { Started } from '../subjects.ts';
import { cpuSeconds, diffCounts, percentile } from '../support.ts';

/** A flip not seen in this long counts as timed out; after `maxTimeouts` the subject is saturated. */
export const flipTimeoutMs = 60_000;
const maxTimeouts = 3;

export interface Latency {
  /** Flips written and flips whose result was never seen within flipTimeoutMs. */
  flips: number;
  timeouts: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  runsPerFlip: number;
  /** CPU time of the subject's processes per flip (ms). */
  cpuMsPerFlip: number;
  statusWritesPerFlip: number;
  /** Mean time of a status write and of an Event at the proxy: the apiserver's part. */
  apiStatusWriteMs: number;
  apiEventMs: number;
  readsPerFlip: number;
  /** Mean ms per stage (rollcall's /metrics), and the rest of the mean latency. */
  breakdown?: { stage: string; ms: number }[];
}

/**
 * The stages of a flip that rollcall times itself: the watcher's handling of the pod event,
 * the job's wait for a worker, and the policy run's read, compute and write.
 */
const stages = [
  ['watcher queue', 'rollcall_watcher_event_seconds', { resource: 'pod', stage: 'queued' }],
  ['projection', 'rollcall_watcher_event_seconds', { resource: 'pod', stage: 'projection' }],
  ['enqueue', 'rollcall_watcher_event_seconds', { resource: 'pod', stage: 'enqueue' }],
  ['pickup', 'rollcall_queue_pickup_seconds', { function: 'policy' }],
  ['read', 'rollcall_function_stage_seconds', { function: 'policy', stage: 'read' }],
  ['compute', 'rollcall_function_stage_seconds', { function: 'policy', stage: 'compute' }],
  ['write', 'rollcall_function_stage_seconds', { function: 'policy', stage: 'write' }],
] as const;

type StageTotals = { sum: number; count: number }[];

async function stageTotals(port: number): Promise<StageTotals> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, {
    signal: AbortSignal.timeout(5000),
  });
  const families = parsePrometheusText(await res.text());
  return stages.map(([, name, labels]) => ({
    sum: sumOf(families, `${name}_sum`, labels),
    count: sumOf(families, `${name}_count`, labels),
  }));
}

/** Mean ms of each stage between two scrapes; what the stages leave of `meanMs` is the rest. */
function breakdownOf(a: StageTotals, b: StageTotals, meanMs: number): Latency['breakdown'] {
  const rows = stages.map(([stage], i) => {
    const count = b[i]!.count - a[i]!.count;
    return { stage, ms: count > 0 ? ((b[i]!.sum - a[i]!.sum) / count) * 1000 : 0 };
  });
  const timed = rows.reduce((n, r) => n + r.ms, 0);
  return [...rows, { stage: 'rest: watch deliveries, queue bookkeeping', ms: meanMs - timed }];
}

/**
 * Flip i's report from one replica: even flips fail the target policy (`lat-000`) with the
 * message `flip i`, odd ones load it again. The single change's floor writes the same flips.
 */
export function flipReport(bench: Bench, i: number) {
  const { latNames, generation } = bench;
  const failing = i % 2 === 0;
  const message = `flip ${i}`;
  const json = bench.report(
    latNames,
    generation.lat,
    'Loaded',
    failing ? { [latNames[0]!]: { generation: generation.lat, state: 'Failed', message } } : {},
  );
  return { failing, message, json };
}

/** A subject with a `stagesPort` (rollcall) also gets the breakdown of the stages. */
export async function latency(bench: Bench, subject: Started): Promise<Latency> {
  const { proxy, recorder, latNames } = bench;
  const { runs, stagesPort: metricsPort } = subject;
  const cpu = () => cpuSeconds(subject.procs.map((p) => p.child.pid));
  const cpu0 = cpu();
  const [pod] = await bench.readyPods('lat', 3);
  const target = latNames[0]!;
  const c0 = proxy.snapshot();
  const r0 = await runs();
  const s0 = metricsPort === undefined ? undefined : await stageTotals(metricsPort);
  const samples: number[] = [];
  let flips = 0;
  let timeouts = 0;
  for (let i = 0; i < Math.min(bench.size.flips, subject.maxFlips ?? Infinity); i++) {
    const { failing, message, json } = flipReport(bench, i);
    let seenAt = 0;
    const shown = () => {
      const s = recorder.latest.get(target)?.status;
      const ok = failing
        ? (s?.failures?.some((f) => f.message === message) ?? false)
        : s?.summary === 'Ready' && s.failedReplicas === 0;
      if (ok && seenAt === 0) seenAt = performance.now();
      return ok;
    };
    const t0 = performance.now();
    await bench.writeReport(pod!, json);
    flips++;
    try {
      await recorder.until(shown, flipTimeoutMs, `flip ${i} of ${target}`);
      samples.push(seenAt - t0);
    } catch (err) {
      log(`${(err as Error).message}; counted as > ${flipTimeoutMs / 1000} s`);
      samples.push(Infinity);
      if (++timeouts === maxTimeouts) break;
    }
  }
  const c = diffCounts(c0, proxy.snapshot());
  const runsDone = (await runs()) - r0;
  samples.sort((a, b) => a - b);
  const seen = samples.filter(Number.isFinite);
  const meanMs = seen.reduce((n, v) => n + v, 0) / seen.length;
  const breakdown =
    s0 && metricsPort !== undefined
      ? breakdownOf(s0, await stageTotals(metricsPort), meanMs)
      : undefined;
  return {
    breakdown,
    flips,
    timeouts,
    p50: percentile(samples, 50),
    p90: percentile(samples, 90),
    p99: percentile(samples, 99),
    max: samples.at(-1)!,
    runsPerFlip: runsDone / flips,
    cpuMsPerFlip: ((cpu() - cpu0) * 1000) / flips,
    statusWritesPerFlip: c.policyStatusWrites / flips,
    apiStatusWriteMs: c.policyStatusWriteMs / c.policyStatusWrites,
    apiEventMs: c.eventMs / c.events,
    readsPerFlip: c.reads / flips,
  };
}
