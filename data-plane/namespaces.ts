/**
 * The Namespaces of the cluster, for CEL's `namespaceObject` (as ValidatingAdmissionPolicy
 * provides it: the request's Namespace, null for cluster-scoped requests). A replica without
 * RBAC to list Namespaces (403) still serves: `namespaceObject` is then null, and readiness
 * says so instead of waiting forever.
 */
import type { KubernetesObject } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { statusCodeOf } from '../lib/kube/errors.ts';
import { Reflector } from '../lib/kube/reflector.ts';
import type { ApiTarget } from '../lib/kube/api.ts';

export class NamespaceCache {
  readonly #reflector: Reflector<KubernetesObject>;
  #forbidden: string | undefined;
  #lastError: string | undefined;

  constructor({ api, logger }: { api: ApiTarget; logger: Logger }) {
    this.#reflector = new Reflector<KubernetesObject>({
      api,
      path: '/api/v1/namespaces',
      onSynced: () => {
        this.#forbidden = undefined;
        this.#lastError = undefined;
      },
      metrics: {
        failed: (stage, err) => {
          if (stage !== 'list') return;
          this.#lastError = err instanceof Error ? err.message : String(err);
          if (statusCodeOf(err) === 403) this.#forbidden = this.#lastError;
        },
      },
      logger: logger.child({ watch: 'namespaces' }),
    });
  }

  start(): void {
    this.#reflector.start();
  }

  stop(): Promise<void> {
    return this.#reflector.stop();
  }

  /** The Namespace named `name`, or null (unknown, not listed yet, or no namespace). */
  get(name: string | undefined): unknown {
    return (name && this.#reflector.get(name)) || null;
  }

  /** Ready once listed, or once the list is forbidden (then namespaceObject is null). */
  readiness(): { ready: boolean; detail?: string } {
    if (this.#reflector.hasSynced()) return { ready: true };
    if (this.#forbidden)
      return {
        ready: true,
        detail: `namespaceObject is null: listing Namespaces is forbidden (${this.#forbidden})`,
      };
    return {
      ready: false,
      detail: `waiting for the first list of Namespaces${this.#lastError ? ` (last list error: ${this.#lastError})` : ''}`,
    };
  }
}
