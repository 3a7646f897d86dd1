// The figures of a bench run as a table on stdout (the same figures go to bench/out/*.json).
import { cpus } from 'node:os';
import { concurrency, phaseTimeoutMs, type Sizes } from './context.ts';
import type { Floor, LatencyFloor } from './phases/floor.ts';
import { flipTimeoutMs, type Latency } from './phases/latency.ts';

type Breakdown = NonNullable<Latency['breakdown']>;
import type { Memory } from './phases/memory.ts';
import type { FanOutRow } from './phases/fan-out.ts';
import type { ScaleOut } from './phases/scale-out.ts';
import type { Storm } from './phases/storm.ts';

export interface PerSubject {
  /** Seconds from the healing report writes until the subject's queue was empty. */
  settleS: number;
  latency: Latency;
  storm: Storm;
}

export interface Figures {
  quick: boolean;
  size: Sizes;
  machine: unknown;
  subjects: Record<string, PerSubject>;
  floor: Floor;
  /** The storm's data plane played with no subject running (phases/storm.ts). */
  stormDataPlaneS: number;
  latencyFloor: LatencyFloor;
  memory: Memory;
  scaleOut: ScaleOut[];
  fanOut: FanOutRow[];
}

/** The storm's CPU seconds of a subject's processes and, if it has one, its Redis. */
const cpuS = (x: PerSubject) =>
  x.storm.cpuS + (Number.isNaN(x.storm.redisCpuS) ? 0 : x.storm.redisCpuS);

