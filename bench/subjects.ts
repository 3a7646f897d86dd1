// The subjects the bench compares in the same run: rollcall, rollcall without coalescing, the
// controller-runtime peer (bench/peer) and a polling reconciler (bench/poller.ts); and how
// long a subject takes to go idle.
import { freePort } from '../tooling/cluster/ports.ts';
import { log, namespace, phaseTimeoutMs, queueIdle, type Bench } from './context.ts';
import { sleep, startCommand, startProcess, waitHttpOk, type Proc } from './support.ts';
import { metric } from '../test/support/prom-text.ts';

export interface Started {
  procs: Proc[];
  runs: () => Promise<number>;
  /** Nothing queued or running (from /metrics); the poller is always idle. */
  idle: () => Promise<boolean>;
  /** A rollcall process's port, whose /metrics times the stages of a change. */
  stagesPort?: number;
  /** The redis-server a rollcall subject needs (0 if not known); none for the others. */
  redisPid?: number;
  /** At most this many flips in phase 1 (default: the run's size). */
  maxFlips?: number;
}

export interface Subject {
  name: string;
  start(): Promise<Started>;
}

export function subjects(bench: Bench): Subject[] {
  let db = 0;
  const rollcall = (name: string, extra: string[]): Subject => ({
    name,
    async start() {
      const p = await bench.startRole(name, 'run', `${bench.redisUrl}/${++db}`, [
        '--install-crds',
        ...extra,
      ]);
      await waitHttpOk(p.port, '/readyz');
      return {
        procs: [p],
        runs: () => metric(p.port, 'rollcall_queue_runs_total', { function: 'policy' }),
        idle: () => queueIdle(p.port),
        stagesPort: p.port,
        redisPid: bench.redisPid,
      };
    },
  });
  const peer: Subject = {
    name: 'controller-runtime',
    async start() {
      const p = await startPeer(bench, 'peer');
      const policyMetric = (name: string) => metric(p.port, name, { controller: 'policy' });
      return {
        procs: [p],
        runs: () => policyMetric('controller_runtime_reconcile_total'),
        idle: async () =>
          (await metric(p.port, 'workqueue_depth', { name: 'policy' })) === 0 &&
          (await policyMetric('controller_runtime_active_workers')) === 0,
      };
    },
  };
  // The poller reports nothing about itself: its runs are its list passes (6 reads each, seen
  // by the proxy) times the policies each pass recomputes.
  const poller: Subject = {
    name: 'polling',
    async start() {
      const p = await startProcess('poller', 'bench/poller.ts', [namespace], {
        KUBECONFIG: bench.proxy.kubeconfig,
      });
      bench.running.add(p);
      return {
        procs: [p],
        runs: async () => (bench.proxy.snapshot().reads / 6) * bench.recorder.latest.size,
        idle: async () => true,
        // Each flip waits for a pass over every object (12–18 s at the full size): 200 of them
        // took 44 minutes, and 20 show its latency as well.
        maxFlips: 20,
      };
    },
  };
  return [rollcall('rollcall', []), rollcall('no-coalesce', ['--no-coalesce']), peer, poller];
}

/** Seconds from `since` until `idle` holds, or Infinity after the phase limit. */
export async function settle(idle: () => Promise<boolean>, since: number): Promise<number> {
  const end = performance.now() + phaseTimeoutMs;
  while (!(await idle())) {
    if (performance.now() > end) {
      log(
        `queue not idle ${phaseTimeoutMs / 1000} s after healing; measuring latency behind the backlog`,
      );
      return Infinity;
    }
    await sleep(250);
  }
  return (performance.now() - since) / 1000;
}

/**
 * The controller-runtime peer through the counting proxy, returned once its informers synced
 * (`spawned` sees it before); its /metrics is on the Proc's port.
 */
export async function startPeer(
  bench: Bench,
  name: string,
  spawned: (p: Proc) => void = () => {},
): Promise<Proc> {
  const probePort = await freePort();
  const p = await startCommand(
    name,
    bench.peerBinary,
    [
      '--namespace',
      namespace,
      '--metrics-bind-address',
      '127.0.0.1:$PORT',
      '--health-probe-bind-address',
      `127.0.0.1:${probePort}`,
    ],
    { KUBECONFIG: bench.proxy.kubeconfig },
  );
  bench.running.add(p);
  spawned(p);
  await waitHttpOk(probePort, '/readyz', 120_000);
  return p;
}
