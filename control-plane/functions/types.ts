// What a reconcile function is: the kinds it watches with the keys their events map to, and a
// handler that re-reads current state for one key and returns an outcome. Adding one: its pure
// core (<name>-core.ts), its shell (<name>.ts, exporting a ReconcileFunction) and a line in
// control-plane/functions/index.ts; a kind nobody watched before also needs an entry in
// control-plane/registry.ts (its checklist says what else).
import type { Logger } from 'pino';
import type { HandlerContext, Outcome } from '../queue/index.ts';
import type { ApiTarget } from '../../lib/kube/api.ts';
import type { AuditStore } from '../projections/audit-store.ts';
import type { ProjectionStore } from '../projections/store.ts';
import type { WatchedKind } from '../registry.ts';
import type { EventRecorder } from './event-recorder.ts';
import type { KubeWriter } from './kube-writer.ts';
import type { PolicyServerGuard } from './policyserver-guard.ts';

export interface WatchedObject {
  metadata?: { name?: string; labels?: Record<string, string> };
  spec?: unknown;
}

export interface WatchEvent {
  kind: WatchedKind;
  /** `resync` asks for every key an object implies, without a change. */
  type: 'added' | 'modified' | 'deleted' | 'resync';
  object: WatchedObject;
  /** The previous version, on `modified`. */
  old?: WatchedObject;
}

/** What the watcher knows that a key mapping may need: which Policies use a server. */
export interface ClusterIndex {
  policiesOfServer(server: string): string[];
  /** The PolicyServers whose TLS reads this Secret of rollcall's namespace. */
  serversUsingSecret?(secret: string): string[];
  /** The namespaces holding objects the audit watches (CLUSTER_SCOPE: the cluster-scoped ones). */
  auditedNamespaces?(): string[];
}

/** Settings every function shares. */
export interface FunctionConfig {
  /** rollcall's namespace: policy servers live here and every webhook excludes it. */
  namespace: string;
  /** Out-of-cluster development: register webhooks by this base URL instead of the Service. */
  webhookUrl?: string;
  /** CA bundle (base64 PEM) for webhooks registered by URL. */
  webhookCaBundle?: string;
  /**
   * Namespaces every webhook excludes besides `namespace` (which it always excludes); default
   * DEFAULT_PROTECTED_NAMESPACES (kube-system, kube-node-lease).
   */
  protectedNamespaces?: readonly string[];
  // Policy-server image and rollcall-managed TLS (defaults in control-plane/config.ts).
  /** Image of PolicyServers without spec.image; default DEFAULT_POLICY_SERVER_IMAGE. */
  policyServerImage?: string;
  /** Validity of the webhook CA rollcall creates; default 5 years. */
  caValidityMs?: number;
  /** Validity of each serving certificate rollcall issues; default 1 year. */
  servingCertValidityMs?: number;
  /** Time for a new CA bundle or certificate to reach the API server and the pods; default 3 min. */
  tlsPropagationDelayMs?: number;
  /** What a PolicyServer may name (policyserver-guard.ts); default its defaults. */
  policyServerGuard?: PolicyServerGuard;
}

/** Where a run spends its time (rollcall_function_stage_seconds, the bench's latency breakdown). */
export type FunctionStage = 'read' | 'compute' | 'write';

export interface FunctionContext extends HandlerContext {
  store: ProjectionStore;
  /** The audit's objects and results (audit-store.ts). */
  audit: AuditStore;
  kube: KubeWriter;
  /** The apiserver, for requests KubeWriter does not make (the audit's reads and Reports). */
  api: ApiTarget;
  /** Policy Events, written in the background (event-recorder.ts). */
  events: EventRecorder;
  config: FunctionConfig;
  now(): Date;
  log: Logger;
  /** Enqueues keys in bulk (a fan-out: one round trip per few hundred keys). */
  enqueue(keys: readonly string[]): Promise<void>;
  /** Runs `fn` and records its time as that stage of this function's run. */
  timed<T>(stage: FunctionStage, fn: () => T | Promise<T>): Promise<T>;
}

/** A kind a function needs, and which of its keys an event of that kind asks for. */
export interface Watch {
  kind: WatchedKind;
  /**
   * The names of this function's keys the event asks for (the registry makes them
   * `<function>/<name>`, dropping undefined and empty names, each once). Absent: the function
   * reads this kind's projection, but its events never start the function.
   */
  names?(event: WatchEvent, index: ClusterIndex): readonly (string | undefined)[];
}

export interface ReconcileFunction {
  /** The key prefix: `policy` handles `policy/<name>`. */
  name: string;
  /** Every kind the function reads or is started by: the watcher watches their union. */
  watches: readonly Watch[];
  handle(name: string, ctx: FunctionContext): Promise<Outcome | void>;
}

export const nameOf = (o: WatchedObject | undefined): string | undefined => o?.metadata?.name;
