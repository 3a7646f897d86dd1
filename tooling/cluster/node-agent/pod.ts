// The local node agent's view of a pod, and how a pod becomes one local process: its command
// line, its environment and the files of its secret volumes. Pure: no I/O.
import { posix } from 'node:path';
import { z } from 'zod';

const envVarSchema = z.looseObject({
  name: z.string(),
  value: z.string().optional(),
  valueFrom: z
    .looseObject({ fieldRef: z.looseObject({ fieldPath: z.string() }).optional() })
    .optional(),
});

const probeSchema = z.looseObject({
  httpGet: z.looseObject({ path: z.string().optional(), scheme: z.string().optional() }).optional(),
  successThreshold: z.number().optional(),
  failureThreshold: z.number().optional(),
});

const containerSchema = z.looseObject({
  name: z.string(),
  image: z.string().optional(),
  command: z.array(z.string()).optional(),
  args: z.array(z.string()).optional(),
  env: z.array(envVarSchema).optional(),
  volumeMounts: z
    .array(
      z.looseObject({ name: z.string(), mountPath: z.string(), subPath: z.string().optional() }),
    )
    .optional(),
  readinessProbe: probeSchema.optional(),
});

const volumeSchema = z.looseObject({
  name: z.string(),
  secret: z
    .looseObject({
      secretName: z.string().optional(),
      optional: z.boolean().optional(),
      items: z.array(z.looseObject({ key: z.string(), path: z.string() })).optional(),
    })
    .optional(),
  emptyDir: z.looseObject({}).optional(),
});

const conditionSchema = z.looseObject({
  type: z.string(),
  status: z.string(),
  reason: z.string().optional(),
  message: z.string().optional(),
  lastTransitionTime: z.string().nullish(),
});

/** The fields of a Pod the agent reads (as the apiserver sends them: JSON, timestamps as strings). */
export const agentPodSchema = z.looseObject({
  metadata: z.looseObject({
    name: z.string(),
    namespace: z.string(),
    uid: z.string(),
    labels: z.record(z.string(), z.string()).optional(),
    ownerReferences: z
      .array(z.looseObject({ uid: z.string(), controller: z.boolean().optional() }))
      .optional(),
    deletionTimestamp: z.string().nullish(),
    deletionGracePeriodSeconds: z.number().nullish(),
  }),
  spec: z.looseObject({
    nodeName: z.string().optional(),
    serviceAccountName: z.string().optional(),
    /** The deprecated alias of serviceAccountName. */
    serviceAccount: z.string().optional(),
    automountServiceAccountToken: z.boolean().optional(),
    terminationGracePeriodSeconds: z.number().optional(),
    containers: z.array(containerSchema),
    volumes: z.array(volumeSchema).optional(),
  }),
  status: z
    .looseObject({
      phase: z.string().optional(),
      podIP: z.string().optional(),
      startTime: z.string().optional(),
      conditions: z.array(conditionSchema).optional(),
      containerStatuses: z.array(z.looseObject({ name: z.string() })).optional(),
    })
    .optional(),
});

export type AgentPod = z.infer<typeof agentPodSchema>;
export type AgentContainer = z.infer<typeof containerSchema>;
export type AgentVolume = z.infer<typeof volumeSchema>;
export type PodCondition = z.infer<typeof conditionSchema>;

/**
 * A cheap look at a raw pod before parsing it: the node's other pods (thousands in the
 * benchmarks, all kwok's) are none of the agent's business.
 */
export function podUsesImage(obj: unknown, image: string): boolean {
  const containers = (obj as { spec?: { containers?: unknown } } | undefined)?.spec?.containers;
  return (
    Array.isArray(containers) &&
    containers.some((c) => (c as { image?: unknown } | null)?.image === image)
  );
}

/** The container the agent runs: the first one with `image`; pods without one are not the agent's. */
export function agentContainer(pod: AgentPod, image: string): AgentContainer | undefined {
  return pod.spec.containers.find((c) => c.image === image);
}

export function isTerminating(pod: AgentPod): boolean {
  return !!pod.metadata.deletionTimestamp;
}

/** How long a deleted pod's process gets between SIGTERM and SIGKILL: the pod's grace, at most 10 s. */
export function terminationGraceMs(pod: AgentPod): number {
  const seconds =
    pod.metadata.deletionGracePeriodSeconds ?? pod.spec.terminationGracePeriodSeconds ?? 30;
  return Math.min(Math.max(seconds, 0), 10) * 1000;
}

