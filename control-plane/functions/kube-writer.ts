// Every write rollcall makes to the Kubernetes API, behind the shared write gate. Secrets
// (managed TLS) are read and written here with the API, never projected into Redis.
// Requests go through lib/kube/api.ts as plain JSON (not client-node: see its header). Errors
// are thrown as KubeApiError; the queue turns 409 into an immediate re-run, 429 into a re-run
// after Retry-After, and the rest into per-key backoff.
import { randomBytes } from 'node:crypto';
import type { V1Secret } from '@kubernetes/client-node';
import { API_VERSION, FIELD_MANAGER, REVISION_LABEL_POLICY } from '../../api/constants.ts';
import type { KubeObject } from '../../api/kube.ts';
import { policyRevisionSchema, type PolicyRevision } from '../../api/v1alpha1.ts';
import {
  groupVersionPath,
  requestJson,
  type ApiTarget,
  type RequestOptions,
} from '../../lib/kube/api.ts';
import { isConflict, isNotFound, statusCodeOf } from '../../lib/kube/errors.ts';
import type { WriteGate } from '../queue/index.ts';

/** Where rollcall's own kinds live. */
const ROLLCALL_API = groupVersionPath(API_VERSION);
const REVISIONS = `${ROLLCALL_API}/policyrevisions`;
const WEBHOOKS = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations';

/** The kinds rollcall applies (webhook-core.ts, policyserver-core.ts), by their plural resource. */
const APPLIED_RESOURCES: ReadonlyMap<string, string> = new Map([
  ['Deployment', 'deployments'],
  ['Service', 'services'],
  ['ValidatingWebhookConfiguration', 'validatingwebhookconfigurations'],
]);

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Own, and not undefined (JSON leaves an undefined value out: absent, as a missing key). */
const holds = (o: Record<string, unknown>, key: string) =>
  Object.hasOwn(o, key) && o[key] !== undefined;

/**
 * The JSON merge patch (RFC 7386) that turns `before` into `after`. A merge patch keeps the
 * fields it does not name, at any depth, so each field of `before` that `after` lacks (another
 * writer's, a served generation that ended, an audit pass not complete yet) is named with null.
 * Lists are replaced whole.
 */
export function statusPatch(before: unknown, after: object): Record<string, unknown> {
  const old = isRecord(before) ? before : {};
  const next = after as Record<string, unknown>;
  const removed = Object.keys(old)
    .filter((key) => !holds(next, key))
    .map((key) => [key, null]);
  const written = Object.keys(next)
    .filter((key) => holds(next, key))
    .map((key) => {
      const [was, value] = [holds(old, key) ? old[key] : undefined, next[key]];
      return [key, isRecord(was) && isRecord(value) ? statusPatch(was, value) : value];
    });
  // fromEntries: a key such as __proto__ stays a field, as JSON.parse would make it.
  return Object.fromEntries([...removed, ...written]);
}

/** An object's URL path: namespaced when its metadata names a namespace. */
export function objectPath(obj: KubeObject): string {
  const { apiVersion = '', kind = '', metadata } = obj;
  // A Map: a plain object would take `constructor` or `valueOf` for a kind it knows.
  const resource = APPLIED_RESOURCES.get(kind);
  if (!resource || !apiVersion || !metadata?.name)
    throw new Error(`rollcall does not apply ${kind || 'an object without a kind'}`);
  const base = groupVersionPath(apiVersion);
  const scope = metadata.namespace ? `/namespaces/${metadata.namespace}` : '';
  return `${base}${scope}/${resource}/${metadata.name}`;
}

/** A metav1.MicroTime: RFC 3339 with six fractional digits (Events' eventTime). */
export function microTime(at: Date): string {
  return at.toISOString().replace('Z', '000Z');
}

/** A Secret's path, or its namespace's collection without a name. */
function secretPath(namespace: string, name?: string): string {
  return `/api/v1/namespaces/${namespace}/secrets${name === undefined ? '' : `/${name}`}`;
}

/** Counts API requests by verb and HTTP code (for /metrics). */
export type RequestRecorder = (verb: string, code: number) => void;

export interface EventTarget {
  apiVersion: string;
  kind: string;
  name: string;
  uid?: string;
}

export interface EventToWrite {
  type: 'Normal' | 'Warning';
  reason: string;
  action: string;
  note: string;
}

/** Told of each conditional status write: the object as the apiserver answered it. */
export type StatusWritten = (
  plural: 'policies' | 'policyservers',
  written: KubeObject,
  readVersion: string,
) => Promise<void>;

export class KubeWriter {
  private readonly api: ApiTarget;
  private readonly gate: WriteGate;
  private readonly record: RequestRecorder;
  /** Where Events about cluster-scoped objects go, as client-go's recorder does. */
  private readonly eventNamespace = 'default';
  private readonly instance = `rollcall-${process.pid}`;
  private readonly statusWritten: StatusWritten | undefined;

  constructor(
    api: ApiTarget,
    gate: WriteGate,
    record: RequestRecorder = () => {},
    statusWritten?: StatusWritten,
  ) {
    this.api = api;
    this.gate = gate;
    this.record = record;
    this.statusWritten = statusWritten;
  }

  /** One request, counted; reads pass by the write gate (they are not writes). */
  private async request(
    verb: string,
    method: string,
    path: string,
    options: RequestOptions = {},
  ): Promise<unknown> {
    const call = () => requestJson(this.api, method, path, options);
    try {
      const result = await (method === 'GET' ? call() : this.gate(call));
      this.record(verb, 200);
      return result;
    } catch (err) {
      this.record(verb, statusCodeOf(err) ?? 0);
      throw err;
    }
  }