export function printTable({
  quick,
  size,
  machine,
  subjects: s,
  floor,
  stormDataPlaneS,
  latencyFloor: lf,
  memory: m,
  scaleOut: scale,
  fanOut,
}: Figures): void {
  const floorS = floor.seconds;
  /** The storm's bound: its data plane alone, then the status writes alone. */
  const least = stormDataPlaneS + floor.statusSeconds;
  const names = Object.keys(s);
  const fmt = (v: number, d = 0) => (Number.isFinite(v) ? v.toFixed(d) : '—');
  const rows: [string, ...string[]][] = [['figure', ...names]];
  const row = (label: string, f: (x: PerSubject) => string) =>
    rows.push([label, ...names.map((n) => f(s[n]!))]);
  // A flip or storm that timed out is a figure too: "> limit".
  const ms = (v: number) => (v === Infinity ? `> ${flipTimeoutMs}` : fmt(v));
  const sec = (v: number) => (v === Infinity ? `> ${phaseTimeoutMs / 1000}` : fmt(v, 1));
  row('0 queue idle after healing s', (x) => sec(x.settleS));
  row('1 latency p50 ms', (x) => ms(x.latency.p50));
  row('1 latency p90 ms', (x) => ms(x.latency.p90));
  row('1 latency p99 ms', (x) => ms(x.latency.p99));
  row('1 latency max ms', (x) => ms(x.latency.max));
  row('1 flips', (x) => String(x.latency.flips));
  row(`1 flips not seen in ${flipTimeoutMs / 1000} s`, (x) =>
    x.latency.timeouts === 0 ? '0' : `${x.latency.timeouts} of ${x.latency.flips}`,
  );
  row('1 reconcile runs per flip', (x) => fmt(x.latency.runsPerFlip, 1));
  row('1 subject CPU ms per flip', (x) => fmt(x.latency.cpuMsPerFlip, 1));
  row('1 status writes per flip', (x) => fmt(x.latency.statusWritesPerFlip, 2));
  row('1 API status write ms (at the proxy)', (x) => fmt(x.latency.apiStatusWriteMs, 1));
  row('1 API Event write ms (at the proxy)', (x) => fmt(x.latency.apiEventMs, 1));
  row('1 API reads per flip', (x) => fmt(x.latency.readsPerFlip, 1));
  row(`2 storm convergence s (${size.storm}×3)`, (x) => sec(x.storm.convergenceS));
  row('2 … after the last report s', (x) => sec(x.storm.afterDataPlaneS));
  row('2 policies at the end state', (x) => `${x.storm.convergedPolicies}/${size.storm}`);
  row('3 convergence / floor', (x) =>
    x.storm.convergenceS === Infinity ? '—' : fmt(x.storm.convergenceS / floorS, 1) + '×',
  );
  row('3 convergence / (data plane + status writes alone)', (x) =>
    x.storm.convergenceS === Infinity ? '—' : fmt(x.storm.convergenceS / least, 2) + '×',
  );
  row('2 reconcile runs', (x) => fmt(x.storm.reconcileRuns));
  row('2 subject CPU s', (x) => fmt(x.storm.cpuS, 1));
  row('2 Redis CPU s', (x) => fmt(x.storm.redisCpuS, 1));
  row('2 CPU s, subject + its Redis', (x) => fmt(cpuS(x), 1));
  row('2 CPU ms per reconcile run', (x) => fmt((cpuS(x) * 1000) / x.storm.reconcileRuns, 2));
  row('2 status writes', (x) => fmt(x.storm.statusWrites));
  row('2 status writes per policy', (x) => fmt(x.storm.statusWrites / size.storm, 2));
  row('2 API status write ms (at the proxy)', (x) => fmt(x.storm.apiStatusWriteMs, 1));
  row('2 real status changes (watch)', (x) => fmt(x.storm.realStatusChanges));
  row('5 no-op status writes', (x) => fmt(x.storm.noopWrites));
  row('5 status writes / real change', (x) => fmt(x.storm.writesPerRealChange, 2));
  row('2 API reads (get/list)', (x) => fmt(x.storm.apiReads));
  row('2 watch starts', (x) => fmt(x.storm.watchStarts));
  row('5 API reads per event', (x) => fmt(x.storm.readsPerEvent, 2));
  row('2 Events written', (x) => fmt(x.storm.events));
  row('2 data-plane events', (x) => fmt(x.storm.dataPlaneEvents));
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(`\nrollcall bench (${quick ? 'quick' : 'full'}), ${JSON.stringify(machine)}`);
  for (const r of rows) console.log(line(r));
  console.log(
    `3 floor: ${floor.writes} status writes + ${floor.events} Events, tight loop, concurrency ${concurrency}: ${floorS.toFixed(2)} s (the status writes alone: ${floor.statusSeconds.toFixed(2)} s)`,
  );
  console.log(
    `3 storm data plane alone (no subject): ${fmt(stormDataPlaneS, 1)} s; with the status writes alone after its last report: ${fmt(least, 1)} s = ${fmt(least / floorS, 2)}× the floor, the least a controller that wrote nothing before then could take`,
  );
  console.log(
    `1 floor: ${lf.flips} flips, each report write then its status write, seen through the watch: p50 ${fmt(lf.p50)} ms, p99 ${fmt(lf.p99)} ms`,
  );
  console.log(
    `1 floor with the report seen through a pod watch before the status write (${lf.watched.flips} flips, interleaved): p50 ${fmt(lf.watched.p50)} ms, p99 ${fmt(lf.watched.p99)} ms`,
  );
  for (const n of names) {
    const b = s[n]!.latency.breakdown;
    if (b)
      console.log(
        `1 where a flip's time goes, ${n} (mean ms): ${withFloor(b, lf)
          .map((r) => `${r.stage} ${r.ms.toFixed(1)}`)
          .join(', ')}`,
      );
  }
  console.log(
    `6 memory (${m.pods} pods, ${m.policies} policies), RSS MiB: watcher ${fmt(m.loaded.watcherMiB)} (peak ${fmt(m.loaded.watcherPeakMiB)}, idle ${fmt(m.idle.watcherMiB)}); worker ${fmt(m.loaded.workerMiB)} (peak ${fmt(m.loaded.workerPeakMiB)}, idle ${fmt(m.idle.workerMiB)}); rollcall run + its Redis ${fmt(m.allInOne.runMiB + m.allInOne.redisMiB)} (${fmt(m.allInOne.runMiB)} + ${fmt(m.allInOne.redisMiB)}, of which Redis's data ${fmt(m.allInOne.redisDataMiB)}; peak ${fmt(m.allInOne.peakMiB)}); controller-runtime peer ${fmt(m.peerMiB)} (peak ${fmt(m.peerPeakMiB)}); baseline poller peak ${fmt(m.pollerPeakMiB)}`,
  );
  console.log(
    `7 worker scale-out (${cpus().length} cores): ${scale.map((x) => `${x.workers} → ${fmt(x.runsPerSecond)} runs/s`).join(', ')}`,
  );
  console.log(
    `8 fan-out, Redis commands per pod event (watcher): ${fanOut.map((r) => `${r.policies} policies on the server → ${fmt(r.commandsPerEvent, 1)} (${r.podEvents} events)`).join(', ')}`,
  );
  for (const line of goals({ subjects: s, least, latencyFloor: lf, memory: m })) console.log(line);
}

