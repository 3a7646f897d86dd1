/**
 * Minimal, JSON-shaped views of the Kubernetes objects the pure cores read.
 *
 * These are deliberately structural and partial: the cores receive objects from
 * informers, Redis projections or YAML files, so timestamps may be strings (JSON)
 * or `Date`s (client-node), and every field the apiserver may omit is optional.
 * Only the fields a core actually reads are listed; client-node's V1Pod, V1ReplicaSet
 * and V1Deployment are assignable to them.
 */

/** A timestamp as it arrives from JSON (RFC 3339 string) or from client-node (Date). */
export type Timestamp = string | Date;

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: Timestamp;
  deletionTimestamp?: Timestamp | null;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: OwnerReference[];
  managedFields?: { manager?: string; subresource?: string }[];
}

/** The condition shape shared by metav1.Condition and the older per-kind conditions. */
export interface KubeCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: Timestamp;
  observedGeneration?: number;
}

export interface Pod {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  status?: { phase?: string; conditions?: KubeCondition[] };
}

export interface ReplicaSet {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
}

export interface Deployment {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: {
    replicas?: number;
    progressDeadlineSeconds?: number;
    template?: { spec?: { containers?: { name: string; image?: string }[] } };
  };
  status?: {
    observedGeneration?: number;
    replicas?: number;
    updatedReplicas?: number;
    readyReplicas?: number;
    availableReplicas?: number;
    conditions?: KubeCondition[];
  };
}

/** Any object as a watch or a list delivers it; client-node's KubernetesObject is assignable. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: unknown;
  status?: unknown;
  webhooks?: unknown;
}

/**
 * A ValidatingWebhookConfiguration as the cores read it: its metadata, and its webhooks only
 * to compare with the desired ones. client-node's type is assignable.
 */
export interface ExistingWebhook {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  webhooks?: unknown;
}

/** The controller owner reference of an object, if it has one. */
export function controllerOf(meta: ObjectMeta | undefined): OwnerReference | undefined {
  return meta?.ownerReferences?.find((ref) => ref.controller === true);
}

/** True when the object carries a deletionTimestamp (it is being deleted). */
export function isTerminating(meta: ObjectMeta | undefined): boolean {
  const ts = meta?.deletionTimestamp;
  return ts !== undefined && ts !== null && ts !== '';
}

/** True when the pod's Ready condition is True: the one reading of readiness every role uses. */
export function isPodReady(pod: Pick<Pod, 'status'> | undefined): boolean {
  return pod?.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}
