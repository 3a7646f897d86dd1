// Every write rollcall makes to the Kubernetes API, behind the shared write rate limit.
// Errors are thrown as client-node raises them; the queue turns 409 into an immediate
// re-run, 429 into a re-run after Retry-After, and the rest into per-key backoff.
import { randomBytes } from 'node:crypto';
import {
  AdmissionregistrationV1Api,
  CustomObjectsApi,
  EventsV1Api,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import { FIELD_MANAGER, GROUP, VERSION } from '../api/constants.ts';

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

const codeOf = (err: unknown): number => {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? code : 0;
};

export class KubeWriter {
  private readonly custom: CustomObjectsApi;
  private readonly objects: KubernetesObjectApi;
  private readonly admission: AdmissionregistrationV1Api;
  private readonly events: EventsV1Api;
  private readonly acquire: () => Promise<void>;
  private readonly record: RequestRecorder;
  /** Where Events about cluster-scoped objects go, as client-go's recorder does. */
  private readonly eventNamespace = 'default';
  private readonly instance: string;

  constructor(
    kc: KubeConfig,
    acquireWriteToken: () => Promise<void>,
    record: RequestRecorder = () => {},
    instance = `rollcall-${process.pid}`,
  ) {
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.objects = KubernetesObjectApi.makeApiClient(kc);
    this.admission = kc.makeApiClient(AdmissionregistrationV1Api);
    this.events = kc.makeApiClient(EventsV1Api);
    this.acquire = acquireWriteToken;
    this.record = record;
    this.instance = instance;
  }

  private async write<T>(verb: string, call: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      const result = await call();
      this.record(verb, 200);
      return result;
    } catch (err) {
      this.record(verb, codeOf(err));
      throw err;
    }
  }

  /** Merge-patches the status subresource of a cluster-scoped rollcall object. */
  /**
   * Replaces the status of a cluster-scoped rollcall object with `status`. A merge patch keeps
   * fields it does not mention, so fields of `previous` that `status` lacks (another writer's,
   * or a served generation that ended) are removed explicitly with null. False when the object
   * is gone.
   */
  async patchStatus(
    plural: 'policies' | 'policyservers',
    name: string,
    status: object,
    previous: object | undefined,
  ): Promise<boolean> {
    const removed = Object.fromEntries(
      Object.keys(previous ?? {})
        .filter((k) => !(k in status))
        .map((k) => [k, null]),
    );
    try {
      await this.write('patch', () =>
        this.custom.patchClusterCustomObjectStatus(
          {
            group: GROUP,
            version: VERSION,
            plural,
            name,
            body: { status: { ...removed, ...status } },
          },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
      );
      return true;
    } catch (err) {
      // Deleted since the projection was read: there is no status left to write.
      if (codeOf(err) === 404) return false;
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
      if (codeOf(err) !== 404) throw err;
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
}
