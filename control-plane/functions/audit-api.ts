// The audit function's calls to the apiserver: read the objects to judge, send them to a policy
// server through the apiserver's service proxy (the route the webhooks take), and write the
// Reports. Writes pass the run's write gate, as every API write of rollcall does.
import {
  auditProxyPath,
  OPENREPORTS_API_VERSION,
  type AuditRequest,
  type AuditResponse,
  type OpenReport,
} from '../../api/audit.ts';
import { FIELD_MANAGER, MANAGED_BY, MANAGED_BY_LABEL } from '../../api/constants.ts';
import { requestJson, type ApiTarget } from '../../lib/kube/api.ts';
import { isConflict, isNotFound } from '../../lib/kube/errors.ts';
import type { WriteGate } from '../queue/index.ts';
import type { KubeObjectJson } from './audit-core.ts';
import { apiVersionOf, collectionPath, type AuditedResource } from './audit-match.ts';
import { policyServerResourceName } from './policyserver-core.ts';

/**
 * Up to this many objects of a resource to judge are read one LIST by name each (a
 * fieldSelector: the audit reader may list, never get, docs/security.md); above it, one
 * paged LIST of the namespace costs less.
 */
const BY_NAME_AT_MOST = 20;
const PAGE = 500;

const reportsPath = (kind: OpenReport['kind'], namespace: string | undefined) =>
  kind === 'ClusterReport'
    ? `/apis/${OPENREPORTS_API_VERSION}/clusterreports`
    : `/apis/${OPENREPORTS_API_VERSION}/namespaces/${namespace}/reports`;

export class AuditApi {
  private readonly api: ApiTarget;
  private readonly gate: WriteGate;
  /** rollcall's namespace: the policy servers' Services. */
  private readonly namespace: string;

  constructor(api: ApiTarget, gate: WriteGate, namespace: string) {
    this.api = api;
    this.gate = gate;
    this.namespace = namespace;
  }

  /**
   * The objects named `names` of `r` in `namespace` (undefined: cluster-scoped), as they are
   * now, handed to `use` a page at a time; objects gone meanwhile are left out.
   */
  async read(
    r: AuditedResource,
    namespace: string | undefined,
    names: ReadonlySet<string>,
    use: (objects: KubeObjectJson[]) => Promise<void>,
  ): Promise<void> {
    const path = collectionPath(r, namespace);
    const typed = (o: KubeObjectJson): KubeObjectJson => ({
      ...o,
      apiVersion: apiVersionOf(r),
      kind: r.kind,
    });
    if (names.size <= BY_NAME_AT_MOST) {
      const found = await Promise.all(
        [...names].map(async (name) => {
          const list = (await requestJson(this.api, 'GET', path, {
            query: { fieldSelector: `metadata.name=${name}` },
          })) as { items?: KubeObjectJson[] };
          return (list.items ?? []).map(typed);
        }),
      );
      const objects = found.flat();
      if (objects.length > 0) await use(objects);
      return;
    }
    let next: string | undefined;
    do {
      const page = (await requestJson(this.api, 'GET', path, {
        query: { limit: PAGE, continue: next },
      })) as { items?: KubeObjectJson[]; metadata?: { continue?: string } };
      const objects = (page.items ?? []).filter((o) => names.has(o.metadata.name)).map(typed);
      if (objects.length > 0) await use(objects);
      next = page.metadata?.continue || undefined;
    } while (next);
  }

  /** Has a replica of `server` judge the batch (an answer other than 2xx throws). */
  async judge(server: string, request: AuditRequest): Promise<AuditResponse> {
    const path = auditProxyPath(this.namespace, policyServerResourceName(server));
    const answer = (await requestJson(this.api, 'POST', path, { body: request })) as AuditResponse;
    if (!Array.isArray(answer?.results) || answer.results.length !== request.items.length)
      throw new Error(`policy server ${server} answered the audit batch with a malformed response`);
    return answer;
  }

  /**
   * Writes a Report whole: server-side apply (no read first, no conflict), or a create when it
   * is `absent` as far as the run knows (the apiserver spends about a fifth less CPU on a
   * create of a large Report than on an apply, bench/RESULTS.md); a create that finds it there
   * applies.
   */
  async write(report: OpenReport, absent: boolean): Promise<void> {
    const { kind, metadata } = report;
    const collection = reportsPath(kind, metadata.namespace);
    if (absent) {
      try {
        await this.gate(() =>
          requestJson(this.api, 'POST', collection, {
            query: { fieldManager: FIELD_MANAGER },
            body: report,
          }),
        );
        return;
      } catch (err) {
        if (!isConflict(err)) throw err;
      }
    }
    await this.gate(() =>
      requestJson(this.api, 'PATCH', `${collection}/${encodeURIComponent(metadata.name)}`, {
        query: { fieldManager: FIELD_MANAGER, force: true },
        body: report,
        contentType: 'application/apply-patch+yaml',
      }),
    );
  }

  async remove(
    kind: OpenReport['kind'],
    namespace: string | undefined,
    name: string,
  ): Promise<void> {
    try {
      await this.gate(() =>
        requestJson(
          this.api,
          'DELETE',
          `${reportsPath(kind, namespace)}/${encodeURIComponent(name)}`,
        ),
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  /** The names of the Reports rollcall wrote in `namespace` (undefined: the ClusterReports). */
  async reportNames(kind: OpenReport['kind'], namespace: string | undefined): Promise<string[]> {
    const list = (await requestJson(this.api, 'GET', reportsPath(kind, namespace), {
      query: { labelSelector: `${MANAGED_BY_LABEL}=${MANAGED_BY}` },
    })) as { items?: { metadata: { name: string } }[] };
    return (list.items ?? []).map((i) => i.metadata.name);
  }
}