  /**
   * Replaces the status of a cluster-scoped rollcall object with `status`, with a merge patch
   * (statusPatch) that also removes what of `read`'s status `status` lacks. With `read`'s
   * resourceVersion the write is conditional: `status` was computed, and its Events chosen,
   * against that version, and `statusWritten` is told what was written. False when nothing
   * was written: the object is gone, or it changed since it was read (its watch event brings a
   * newer read).
   */
  async patchStatus(
    plural: 'policies' | 'policyservers',
    name: string,
    status: object,
    read: { metadata?: { resourceVersion?: string }; status?: object } | undefined,
  ): Promise<boolean> {
    const resourceVersion = read?.metadata?.resourceVersion;
    try {
      const written = await this.request(
        'patch',
        'PATCH',
        `${ROLLCALL_API}/${plural}/${name}/status`,
        {
          // Named, so that the watcher tells rollcall's status writes from others' (project.ts).
          query: { fieldManager: FIELD_MANAGER },
          contentType: 'application/merge-patch+json',
          body: {
            ...(resourceVersion === undefined ? {} : { metadata: { resourceVersion } }),
            status: statusPatch(read?.status, status),
          },
        },
      );
      if (resourceVersion !== undefined)
        await this.statusWritten?.(plural, written as KubeObject, resourceVersion);
      return true;
    } catch (err) {
      if (isNotFound(err) || (isConflict(err) && resourceVersion !== undefined)) return false;
      throw err;
    }
  }

  /** Server-side apply with rollcall's field manager; force takes over fields rollcall owns. */
  async apply(obj: KubeObject): Promise<void> {
    await this.request('apply', 'PATCH', objectPath(obj), {
      query: { fieldManager: FIELD_MANAGER, force: true },
      contentType: 'application/apply-patch+yaml', // JSON is YAML
      body: obj,
    });
  }

  /** Deletes a webhook configuration; one that is already gone is fine. */
  async deleteWebhook(name: string): Promise<void> {
    try {
      await this.request('delete', 'DELETE', `${WEBHOOKS}/${name}`);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  async event(regarding: EventTarget, event: EventToWrite, now: Date): Promise<void> {
    const namespace = this.eventNamespace;
    await this.request('create', 'POST', `/apis/events.k8s.io/v1/namespaces/${namespace}/events`, {
      body: {
        apiVersion: 'events.k8s.io/v1',
        kind: 'Event',
        // Named as client-go names Events: the object's name and a time-derived suffix.
        metadata: {
          name: `${regarding.name}.${now.getTime().toString(16)}${randomBytes(2).toString('hex')}`,
        },
        eventTime: microTime(now),
        reportingController: 'rollcall.dev/rollcall',
        reportingInstance: this.instance,
        regarding: {
          apiVersion: regarding.apiVersion,
          kind: regarding.kind,
          name: regarding.name,
          uid: regarding.uid,
        },
        type: event.type,
        reason: event.reason,
        action: event.action,
        note: event.note,
      },
    });
  }

  // --- Secrets (managed TLS). Reads are not rate limited (they are not writes); private keys
  // never leave the job that reads them.

  /** A Secret, or undefined when it does not exist. */
  async getSecret(namespace: string, name: string): Promise<V1Secret | undefined> {
    try {
      return (await this.request('get', 'GET', secretPath(namespace, name))) as V1Secret;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Creates a Secret; throws 409 when it already exists. */
  async createSecret(namespace: string, secret: V1Secret): Promise<void> {
    await this.request('create', 'POST', secretPath(namespace), {
      body: { apiVersion: 'v1', kind: 'Secret', ...secret },
    });
  }

  /**
   * Replaces a Secret. `secret.metadata.resourceVersion` makes it conditional: someone else's
   * write in between gives 409 and the job runs again on fresh state.
   */
  async replaceSecret(namespace: string, secret: V1Secret): Promise<void> {
    await this.request('update', 'PUT', secretPath(namespace, secret.metadata?.name ?? ''), {
      body: { apiVersion: 'v1', kind: 'Secret', ...secret },
    });
  }

  // --- PolicyRevisions (written by the webhook function before a webhook serves a generation).

  /** Creates a PolicyRevision; false when one of that name already exists (409). */
  async createRevision(revision: PolicyRevision): Promise<boolean> {
    try {
      await this.request('create', 'POST', REVISIONS, { body: revision });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /** The PolicyRevisions labelled for one Policy (any uid: a deleted namesake's too). */
  async listRevisions(policy: string): Promise<PolicyRevision[]> {
    const list = (await this.request('list', 'GET', REVISIONS, {
      query: { labelSelector: `${REVISION_LABEL_POLICY}=${policy}` },
    })) as { items?: unknown[] };
    // List items lack apiVersion and kind; an item that does not parse is not ours to judge.
    return (list.items ?? []).flatMap((item) => {
      const parsed = policyRevisionSchema.safeParse({
        ...(item as object),
        apiVersion: API_VERSION,
        kind: 'PolicyRevision',
      });
      return parsed.success ? [parsed.data] : [];
    });
  }

  /** Deletes a PolicyRevision; one that is already gone is fine. */
  async deleteRevision(name: string): Promise<void> {
    try {
      await this.request('delete', 'DELETE', `${REVISIONS}/${name}`);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}