/**
 * Whose crashes count together: the pod's controller (its ReplicaSet), since each crash
 * deletes the pod and the controller makes a new one; a bare pod counts alone.
 */
export function crashGroup(pod: AgentPod): string {
  const owner = pod.metadata.ownerReferences?.find((r) => r.controller);
  return owner ? `owner/${owner.uid}` : `pod/${pod.metadata.uid}`;
}

/** What the agent remembers of a crash group's crashes. */
export interface CrashRecord {
  count: number;
  lastAt: number;
}

/** Crashes further apart than this start the count again. */
const crashMemoryMs = 10 * 60_000;

/** Counts one more crash at `now`. */
export function recordCrash(previous: CrashRecord | undefined, now: number): CrashRecord {
  const fresh = !previous || now - previous.lastAt > crashMemoryMs;
  return { count: fresh ? 1 : previous.count + 1, lastAt: now };
}

/**
 * When a new process of a crash group may start: at once after its first crash (a kubelet
 * restarts at once too), then 10 s after the last crash, doubling up to 5 minutes, so a
 * process that always fails cannot make pods churn as fast as the ReplicaSet replaces them.
 */
export function crashBackoffUntil(record: CrashRecord | undefined): number {
  if (!record || record.count < 2) return 0;
  return record.lastAt + Math.min(10_000 * 2 ** (record.count - 2), 300_000);
}

/** Where the process of a pod reads a mounted volume. */
export interface MountedDir {
  mountPath: string;
  dir: string;
}

export interface ProcessSpecInput {
  pod: AgentPod;
  container: AgentContainer;
  /** The JavaScript runtime (`process.execPath`). */
  execPath: string;
  /** rollcall's entry point, `<repo>/cli/rollcall.ts`: the image's ENTRYPOINT. */
  entry: string;
  port: number;
  podIP: string;
  mounts: readonly MountedDir[];
  /**
   * The kubeconfig of the pod's own ServiceAccount token (tokens.ts), where a kubelet would
   * mount the token; none when the pod opts out (automountServiceAccountToken: false).
   */
  kubeconfig: string | undefined;
  /** PATH for the process (a container gets one from its image). */
  path?: string;
}

export interface ProcessSpec {
  command: string;
  args: string[];
  env: Record<string, string>;
}

/**
 * The command line and environment that stand in for the pod's container, or an error a
 * kubelet would show as CreateContainerConfigError.
 */
export function processSpec(input: ProcessSpecInput): ProcessSpec | { error: string } {
  const { pod, container } = input;
  const argv = rollcallArgs(container);
  if ('error' in argv) return argv;

  const fields: Record<string, string> = {
    'metadata.name': pod.metadata.name,
    'metadata.namespace': pod.metadata.namespace,
    'metadata.uid': pod.metadata.uid,
    'spec.nodeName': pod.spec.nodeName ?? '',
    'status.podIP': input.podIP,
    'status.hostIP': '127.0.0.1',
  };
  const env: Record<string, string> = { HOSTNAME: pod.metadata.name };
  if (input.path) env.PATH = input.path;
  for (const v of container.env ?? []) {
    if (v.valueFrom) {
      const path = v.valueFrom.fieldRef?.fieldPath;
      const value = path === undefined ? undefined : fields[path];
      if (value === undefined)
        return {
          error: `env ${v.name}: the local node agent supports only value and fieldRef (${Object.keys(fields).join(', ')})`,
        };
      env[v.name] = value;
    } else {
      env[v.name] = expandVars(v.value ?? '', env);
    }
  }
  // The pod's own identity: its account's token, bound to the pod. A real pod reads it from
  // the token volume the ServiceAccount admission plugin adds; the local apiserver runs
  // without that plugin, so the agent hands the process a kubeconfig that reads the token.
  if (input.kubeconfig !== undefined) env.KUBECONFIG = input.kubeconfig;

  const args = argv.args.map((a) => rewriteMountPaths(expandVars(a, env), input.mounts));
  return {
    command: input.execPath,
    args: [input.entry, ...args, '--address=127.0.0.1', `--port=${input.port}`],
    env,
  };
}