/**
 * A flip's breakdown with what the floor's watched flips spent outside any controller (the
 * report write and its pod-watch delivery, the status's Policy-watch delivery) taken out of
 * its rest: what is left is unexplained.
 */
function withFloor(breakdown: Breakdown, lf: LatencyFloor): Breakdown {
  const { reportWrite, podWatch, policyWatch } = lf.watched.segments;
  const rest = breakdown.at(-1)!.ms - reportWrite - podWatch - policyWatch;
  return [
    { stage: 'report write and pod watch (floor)', ms: reportWrite + podWatch },
    ...breakdown.slice(0, -1),
    { stage: 'Policy watch (floor)', ms: policyWatch },
    { stage: 'unexplained', ms: rest },
  ];
}

/** Issue 39's goals, each met or missed by how much, for rollcall against the peer. */
function goals({
  subjects: s,
  least,
  latencyFloor: lf,
  memory: m,
}: Pick<Figures, 'subjects' | 'latencyFloor' | 'memory'> & { least: number }): string[] {
  const mine = s.rollcall;
  const peer = s['controller-runtime'];
  if (!mine) return [];
  const verdict = (value: number, bound: number, unit: string, d = 1) =>
    value <= bound ? 'met' : `missed by ${(value - bound).toFixed(d)} ${unit}`;
  const lines: string[] = [];
  const storm = mine.storm.convergenceS;
  lines.push(
    `goal: storm ≤ 1.5 × (data plane + status writes alone) = ${(1.5 * least).toFixed(1)} s: ${verdict(storm, 1.5 * least, 's')} (${storm.toFixed(1)} s, ${(storm / least).toFixed(2)}×)`,
  );
  for (const other of ['controller-runtime', 'polling'])
    if (s[other])
      lines.push(
        `goal: storm faster than ${other}: ${verdict(storm, s[other]!.storm.convergenceS, 's')} (${storm.toFixed(1)} vs ${s[other]!.storm.convergenceS.toFixed(1)} s)`,
      );
  const cpu = cpuS(mine);
  if (peer)
    lines.push(
      `goal: storm CPU, rollcall + its Redis ≤ the peer's: ${verdict(cpu, cpuS(peer), 's')} (${cpu.toFixed(1)} vs ${cpuS(peer).toFixed(1)} s)`,
    );
  const lat = mine.latency;
  lines.push(
    `goal: single change p50 ≤ floor through a pod watch + 5 ms = ${(lf.watched.p50 + 5).toFixed(0)} ms: ${verdict(lat.p50, lf.watched.p50 + 5, 'ms', 0)} (${lat.p50.toFixed(0)} ms)`,
    `goal: single change p99 ≤ 40 ms: ${verdict(lat.p99, 40, 'ms', 0)} (${lat.p99.toFixed(0)} ms)`,
  );
  if (peer)
    lines.push(
      `goal: single change p99 no more than the peer's: ${verdict(lat.p99, peer.latency.p99, 'ms', 0)} (${lat.p99.toFixed(0)} vs ${peer.latency.p99.toFixed(0)} ms)`,
    );
  const rest = lat.breakdown && withFloor(lat.breakdown, lf).at(-1);
  if (rest)
    lines.push(
      `goal: unexplained part < 2 ms: ${verdict(rest.ms, 2, 'ms')} (${rest.ms.toFixed(1)} ms)`,
    );
  const all = m.allInOne.runMiB + m.allInOne.redisMiB;
  lines.push(
    `goal: rollcall run + its Redis ≤ the peer's RSS: ${verdict(all, m.peerMiB, 'MiB', 0)} (${all.toFixed(0)} vs ${m.peerMiB.toFixed(0)} MiB; peaks ${m.allInOne.peakMiB.toFixed(0)} vs ${m.peerPeakMiB.toFixed(0)})`,
  );
  return lines;
}
