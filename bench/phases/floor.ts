// Phase 3, the fair floors. The storm's: every write it requires (one final status write and
// one Event per policy) in a tight loop with rollcall's client and concurrency, through the
// same proxy, no rate limit. A single change's: the flip's report write and then the status
// write it leads to, back to back, seen through the same watch: what any controller needs at
// least, with no watch delivery to it and no work in between.
import { KubeConfig } from '@kubernetes/client-node';
import { API_VERSION } from '../../api/constants.ts';
import { KubeWriter } from '../../functions/kube-writer.ts';
import { concurrency, type Bench } from '../context.ts';
import { percentile, pool } from '../support.ts';
import { flipReport } from './latency.ts';

export interface Floor {
  /** Status writes; as many Events were written. */
  writes: number;
  events: number;
  seconds: number;
}

export interface LatencyFloor {
  flips: number;
  p50: number;
  p99: number;
}

/** rollcall's writer, through the bench's counting proxy. */
function proxiedWriter(bench: Bench): KubeWriter {
  const kc = new KubeConfig();
  kc.loadFromFile(bench.proxy.kubeconfig);
  return new KubeWriter(kc, (write) => write());
}

export async function floor(bench: Bench): Promise<Floor> {
  const writer = proxiedWriter(bench);
  const t0 = performance.now();
  await pool(bench.stormNames, concurrency, async (n) => {
    const policy = bench.recorder.latest.get(n)!;
    const status = structuredClone(policy.status!);
    for (const c of status.conditions ?? []) c.message = `${c.message} (floor)`; // a real change, same size
    await writer.patchStatus('policies', n, status, undefined);
    const regarding = {
      apiVersion: API_VERSION,
      kind: 'Policy',
      name: n,
      uid: policy.metadata.uid,
    };
    const note = `pod ${status.failures?.[0]?.pod ?? '-'} failed to load generation ${status.observedGeneration}: x (floor)`;
    await writer.event(
      regarding,
      { type: 'Warning', reason: 'LoadFailed', action: 'Load', note },
      new Date(),
    );
  });
  const n = bench.stormNames.length;
  return { writes: n, events: n, seconds: (performance.now() - t0) / 1000 };
}

/** Each flip as phase 1 writes it, then its status written at once; timed until the watch shows it. */
export async function latencyFloor(bench: Bench): Promise<LatencyFloor> {
  const { recorder, latNames } = bench;
  const writer = proxiedWriter(bench);
  const [pod] = await bench.readyPods('lat', 3);
  const target = latNames[0]!;
  const samples: number[] = [];
  for (let i = 0; i < bench.size.flips; i++) {
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
    await writer.patchStatus('policies', target, status, undefined);
    await recorder.until(shown, 60_000, `floor flip ${i} of ${target}`);
    samples.push(seenAt - t0);
  }
  samples.sort((a, b) => a - b);
  return { flips: samples.length, p50: percentile(samples, 50), p99: percentile(samples, 99) };
}
