/**
 * An AdmissionReview v1 as the apiserver would send it for one object: the kind and resource
 * (kinds.ts), the namespace (`default` for a namespaced object that names none, as kubectl's
 * default context; a Namespace's own name for a Namespace), the operation with its options
 * kind, the user, and `object`/`oldObject` (a DELETE carries the object as `oldObject`).
 */
import { randomUUID } from 'node:crypto';
import { InputError, isRecord } from './documents.ts';
import { resolveKind, splitApiVersion, type KindResource, type ResolvedKind } from './kinds.ts';
import type { RequestAttributes } from './match.ts';

export const OPERATIONS = ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'] as const;
export type Operation = (typeof OPERATIONS)[number];

export const isOperation = (v: unknown): v is Operation =>
  typeof v === 'string' && (OPERATIONS as readonly string[]).includes(v);

/** The namespace of a namespaced object that names none. */
export const DEFAULT_NAMESPACE = 'default';

/** Who makes the request unless told otherwise. */
export const DEFAULT_USER = { username: 'rollcall-author', groups: ['system:authenticated'] };

const OPTIONS_KIND: Partial<Record<Operation, string>> = {
  CREATE: 'CreateOptions',
  UPDATE: 'UpdateOptions',
  DELETE: 'DeleteOptions',
};

export interface RequestSpec {
  operation: Operation;
  /** The object as sent (CREATE, UPDATE, CONNECT) or deleted (DELETE). */
  object: Record<string, unknown>;
  /** UPDATE: the object before (default: the object itself, an update that changes nothing). */
  oldObject?: Record<string, unknown> | undefined;
  user?: { username: string; groups: readonly string[] };
  subresource?: string;
  /** Kinds declared by the author (a suite's `kinds`, eval's `--resource`). */
  kinds?: readonly KindResource[];
}

export interface BuiltRequest {
  /** AdmissionReview v1 `request`. */
  request: Record<string, unknown> & { uid: string };
  attributes: RequestAttributes;
  kind: ResolvedKind;
}

/** `{apiVersion, kind, name, namespace}` of an object, or InputError saying what is missing. */
export function identity(object: Record<string, unknown>, label: string) {
  const { apiVersion, kind, metadata } = object;
  if (typeof apiVersion !== 'string' || apiVersion === '')
    throw new InputError(`${label}: apiVersion is missing`);
  if (typeof kind !== 'string' || kind === '') throw new InputError(`${label}: kind is missing`);
  const meta = isRecord(metadata) ? metadata : {};
  const name = typeof meta.name === 'string' ? meta.name : '';
  const generateName = typeof meta.generateName === 'string' ? meta.generateName : '';
  if (name === '' && generateName === '')
    throw new InputError(`${label}: metadata.name is missing`);
  const namespace = typeof meta.namespace === 'string' ? meta.namespace : '';
  return { apiVersion, kind, name, namespace };
}

export const refOf = (kind: string, namespace: string, name: string) =>
  namespace ? `${kind}/${namespace}/${name}` : `${kind}/${name}`;

/** The request for `spec`; throws InputError for an object that is not a Kubernetes object. */
export function buildRequest(spec: RequestSpec, label = 'the object'): BuiltRequest {
  const id = identity(spec.object, label);
  const { group, version } = splitApiVersion(id.apiVersion);
  const kind = resolveKind(group, id.kind, id.namespace !== '', spec.kinds);
  const isNamespace = group === '' && kind.resource === 'namespaces';
  const namespace = isNamespace
    ? id.name
    : kind.scope === 'Namespaced'
      ? id.namespace || DEFAULT_NAMESPACE
      : '';
  // The apiserver fills in the namespace of the path before admission.
  const withNamespace = (o: Record<string, unknown>) =>
    kind.scope === 'Namespaced' && !isNamespace
      ? { ...o, metadata: { ...(isRecord(o.metadata) ? o.metadata : {}), namespace } }
      : o;
  const current = withNamespace(spec.object);
  const before =
    spec.operation === 'UPDATE' ? withNamespace(spec.oldObject ?? spec.object) : undefined;
  const object = spec.operation === 'DELETE' ? null : current;
  const oldObject =
    spec.operation === 'DELETE' ? current : spec.operation === 'UPDATE' ? before : null;
  const subresource = spec.subresource ?? '';
  const user = spec.user ?? DEFAULT_USER;
  const optionsKind = OPTIONS_KIND[spec.operation];
  const request = {
    uid: randomUUID(),
    kind: { group, version, kind: id.kind },
    resource: { group, version, resource: kind.resource },
    ...(subresource ? { subResource: subresource } : {}),
    requestKind: { group, version, kind: id.kind },
    requestResource: { group, version, resource: kind.resource },
    ...(subresource ? { requestSubResource: subresource } : {}),
    name: id.name,
    ...(namespace ? { namespace } : {}),
    operation: spec.operation,
    userInfo: { username: user.username, groups: [...user.groups] },
    object,
    oldObject: oldObject ?? null,
    dryRun: false,
    ...(optionsKind ? { options: { apiVersion: 'meta.k8s.io/v1', kind: optionsKind } } : {}),
  };
  return {
    request,
    attributes: {
      operation: spec.operation,
      group,
      version,
      resource: kind.resource,
      subresource,
      namespace,
      object,
      oldObject: oldObject ?? null,
    },
    kind,
  };
}

/** The attributes of a request read from an AdmissionReview (eval --review). */
export function attributesOfReview(request: Record<string, unknown>): RequestAttributes {
  const str = (v: unknown) => (typeof v === 'string' ? v : '');
  const resource = isRecord(request.resource) ? request.resource : {};
  return {
    operation: str(request.operation),
    group: str(resource.group),
    version: str(resource.version),
    resource: str(resource.resource),
    subresource: str(request.subResource),
    namespace: str(request.namespace),
    object: request.object ?? null,
    oldObject: request.oldObject ?? null,
  };
}

/**
 * A Namespace as the apiserver stores it: with the `kubernetes.io/metadata.name` label it sets
 * on every Namespace (a file's Namespace usually leaves it out).
 */
export function storedNamespace(namespace: Record<string, unknown>): Record<string, unknown> {
  const metadata = isRecord(namespace.metadata) ? namespace.metadata : {};
  const name = typeof metadata.name === 'string' ? metadata.name : '';
  const labels = isRecord(metadata.labels) ? metadata.labels : {};
  return {
    ...namespace,
    metadata: { ...metadata, labels: { ...labels, 'kubernetes.io/metadata.name': name } },
  };
}

/** A Namespace as the apiserver keeps one that nobody labelled: only its name label. */
export function bareNamespace(name: string): Record<string, unknown> {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, labels: { 'kubernetes.io/metadata.name': name } },
  };
}
