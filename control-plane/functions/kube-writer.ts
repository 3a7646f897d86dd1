// Every write rollcall makes to the Kubernetes API, behind the shared write gate. Secrets
// (managed TLS) are read and written here with the API, never projected into Redis.
// Errors are thrown as client-node raises them; the queue turns 409 into an immediate
// re-run, 429 into a re-run after Retry-After, and the rest into per-key backoff.
import { randomBytes } from 'node:crypto';
import {
  AdmissionregistrationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  EventsV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  type KubeConfig,
  type KubernetesObject,
  type V1Secret,
} from '@kubernetes/client-node';
import {
  API_VERSION,
  FIELD_MANAGER,
  GROUP,
  REVISION_LABEL_POLICY,
  VERSION,
} from '../../api/constants.ts';
import { policyRevisionSchema, type PolicyRevision } from '../../api/v1alpha1.ts';
import { isConflict, isNotFound, statusCodeOf } from '../../lib/kube/errors.ts';
import type { WriteGate } from '../queue/index.ts';

/** Where PolicyRevisions live, for the custom-objects API. */
const REVISIONS = { group: GROUP, version: VERSION, plural: 'policyrevisions' } as const;

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

export class KubeWriter {
  private readonly custom: CustomObjectsApi;
  private readonly objects: KubernetesObjectApi;
  private readonly admission: AdmissionregistrationV1Api;
  private readonly events: EventsV1Api;
  private readonly gate: WriteGate;
  private readonly record: RequestRecorder;
  /** Where Events about cluster-scoped objects go, as client-go's recorder does. */
  private readonly eventNamespace = 'default';
  private readonly instance: string;
  private readonly core: CoreV1Api;

  constructor(
    kc: KubeConfig,
    gate: WriteGate,
    record: RequestRecorder = () => {},
    instance = `rollcall-${process.pid}`,
  ) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.admission = kc.makeApiClient(AdmissionregistrationV1Api);
    this.events = kc.makeApiClient(EventsV1Api);
    this.gate = gate;
    this.record = record;
    this.instance = instance;
    this.core = kc.makeApiClient(CoreV1Api);
  }

  private async write<T>(verb: string, call: () => Promise<T>): Promise<T> {
    try {
      const result = await this.gate(call);
      this.record(verb, 200);
      return result;
    } catch (err) {
      this.record(verb, statusCodeOf(err) ?? 0);
      throw err;
    }
  }

  /**
   * Replaces the status of a cluster-scoped rollcall object with `status`. A merge patch keeps
   * fields it does not mention, so fields of the status `read` had that `status` lacks (another
   * writer's, or a served generation that ended) are removed explicitly with null. With `read`'s
   * resourceVersion the write is conditional: `status` was computed, and its Events chosen,
   * against that version. False when nothing was written: the object is gone, or it changed
   * since it was read (its watch event brings a newer read).
   */
  async patchStatus(
    plural: 'policies' | 'policyservers',
    name: string,
    status: object,
    read: { metadata?: { resourceVersion?: string }; status?: object } | undefined,
  ): Promise<boolean> {
    const removed = Object.fromEntries(
      Object.keys(read?.status ?? {})
        .filter((k) => !(k in status))
        .map((k) => [k, null]),
    );
    const resourceVersion = read?.metadata?.resourceVersion;
    try {
      await this.write('patch', () =>
        this.custom.patchClusterCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            plural,
            name,
            // Named, so that the watcher tells rollcall's status writes from others' (project.ts).
            fieldManager: FIELD_MANAGER,
            body: {
              ...(resourceVersion === undefined ? {} : { metadata: { resourceVersion } }),
              status: { ...removed, ...status },
            },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      );
      return true;
    } catch (err) {
      if (isNotFound(err) || (isConflict(err) && resourceVersion !== undefined)) return false;
      throw err;
    }
  }

  /** Server-side apply with rollcall's field manager; force takes over fields rollcall owns. */
  apply<T extends KubernetesObject>(obj: T): Promise<T> {
    return this.write('apply', () =>
      this.objects.patch(
        obj,
        undefined,
        undefined,
        FIELD_MANAGER,
        true,
        PatchStrategy.ServerSideApply,
      ),
    );
  }

  /** Deletes a webhook configuration; one that is already gone is fine. */
  async deleteWebhook(name: string): Promise<void> {
    try {
      await this.write('delete', () =>
        this.admission.deleteValidatingWebhookConfiguration({ name }),
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  async event(regarding: EventTarget, event: EventToWrite, now: Date): Promise<void> {
    await this.write('create', () =>
      this.events.createNamespacedEvent({
        namespace: this.eventNamespace,
        body: {
          // Named as client-go names Events: the object's name and a time-derived suffix.
          metadata: {
            name: `${regarding.name}.${now.getTime().toString(16)}${randomBytes(2).toString('hex')}`,
          },
          eventTime: new V1MicroTime(now.getTime()),
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
      }),
    );
  }

  // --- Secrets (managed TLS). Reads are not rate limited (they are not writes); private keys
  // never leave the job that reads them.

  /** A Secret, or undefined when it does not exist. */
  async getSecret(namespace: string, name: string): Promise<V1Secret | undefined> {
    try {
      return await this.core.readNamespacedSecret({ namespace, name });
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Creates a Secret; throws 409 when it already exists. */
  createSecret(namespace: string, secret: V1Secret): Promise<V1Secret> {
    return this.write('create', () =>
      this.core.createNamespacedSecret({ namespace, body: secret }),
    );
  }

  /**
   * Replaces a Secret. `secret.metadata.resourceVersion` makes it conditional: someone else's
   * write in between gives 409 and the job runs again on fresh state.
   */
  replaceSecret(namespace: string, secret: V1Secret): Promise<V1Secret> {
    const name = secret.metadata?.name ?? '';
    return this.write('update', () =>
      this.core.replaceNamespacedSecret({ namespace, name, body: secret }),
    );
  }

  // --- PolicyRevisions (written by the webhook function before a webhook serves a generation).

  /** Creates a PolicyRevision; false when one of that name already exists (409). */
  async createRevision(revision: PolicyRevision): Promise<boolean> {
    try {
      await this.write('create', () =>
        this.custom.createClusterCustomObject({ ...REVISIONS, body: revision }),
      );
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /** The PolicyRevisions labelled for one Policy (any uid: a deleted namesake's too). */
  async listRevisions(policy: string): Promise<PolicyRevision[]> {
    let list: { items?: unknown[] };
    try {
      // A read: counted, but not rate limited like writes.
      list = (await this.custom.listClusterCustomObject({
        ...REVISIONS,
        labelSelector: `${REVISION_LABEL_POLICY}=${policy}`,
      })) as { items?: unknown[] };
      this.record('list', 200);
    } catch (err) {
      this.record('list', statusCodeOf(err) ?? 0);
      throw err;
    }
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
      await this.write('delete', () =>
        this.custom.deleteClusterCustomObject({ ...REVISIONS, name }),
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}