/** The image's ENTRYPOINT is `node cli/rollcall.ts`; a container may repeat it but not replace it. */
function rollcallArgs(container: AgentContainer): { args: string[] } | { error: string } {
  const args = container.args ?? [];
  const command = container.command;
  if (!command || command.length === 0) return { args };
  const entry = command.findIndex((part) => /(^|\/)rollcall(\.ts)?$/.test(part));
  if (entry === -1)
    return {
      error: `command ${JSON.stringify(command)}: the local node agent runs only rollcall's entrypoint (leave command unset)`,
    };
  return { args: [...command.slice(entry + 1), ...args] };
}

/** Kubernetes' `$(VAR)` references in args and env values; `$$(VAR)` stays literal. */
export function expandVars(text: string, env: Readonly<Record<string, string>>): string {
  return text.replace(
    /\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g,
    (match, name: string | undefined) => {
      if (name === undefined) return '$';
      return env[name] ?? match;
    },
  );
}

const pathChar = /[A-Za-z0-9._-]/;

/**
 * Rewrites each occurrence of a mount path in an argument to the directory the agent made
 * for it: `--tls-dir=/var/run/rollcall/tls` → `--tls-dir=<dir>/pods/<pod>/volumes/tls`. A
 * path counts only as a whole path component (`/var/run/rollcall/tlsx` is left alone);
 * the longest mount path wins.
 */
export function rewriteMountPaths(arg: string, mounts: readonly MountedDir[]): string {
  const sorted = [...mounts].sort((a, b) => b.mountPath.length - a.mountPath.length);
  let out = '';
  let i = 0;
  outer: while (i < arg.length) {
    for (const m of sorted) {
      const mountPath = m.mountPath.replace(/\/+$/, '') || '/';
      if (!arg.startsWith(mountPath, i)) continue;
      const before = i === 0 ? '' : arg[i - 1]!;
      const after = arg[i + mountPath.length];
      const startsPath = before === '' || !(pathChar.test(before) || before === '/');
      const endsPath = after === undefined || after === '/' || !pathChar.test(after);
      if (startsPath && endsPath) {
        out += m.dir;
        i += mountPath.length;
        continue outer;
      }
    }
    out += arg[i];
    i++;
  }
  return out;
}

/** A file of a materialized secret volume: its path inside the volume and its bytes. */
export interface VolumeFile {
  path: string;
  content: Buffer;
}

/**
 * The files a secret volume holds for `data` (the Secret's base64 data): every key, or only
 * `items` at their paths. An error (a missing key, an unsafe path) means the volume cannot
 * be mounted, as for a kubelet.
 */
export function secretVolumeFiles(
  volume: AgentVolume,
  data: Readonly<Record<string, string>>,
): VolumeFile[] | { error: string } {
  const name = volume.secret?.secretName ?? '';
  const items = volume.secret?.items ?? Object.keys(data).map((key) => ({ key, path: key }));
  const files: VolumeFile[] = [];
  for (const item of items) {
    const value = data[item.key];
    if (value === undefined) return { error: `secret "${name}" has no key "${item.key}"` };
    const normalized = posix.normalize(item.path);
    if (
      posix.isAbsolute(item.path) ||
      normalized.startsWith('..') ||
      normalized.split('/').some((part) => part.startsWith('..'))
    )
      return { error: `secret "${name}" item path "${item.path}" must be relative, without ..` };
    files.push({ path: normalized, content: Buffer.from(value, 'base64') });
  }
  return files.sort((a, b) => a.path.localeCompare(b.path));
}

/** The readiness probe as the agent runs it: an HTTP(S) GET every second on the process's port. */
export interface ProbeSpec {
  path: string;
  https: boolean;
  successThreshold: number;
  failureThreshold: number;
}

/** The container's readinessProbe, or HTTPS `/readyz` (the policy server's) when it has none. */
export function readinessProbe(container: AgentContainer): ProbeSpec {
  const probe = container.readinessProbe;
  return {
    path: probe?.httpGet?.path ?? '/readyz',
    https: (probe?.httpGet?.scheme ?? 'HTTPS').toUpperCase() === 'HTTPS',
    successThreshold: Math.max(probe?.successThreshold ?? 1, 1),
    failureThreshold: Math.max(probe?.failureThreshold ?? 3, 1),
  };
}
