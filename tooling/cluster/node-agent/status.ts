// The pod status the local node agent writes for a pod it runs, computed from what it knows
// about the pod's process. Pure: the agent patches the result through the status subresource.
import type { AgentContainer, AgentPod, PodCondition } from './pod.ts';

/** What the agent knows about a pod's container. */
export type ContainerPhase =
  | { state: 'waiting'; reason: string; message?: string }
  | { state: 'running'; startedAt: string; ready: boolean; pid: number };

export interface StatusInput {
  pod: AgentPod;
  container: AgentContainer;
  phase: ContainerPhase;
  podIP: string;
  /** When the agent first took the pod (status.startTime). */
  startTime: string;
  /** RFC 3339, seconds precision, as the apiserver stores timestamps. */
  now: string;
}

export interface PodStatusPatch {
  phase: 'Pending' | 'Running';
  hostIP: string;
  hostIPs: { ip: string }[];
  podIP: string;
  podIPs: { ip: string }[];
  startTime: string;
  conditions: PodCondition[];
  containerStatuses: ContainerStatus[];
}

interface ContainerStatus {
  name: string;
  image: string;
  imageID: string;
  containerID?: string;
  ready: boolean;
  started: boolean;
  restartCount: number;
  state: { running: { startedAt: string } } | { waiting: { reason: string; message?: string } };
}

/** Timestamps as the apiserver keeps them: RFC 3339 without fractions. */
export function apiTime(date: Date): string {
  return date.toISOString().replace(/\.\d+Z$/, 'Z');
}

/**
 * The status for the pod: Running with Ready following the probe, or Pending while the
 * process cannot start (a secret volume is missing, the command is not rollcall's).
 * A condition keeps its lastTransitionTime while its status stays; conditions the agent does
 * not own (set by the scheduler or others) are kept as they are.
 */
export function podStatus(input: StatusInput): PodStatusPatch {
  const { pod, container, phase, now } = input;
  const running = phase.state === 'running';
  const ready = phase.state === 'running' && phase.ready;
  const old = pod.status?.conditions ?? [];
  const condition = (
    type: string,
    status: boolean,
    reason?: string,
    message?: string,
  ): PodCondition => {
    const before = old.find((c) => c.type === type);
    const value = status ? 'True' : 'False';
    return {
      type,
      status: value,
      ...(reason ? { reason } : {}),
      ...(message ? { message } : {}),
      lastTransitionTime:
        before?.status === value && before.lastTransitionTime ? before.lastTransitionTime : now,
    };
  };
  const notReady = running
    ? {
        reason: 'ContainersNotReady',
        message: `containers with unready status: [${container.name}]`,
      }
    : { reason: 'ContainersNotReady', message: `containers not started: [${container.name}]` };
  const owned: PodCondition[] = [
    condition('Initialized', true),
    condition(
      'ContainersReady',
      ready,
      ready ? undefined : notReady.reason,
      ready ? undefined : notReady.message,
    ),
    condition(
      'Ready',
      ready,
      ready ? undefined : notReady.reason,
      ready ? undefined : notReady.message,
    ),
  ];
  const scheduled = old.find((c) => c.type === 'PodScheduled') ?? condition('PodScheduled', true);
  const others = old.filter(
    (c) => c.type !== 'PodScheduled' && !owned.some((o) => o.type === c.type),
  );

  const previous = pod.status?.containerStatuses?.find((s) => s.name === container.name);
  const restartCount =
    typeof previous?.restartCount === 'number' ? (previous.restartCount as number) : 0;
  const image = container.image ?? '';
  const containerStatus: ContainerStatus =
    phase.state === 'running'
      ? {
          name: container.name,
          image,
          imageID: `local://${image}`,
          containerID: `local://${phase.pid}`,
          ready: phase.ready,
          started: true,
          restartCount,
          state: { running: { startedAt: phase.startedAt } },
        }
      : {
          name: container.name,
          image,
          imageID: '',
          ready: false,
          started: false,
          restartCount,
          state: {
            waiting: { reason: phase.reason, ...(phase.message ? { message: phase.message } : {}) },
          },
        };

  return {
    phase: running ? 'Running' : 'Pending',
    hostIP: '127.0.0.1',
    hostIPs: [{ ip: '127.0.0.1' }],
    podIP: input.podIP,
    podIPs: [{ ip: input.podIP }],
    startTime: pod.status?.startTime ?? input.startTime,
    conditions: [scheduled, ...owned, ...others],
    containerStatuses: [containerStatus],
  };
}

/** True when writing `desired` would change what the pod's status says. */
export function statusDiffers(pod: AgentPod, desired: PodStatusPatch): boolean {
  const current = (pod.status ?? {}) as Record<string, unknown>;
  return Object.entries(desired).some(
    ([key, value]) => canonical(current[key]) !== canonical(value),
  );
}

/**
 * JSON with sorted keys and without null, undefined or empty-object fields (the apiserver
 * adds `lastProbeTime: null` and `lastState: {}`), so equal values compare equal.
 */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) return v;
    const entries = Object.entries(v as Record<string, unknown>).filter(
      ([, x]) => x !== null && !(isPlainObject(x) && Object.keys(x).length === 0),
    );
    return Object.fromEntries(entries.sort(([a], [b]) => a.localeCompare(b)));
  });
}

const isPlainObject = (x: unknown): x is object =>
  typeof x === 'object' && x !== null && !Array.isArray(x);

/**
 * A pod IP for the agent's pods: 10.244.x.y, the first one not in `used`. Nothing dials it
 * (the proxy maps addresses to local ports); controllers and EndpointSlices need one.
 */
export function nextPodIp(used: ReadonlySet<string>): string {
  for (let n = 2; n < 256 * 256 - 1; n++) {
    const ip = `10.244.${n >> 8}.${n & 255}`;
    if ((n & 255) === 0 || (n & 255) === 255) continue;
    if (!used.has(ip)) return ip;
  }
  throw new Error('no free pod IP left in 10.244.0.0/16');
}
