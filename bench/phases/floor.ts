// Phase 3, the fair floor: every write the storm requires (one final status write and one
// Event per policy) in a tight loop with rollcall's client and concurrency, through the same
// proxy, no rate limit.
import { KubeConfig } from '@kubernetes/client-node';
import { API_VERSION } from '../../api/constants.ts';
import { KubeWriter } from '../../functions/kube-writer.ts';
import { concurrency, type Bench } from '../context.ts';
import { pool } from '../support.ts';

export interface Floor {
  /** Status writes; as many Events were written. */
  writes: number;
  events: number;
  seconds: number;
}

export async function floor(bench: Bench): Promise<Floor> {
  const floorKc = new KubeConfig();
  floorKc.loadFromFile(bench.proxy.kubeconfig);
  const writer = new KubeWriter(floorKc, async () => {});
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
