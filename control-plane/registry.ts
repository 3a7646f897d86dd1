// The registry: what rollcall watches, and for whom. Each reconcile function declares the kinds
// it needs and the keys their events map to (`watches`, control-plane/functions/types.ts); the
// table below says where each kind is watched and what it is kept as. The watcher watches the
// union of the declared kinds, the projections are named here, and the RBAC tests grant the
// watcher list and watch on exactly these kinds.
//
// Adding a reconcile function:
//   1. its pure core, control-plane/functions/<name>-core.ts: current state in, a decision out;
//   2. its shell, control-plane/functions/<name>.ts, exporting a ReconcileFunction: `name` is
//      its key prefix (`<name>/<object>`), `watches` lists every kind it reads or is started
//      by (with `names` for the latter: which of its keys an event asks for), `handle` reads
//      the projections, runs the core and writes;
//   3. one line in `functions`, control-plane/functions/index.ts.
// A kind that no function watches yet also needs an entry in WATCHED_KINDS below, its
// projection in control-plane/projections/project.ts (and its reads in store.ts), and list and
// watch for the rollcall-watcher account in deploy/rbac.yaml and
// charts/rollcall/templates/rbac.yaml; test/unit/registry.test.ts fails until they agree.
//
// Here, beside roles.ts, rather than in functions/: the watcher and the projections read it
// too, and it imports nothing of theirs (only api/, lib/ and types), so every folder may import it.
import {
  API_VERSION,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  POLICY_SERVER_LABEL,
} from '../api/constants.ts';
import { groupVersionPath } from '../lib/kube/api.ts';
import type { ClusterIndex, ReconcileFunction, WatchEvent } from './functions/types.ts';

/** Where a kind is watched and what it is kept as. */
export interface WatchableKind {
  apiVersion: string;
  /** The plural resource name, in the watch's path and in RBAC rules. */
  resource: string;
  /** Watched in rollcall's namespace only; otherwise cluster-wide (a cluster-scoped kind). */
  namespaced: boolean;
  /** Only these objects are listed and watched. */
  labelSelector?: string;
  /** Listed and watched as metadata only: the apiserver never sends the rest (a Secret's data). */
  metadataOnly?: boolean;
  /**
   * Its projection (control-plane/projections/project.ts): the informer's transform, and the
   * Redis hash the objects are kept in.
   */
  projection: string;
  /**
   * A resync enqueues the keys of one object per policy server: every declared mapping of
   * this kind depends on the object's server label alone (10,000 pods of one server would
   * otherwise compute the same keys 10,000 times).
   */
  keysPerServer?: boolean;
}

/** Every kind a function may watch, in the order the watcher starts their reflectors. */
export const WATCHED_KINDS = {
  PolicyServer: {
    apiVersion: API_VERSION,
    resource: 'policyservers',
    namespaced: false,
    projection: 'policyserver',
  },
  Policy: {
    apiVersion: API_VERSION,
    resource: 'policies',
    namespaced: false,
    projection: 'policy',
  },
  // The policy servers' objects, by label.
  Deployment: {
    apiVersion: 'apps/v1',
    resource: 'deployments',
    namespaced: true,
    labelSelector: POLICY_SERVER_LABEL,
    projection: 'deployment',
  },
  ReplicaSet: {
    apiVersion: 'apps/v1',
    resource: 'replicasets',
    namespaced: true,
    labelSelector: POLICY_SERVER_LABEL,
    projection: 'replicaset',
    keysPerServer: true,
  },
  Pod: {
    apiVersion: 'v1',
    resource: 'pods',
    namespaced: true,
    labelSelector: POLICY_SERVER_LABEL,
    projection: 'pod',
    keysPerServer: true,
  },
  // rollcall's own webhooks.
  ValidatingWebhookConfiguration: {
    apiVersion: 'admissionregistration.k8s.io/v1',
    resource: 'validatingwebhookconfigurations',
    namespaced: false,
    labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}`,
    projection: 'webhook',
  },
  // Their labels decide the Policies' namespaceSelectors in the audit. The objects the audit
  // judges are watched apart, by the resources the Policies name (watcher/audited.ts).
  Namespace: {
    apiVersion: 'v1',
    resource: 'namespaces',
    namespaced: false,
    metadataOnly: true,
    projection: 'namespace',
  },
  // The webhook CA, the serving certificates and caSecretRef Secrets (cert-manager's carry no
  // label of ours, hence every Secret of the namespace). Metadata only, as the apiserver sends
  // them: private keys never reach the watcher's memory, nor Redis.
  Secret: {
    apiVersion: 'v1',
    resource: 'secrets',
    namespaced: true,
    metadataOnly: true,
    projection: 'secret',
  },
} as const satisfies Record<string, WatchableKind>;

export type WatchedKind = keyof typeof WATCHED_KINDS;
/** A projection's name: its Redis hash (`<prefix>:proj:<name>`) and its transform's. */
export type ProjectedKind = (typeof WATCHED_KINDS)[WatchedKind]['projection'];

const kindNames = Object.keys(WATCHED_KINDS) as WatchedKind[];

/** A watch the watcher runs. */
export interface WatchSpec {
  kind: WatchedKind;
  projection: ProjectedKind;
  /** The collection's API path, listed and watched. */
  path: string;
  labelSelector?: string;
  /** List and watch metadata only (WatchableKind.metadataOnly). */
  metadataOnly: boolean;
  keysPerServer: boolean;
}

/** The kinds the functions declare, in WATCHED_KINDS' order. */
export function watchedKinds(functions: readonly ReconcileFunction[]): WatchedKind[] {
  const declared = new Set(functions.flatMap((f) => f.watches.map((w) => w.kind)));
  return kindNames.filter((k) => declared.has(k));
}

/** The API group of a kind (`''` for the core group), as RBAC rules name it. */
export function apiGroupOf(kind: WatchedKind): string {
  const { apiVersion } = WATCHED_KINDS[kind];
  return apiVersion.includes('/') ? apiVersion.slice(0, apiVersion.indexOf('/')) : '';
}

/** The collection a kind is listed and watched at, in `namespace` for a namespaced kind. */
export function apiPath(kind: WatchedKind, namespace: string): string {
  const { apiVersion, resource, namespaced } = WATCHED_KINDS[kind];
  const base = groupVersionPath(apiVersion);
  return namespaced ? `${base}/namespaces/${namespace}/${resource}` : `${base}/${resource}`;
}

/** The watcher's watches: one per kind some function declares. */
export function watchList(functions: readonly ReconcileFunction[], namespace: string): WatchSpec[] {
  return watchedKinds(functions).map((kind) => {
    const spec: WatchableKind = WATCHED_KINDS[kind];
    return {
      kind,
      projection: spec.projection as ProjectedKind,
      path: apiPath(kind, namespace),
      ...(spec.labelSelector === undefined ? {} : { labelSelector: spec.labelSelector }),
      metadataOnly: spec.metadataOnly ?? false,
      keysPerServer: spec.keysPerServer ?? false,
    };
  });
}

/**
 * Every key the functions want for an event, each once: `<function>/<name>` for the names
 * their watches of the event's kind give (undefined and empty names dropped).
 */
export function keysFor(
  functions: readonly ReconcileFunction[],
  event: WatchEvent,
  index: ClusterIndex,
): string[] {
  const keys = functions.flatMap((f) =>
    f.watches
      .filter((w) => w.kind === event.kind)
      .flatMap((w) => w.names?.(event, index) ?? [])
      .filter((name): name is string => name !== undefined && name !== '')
      .map((name) => `${f.name}/${name}`),
  );
  return [...new Set(keys)];
}
