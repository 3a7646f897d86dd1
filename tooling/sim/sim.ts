// `rollcall sim`: the simulated policy-server data plane for the local cluster (dev tooling).
// For every Ready pod of a PolicyServer it writes the `rollcall.dev/policies` report the
// way a real policy server would, driven by each policy's `module` (see behaviour.ts).
import {
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type KubernetesObject,
  type V1Pod,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import { isPodReady, isTerminating } from '../../api/kube.ts';
import { encodeReplicaReport, readReplicaReport, type ReportEntry } from '../../api/report.ts';
import { actionsOf, type ValidationAction } from '../../api/v1alpha1.ts';
import { Reflector } from '../../lib/kube/reflector.ts';
import { kubeConfigTarget } from '../../lib/kube/api.ts';
import type { AdmissionPolicy } from './admission.ts';
import { reportEntry } from './behaviour.ts';

export interface SimOptions {
  kc: KubeConfig;
  namespace: string;
  logger: Logger;
}

const retryWriteMs = 1_000;

/**
 * The report a pod should publish now, and when to look again (a slow module still loading).
 * `since` remembers when this pod began loading each policy generation.
 */
export function simulatedReport(
  pod: string,
  policies: readonly SimPolicyObject[],
  previous: Record<string, ReportEntry>,
  since: Map<string, number>,
  now: number,
): { report: Record<string, ReportEntry>; recheckAt?: number } {
  const report: Record<string, ReportEntry> = {};
  let recheckAt: number | undefined;
  for (const p of policies) {
    const { name, uid } = p.metadata;
    const generation = p.metadata.generation ?? 1;
    // Only sim:// modules are the simulator's; CEL policies are a real server's business.
    if (uid === undefined || p.spec.module === undefined) continue;
    const sinceKey = `${pod}/${name}/${generation}`;
    if (!since.has(sinceKey)) since.set(sinceKey, now);
    const result = reportEntry(
      pod,
      { name, uid, generation, module: p.spec.module },
      previous[name],
      since.get(sinceKey)!,
      now,
    );
    if (!result) continue;
    report[name] = result.entry;
    if (result.recheckAt !== undefined)
      recheckAt = Math.min(recheckAt ?? Infinity, result.recheckAt);
  }
  return { report, ...(recheckAt === undefined ? {} : { recheckAt }) };
}

/** The part of a Policy the simulator reads, as the watch delivers it. */
export type SimPolicyObject = KubernetesObject & {
  metadata: { name: string; uid?: string; generation?: number };
  spec: {
    policyServer: string;
    module?: string;
    mode?: 'protect' | 'monitor';
    validationActions?: ValidationAction[];
  };
};

export class Simulator {
  private readonly options: SimOptions;
  private readonly core: CoreV1Api;
  private readonly pods: Reflector<V1Pod>;
  private readonly policies: Reflector<SimPolicyObject>;
  private readonly since = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private pending: Promise<void> = Promise.resolve();

  constructor(options: SimOptions) {
    this.options = options;
    this.core = options.kc.makeApiClient(CoreV1Api);
    const sync = () => this.schedule();
    this.pods = new Reflector<V1Pod>({
      api: kubeConfigTarget(options.kc),
      path: `/api/v1/namespaces/${options.namespace}/pods`,
      labelSelector: POLICY_SERVER_LABEL,
      onAdd: sync,
      onUpdate: sync,
      onSynced: sync,
      logger: options.logger,
    });
    this.policies = new Reflector<SimPolicyObject>({
      api: kubeConfigTarget(options.kc),
      path: '/apis/rollcall.dev/v1alpha1/policies',
      onAdd: sync,
      onUpdate: sync,
      onDelete: sync,
      onSynced: sync,
      logger: options.logger,
    });
  }

  start(): void {
    this.pods.start();
    this.policies.start();
  }

  /** A policy as the simulator's watch sees it (the admission server asks this). */
  policy(name: string): AdmissionPolicy | undefined {
    const p = this.policies.get(name);
    if (p?.spec.module === undefined) return undefined;
    const { mode = 'protect', validationActions } = p.spec; // the watch's object: no defaults
    return { module: p.spec.module, actions: actionsOf({ mode, validationActions }) };
  }

  async stop(): Promise<void> {
    clearTimeout(this.timer);
    await Promise.all([this.pods.stop(), this.policies.stop()]);
    await this.pending;
  }

  /** Runs one pass after the current one; passes never overlap. */
  private schedule(): void {
    this.pending = this.pending
      .then(() => this.pass())
      .catch((err: unknown) => this.options.logger.warn({ err }, 'sim pass failed'));
  }

  private async pass(): Promise<void> {
    if (!this.pods.hasSynced() || !this.policies.hasSynced()) return;
    const now = Date.now();
    let next: number | undefined;
    const byServer = new Map<string, SimPolicyObject[]>();
    for (const p of this.policies.list()) {
      const list = byServer.get(p.spec.policyServer) ?? [];
      list.push(p);
      byServer.set(p.spec.policyServer, list);
    }
    for (const pod of this.pods.list()) {
      const server = pod.metadata?.labels?.[POLICY_SERVER_LABEL];
      const name = pod.metadata?.name;
      if (!server || !name || !isPodReady(pod) || isTerminating(pod.metadata)) continue;
      const current = pod.metadata?.annotations?.[REPORT_ANNOTATION];
      const reading = readReplicaReport(current);
      const previous = reading.kind === 'valid' ? reading.report : {};
      const { report, recheckAt } = simulatedReport(
        name,
        byServer.get(server) ?? [],
        previous,
        this.since,
        now,
      );
      if (recheckAt !== undefined) next = Math.min(next ?? Infinity, recheckAt);
      const serialized = encodeReplicaReport(report);
      if (serialized === current) continue;
      await this.core
        .patchNamespacedPod(
          {
            name,
            namespace: this.options.namespace,
            body: { metadata: { annotations: { [REPORT_ANNOTATION]: serialized } } },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        )
        .catch((err: unknown) => {
          // A real server retries its report until it lands (report-publisher.ts); so does the
          // simulator, or a pod whose write met a restarting apiserver would never report.
          this.options.logger.warn({ err, pod: name }, 'could not write report; retrying in 1 s');
          next = Math.min(next ?? Infinity, Date.now() + retryWriteMs);
        });
    }
    clearTimeout(this.timer);
    if (next !== undefined)
      this.timer = setTimeout(() => this.schedule(), Math.max(10, next - Date.now()));
  }
}
