// What a watched object becomes: its compact projection, as the watcher's informers keep it
// and the Redis store (store.ts) writes it. Pure: an object in, the fields the cores read out.
// Which kinds are projected, and under which names, is the registry's (control-plane/registry.ts).
import {
  APPLIED_HASH_ANNOTATION,
  FIELD_MANAGER,
  POLICY_SERVER_LABEL,
  REPORT_ANNOTATION,
} from '../../api/constants.ts';
import type { Deployment, KubeObject, ObjectMeta, Pod } from '../../api/kube.ts';
import { readReplicaReport, type ReportReading } from '../../api/report.ts';
import { WATCHED_KINDS, type ProjectedKind } from '../registry.ts';

/**
 * A pod as projected: what the cores read, and its report read once, when the watcher saw
 * the pod change (the annotation itself is not kept).
 */
export interface ProjectedPod extends Pod {
  report: ReportReading;
}

/** The metadata the cores read; `annotations` lists the annotations kept (all if omitted). */
function meta(m: ObjectMeta | undefined, annotations?: string[]): ObjectMeta {
  const kept =
    annotations && m?.annotations
      ? Object.fromEntries(
          annotations.flatMap((a) =>
            m.annotations?.[a] !== undefined ? [[a, m.annotations[a]]] : [],
          ),
        )
      : m?.annotations;
  const none = kept !== undefined && Object.keys(kept).length === 0;
  return {
    name: m?.name,
    namespace: m?.namespace,
    uid: m?.uid,
    generation: m?.generation,
    resourceVersion: m?.resourceVersion,
    creationTimestamp: m?.creationTimestamp,
    deletionTimestamp: m?.deletionTimestamp ?? undefined,
    labels: m?.labels,
    annotations: none ? undefined : kept,
    ownerReferences: m?.ownerReferences,
  };
}

/**
 * True when a manager other than rollcall owns a field of the status (its managedFields): a
 * status rollcall did not write all of, which its policy function must look at again.
 */
function statusByOthers(m: ObjectMeta | undefined): boolean {
  return (m?.managedFields ?? []).some(
    (f) => f.subresource === 'status' && f.manager !== FIELD_MANAGER,
  );
}

/** apiVersion and kind per projection (the registry's): list responses leave them out of their items. */
const typeMeta = Object.fromEntries(
  Object.entries(WATCHED_KINDS).map(([kind, { apiVersion, projection }]) => [
    projection,
    { apiVersion, kind },
  ]),
) as Record<ProjectedKind, { apiVersion: string; kind: string }>;

/**
 * Keeps only what the cores read: the projections stay small (a pod is a few hundred bytes
 * plus its report's entries). The store writes what this returns, as the watcher's informers
 * keep it; it is not idempotent (a pod's report is read from its annotation, then dropped).
 */
export function compact(kind: ProjectedKind, obj: KubeObject): object {
  return { ...typeMeta[kind], ...compactBody(kind, obj) };
}

/** `compact` of a pod, typed. */
export function projectPod(pod: KubeObject): ProjectedPod {
  return compact('pod', pod) as ProjectedPod;
}

function compactBody(kind: ProjectedKind, obj: KubeObject): object {
  switch (kind) {
    case 'policy':
      // Parsed with its zod schema when read (which drops `statusByOthers`): kept whole.
      return {
        metadata: meta(obj.metadata),
        spec: obj.spec,
        status: obj.status,
        statusByOthers: statusByOthers(obj.metadata),
      };
    case 'policyserver':
      return { metadata: meta(obj.metadata), spec: obj.spec, status: obj.status };
    case 'deployment': {
      const { spec, status } = obj as Deployment;
      return {
        metadata: meta(obj.metadata, [APPLIED_HASH_ANNOTATION]),
        spec: {
          replicas: spec?.replicas,
          progressDeadlineSeconds: spec?.progressDeadlineSeconds,
          template: {
            spec: {
              containers: spec?.template?.spec?.containers?.map((c) => ({
                name: c.name,
                image: c.image,
              })),
            },
          },
        },
        status,
      };
    }
    case 'replicaset':
      return { metadata: meta(obj.metadata, []) };
    case 'pod': {
      const { status } = obj as Pod;
      const pod: Omit<ProjectedPod, 'apiVersion' | 'kind'> = {
        metadata: meta(obj.metadata, []),
        status: { conditions: status?.conditions?.filter((c) => c.type === 'Ready') },
        report: readReplicaReport(obj.metadata?.annotations?.[REPORT_ANNOTATION]),
      };
      return pod;
    }
    case 'webhook':
      return { metadata: meta(obj.metadata), webhooks: obj.webhooks };
    case 'namespace': {
      const { name, labels } = obj.metadata ?? {};
      return { metadata: { name, labels } };
    }
    case 'secret': {
      // Metadata only: a Secret's data (private keys) never reaches Redis.
      const { name, namespace, resourceVersion, labels } = obj.metadata ?? {};
      return { metadata: { name, namespace, resourceVersion, labels } };
    }
  }
}

/** The projection hash a pod belongs to: its policy server's, by label. */
export function podServer(pod: KubeObject): string | undefined {
  return pod.metadata?.labels?.[POLICY_SERVER_LABEL];
}

/** The server an object is filed under: a pod's by label, a Policy's by spec.policyServer. */
export function serverOf(kind: ProjectedKind, obj: KubeObject): string | undefined {
  if (kind === 'pod') return podServer(obj);
  if (kind === 'policy') return (obj.spec as { policyServer?: string } | undefined)?.policyServer;
  return undefined;
}
