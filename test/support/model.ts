// The model: what DESIGN.md's decision table says the cluster must look like once rollcall
// has converged, computed from what the scenario driver did — never from rollcall's code.
//
// The driver keeps every PolicyServer at ≥ 1 replica and every module either sim://ok or
// sim://fail, so at convergence each server has `replicas` Ready pods and every pod reports
// every policy of its server at its current generation: ok → Loaded, fail → Failed.

/** One Policy as the driver last wrote it. */
export interface ModelPolicy {
  server: string;
  generation: number;
  /** undefined: the module loads (sim://ok); a string: it fails with this message. */
  failMessage: string | undefined;
  /** The resources of its one rule, per generation (a webhook must serve one of these). */
  resourcesByGeneration: Map<number, string[]>;
  /** Generations whose module loads: the only ones a webhook may ever serve. */
  okGenerations: Set<number>;
}

export interface Model {
  servers: Map<string, { replicas: number }>;
  policies: Map<string, ModelPolicy>;
}

export const emptyModel = (): Model => ({ servers: new Map(), policies: new Map() });

/** The parts of the live objects the model is compared against. */
export interface Observed {
  policies: Map<string, PolicyLike>;
  servers: Map<string, PolicyLike>;
  /** Webhook `rollcall-<policy>` by policy name. */
  webhooks: Map<string, WebhookLike>;
}

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
export interface PolicyLike {
  metadata: { name?: string; generation?: number };
  status?: {
    observedGeneration?: number;
    ready?: string;
    readyReplicas?: number;
    failedReplicas?: number;
    failures?: { pod: string; message: string }[];
    servedGeneration?: number;
    conditions?: Condition[];
  };
}
export interface WebhookLike {
  metadata?: { annotations?: Record<string, string> };
  webhooks?: { rules?: { resources?: string[] }[] }[];
}

const cond = (o: PolicyLike, type: string) => o.status?.conditions?.find((c) => c.type === type);

/** kstatus summary from the conditions: Ready, Stalled, Reconciling, or what is wrong with them. */
function summary(o: PolicyLike): string {
  const ready = cond(o, 'Ready')?.status;
  const stalled = cond(o, 'Stalled')?.status === 'True';
  const reconciling = cond(o, 'Reconciling')?.status === 'True';
  if (stalled && reconciling) return 'Stalled+Reconciling (never both)';
  if (ready === 'True') return stalled || reconciling ? 'Ready with Stalled/Reconciling' : 'Ready';
  if (ready !== 'False') return `Ready=${ready ?? 'missing'}`;
  return stalled ? 'Stalled' : reconciling ? 'Reconciling' : 'NotReady without reason';
}

/** Every difference between the model and the cluster, one line each; empty when they agree. */
export function diff(model: Model, seen: Observed): string[] {
  const out: string[] = [];
  const expect = (what: string, want: unknown, got: unknown) => {
    if (JSON.stringify(want) !== JSON.stringify(got))
      out.push(`${what}: want ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  };

  for (const [name, want] of model.servers) {
    const s = seen.servers.get(name);
    if (!s) {
      out.push(`policyserver/${name}: missing`);
      continue;
    }
    expect(
      `policyserver/${name} observedGeneration`,
      s.metadata.generation,
      s.status?.observedGeneration,
    );
    expect(`policyserver/${name} status`, 'Ready', summary(s));
    expect(`policyserver/${name} ready`, `${want.replicas}/${want.replicas}`, s.status?.ready);
  }

  for (const [name, p] of model.policies) {
    const o = seen.policies.get(name);
    const at = `policy/${name}`;
    if (!o) {
      out.push(`${at}: missing`);
      continue;
    }
    const n = model.servers.get(p.server)?.replicas ?? 0;
    const hook = seen.webhooks.get(name);
    const served = hook?.metadata?.annotations?.['rollcall.dev/served-generation'];
    expect(`${at} generation`, p.generation, o.metadata.generation);
    expect(`${at} observedGeneration`, p.generation, o.status?.observedGeneration);
    if (p.failMessage === undefined) {
      // Loaded on every Ready pod, at least the desired number: Ready, webhook serves current rules.
      expect(`${at} status`, 'Ready', summary(o));
      expect(`${at} ready`, `${n}/${n}`, o.status?.ready);
      expect(`${at} failedReplicas`, 0, o.status?.failedReplicas ?? 0);
      expect(`${at} webhook served generation`, String(p.generation), served);
      expect(`${at} status.servedGeneration`, p.generation, o.status?.servedGeneration);
    } else {
      // Failed on every replica: Stalled, naming the error; the webhook keeps a loadable
      // generation it already served, or is absent.
      expect(`${at} status`, 'Stalled', summary(o));
      expect(`${at} Stalled reason`, 'LoadFailed', cond(o, 'Stalled')?.reason);
      expect(`${at} ready`, `0/${n}`, o.status?.ready);
      expect(`${at} failedReplicas`, n, o.status?.failedReplicas);
      expect(
        `${at} failure messages`,
        Array(Math.min(n, 10)).fill(p.failMessage),
        o.status?.failures?.map((f) => f.message),
      );
      if (!(cond(o, 'Ready')?.message ?? '').includes(p.failMessage))
        out.push(`${at} Ready message does not name the error ${JSON.stringify(p.failMessage)}`);
      if (served !== undefined && !p.okGenerations.has(Number(served)))
        out.push(
          `${at} webhook serves generation ${served}, which never loaded (loadable: ${[...p.okGenerations].join(',') || 'none'})`,
        );
      expect(
        `${at} status.servedGeneration`,
        served === undefined ? undefined : Number(served),
        o.status?.servedGeneration,
      );
    }
    if (served !== undefined)
      expect(
        `${at} webhook resources`,
        p.resourcesByGeneration.get(Number(served)),
        hook?.webhooks?.[0]?.rules?.[0]?.resources,
      );
  }

  for (const name of seen.policies.keys())
    if (!model.policies.has(name)) out.push(`policy/${name}: exists but was deleted`);
  for (const name of seen.webhooks.keys())
    if (!model.policies.has(name))
      out.push(`webhook rollcall-${name}: exists but its policy was deleted`);
  return out;
}
