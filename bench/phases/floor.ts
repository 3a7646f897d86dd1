// Phase 3, the fair floors. The storm's: every write it requires (one final status write and
// one Event per policy) in a tight loop with rollcall's client and concurrency, through the
// same proxy, no rate limit; then the status writes alone once more. A single change's: the
// flip's report write and then the status write it leads to, back to back, seen through the
// same watch: what any controller needs at least, with no watch delivery to it and no work in
// between; and, interleaved with it, the same with the status write sent only once a watch of
// the pod shows the report: what a controller that learns of the report from a watch needs.
import { KubeConfig, Watch, type V1Pod } from '@kubernetes/client-node';
import { API_VERSION, REPORT_ANNOTATION } from '../../api/constants.ts';
import { KubeWriter } from '../../control-plane/functions/kube-writer.ts';
import { loadApiTarget } from '../../lib/kube/api.ts';
import { concurrency, namespace, type Bench } from '../context.ts';
import { percentile, pool } from '../support.ts';
import { flipReport } from './latency.ts';

export interface Floor {
  /** Status writes; as many Events were written. */
  writes: number;
  events: number;
  seconds: number;
  /** The status writes alone, once more in a pass of their own: what convergence waits for. */
  statusSeconds: number;
}

export interface LatencyFloor {
  flips: number;
  p50: number;
  p99: number;
  /** The same, each status write sent once a watch of the pod shows its report. */
  watched: { flips: number; p50: number; p99: number; segments: FloorSegments };
}

/**
 * Means of the watched flips' parts (ms): the report write, its delivery by the pod watch,
 * the status write, and its delivery by the Policy watch. A controller pays all but the
 * status write (its own write stage) on top of its own work: the latency breakdown subtracts
 * them before it calls anything unexplained.
 */
export interface FloorSegments {
  reportWrite: number;
  podWatch: number;
  statusWrite: number;
  policyWatch: number;
}

/** rollcall's writer, through the bench's counting proxy. */
async function proxiedWriter(bench: Bench): Promise<KubeWriter> {
  return new KubeWriter(await loadApiTarget(bench.proxy.kubeconfig), (write) => write());
}

export async function floor(bench: Bench): Promise<Floor> {
  const writer = await proxiedWriter(bench);
  /** Writes the Policy's status with each message marked: a real change of about the same size. */
  const writeStatus = async (n: string, mark: string) => {
    const status = structuredClone(bench.recorder.latest.get(n)!.status!);
    for (const c of status.conditions ?? []) c.message = `${c.message} (${mark})`;
    await writer.patchStatus('policies', n, status, undefined);
    return status;
  };
  const t0 = performance.now();
  await pool(bench.stormNames, concurrency, async (n) => {
    const uid = bench.recorder.latest.get(n)!.metadata.uid;
    const status = await writeStatus(n, 'floor');
    const regarding = { apiVersion: API_VERSION, kind: 'Policy', name: n, uid };
    const note = `pod ${status.failures?.[0]?.pod ?? '-'} failed to load generation ${status.observedGeneration}: x (floor)`;
    await writer.event(
      regarding,
      { type: 'Warning', reason: 'LoadFailed', action: 'Load', note },
      new Date(),
    );
  });
  const seconds = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  await pool(bench.stormNames, concurrency, (n) => writeStatus(n, 'statuses alone'));
  const n = bench.stormNames.length;
  return { writes: n, events: n, seconds, statusSeconds: (performance.now() - t1) / 1000 };
}

/**
 * Each flip as phase 1 writes it, then its status written at once (`direct`) or once a watch
 * of the pod shows the report (`watched`); timed until the Policy watch shows the status. The
 * two alternate every two flips, so that each write changes the report and drift hits both.
 */
export async function latencyFloor(bench: Bench): Promise<LatencyFloor> {
  const { recorder, latNames } = bench;
  const writer = await proxiedWriter(bench);
  const [pod] = await bench.readyPods('lat', 3);
  const target = latNames[0]!;
  const podWatch = await watchReport(bench.kc, pod!);
  const direct: number[] = [];
  const watched: number[] = [];
  const segments: FloorSegments[] = [];
  try {
    for (let i = 0; i < 2 * bench.size.flips; i++) {
      const throughWatch = ((i >> 1) & 1) === 1;
      const { json } = flipReport(bench, i);
      const status = structuredClone(recorder.latest.get(target)!.status!);
      const mark = `(floor ${i})`;
      for (const c of status.conditions ?? [])
        c.message = `${(c.message ?? '').split(' (floor')[0]} ${mark}`;
      let seenAt = 0;
      const shown = () => {
        const seen = recorder.latest.get(target)?.status?.conditions?.[0]?.message?.endsWith(mark);
        if (seen && seenAt === 0) seenAt = performance.now();
        return seen ?? false;
      };
      const t0 = performance.now();
      await bench.writeReport(pod!, json);
      const written = performance.now();
      if (throughWatch) await podWatch.until(json, `floor flip ${i}: the pod watch`);
      const delivered = performance.now();
      await writer.patchStatus('policies', target, status, undefined);
      const statusWritten = performance.now();
      await recorder.until(shown, 60_000, `floor flip ${i} of ${target}`);
      (throughWatch ? watched : direct).push(seenAt - t0);
      if (throughWatch)
        segments.push({
          reportWrite: written - t0,
          podWatch: delivered - written,
          statusWrite: statusWritten - delivered,
          policyWatch: seenAt - statusWritten,
        });
    }
  } finally {
    podWatch.stop();
  }
  const figures = (samples: number[]) => {
    samples.sort((a, b) => a - b);
    return { flips: samples.length, p50: percentile(samples, 50), p99: percentile(samples, 99) };
  };
  const mean = (part: keyof FloorSegments) =>
    segments.reduce((n, s) => n + s[part], 0) / segments.length;
  return {
    ...figures(direct),
    watched: {
      ...figures(watched),
      segments: {
        reportWrite: mean('reportWrite'),
        podWatch: mean('podWatch'),
        statusWrite: mean('statusWrite'),
        policyWatch: mean('policyWatch'),
      },
    },
  };
}

/** A watch of one pod's report annotation, from the bench's own connection. */
async function watchReport(kc: KubeConfig, pod: string) {
  let report: string | undefined;
  let waiter: { json: string; resolve(): void } | undefined;
  let stopped = false;
  let controller: AbortController | undefined;
  const start = async (): Promise<void> => {
    controller = await new Watch(kc).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      { fieldSelector: `metadata.name=${pod}`, allowWatchBookmarks: true },
      (_phase, obj: V1Pod) => {
        report = obj.metadata?.annotations?.[REPORT_ANNOTATION] ?? report;
        if (waiter && waiter.json === report) waiter.resolve();
      },
      () => {
        if (!stopped) void start().catch(() => setTimeout(() => void start(), 500));
      },
    );
  };
  await start();
  return {
    /** Resolves once the watch has shown `json`. */
    until(json: string, what: string): Promise<void> {
      if (report === json) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`timed out after 60 s waiting for ${what}`)),
          60_000,
        );
        waiter = { json, resolve: () => (clearTimeout(timer), (waiter = undefined), resolve()) };
      });
    },
    stop() {
      stopped = true;
      controller?.abort();
    },
  };
}
