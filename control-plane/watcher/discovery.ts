// What the apiserver serves, for the audit's watches: every top-level resource that can be
// listed and watched, at its group's preferred version (discovery: /api/v1, /apis and each
// group's preferred version), less what is never audited (audit-match.ts isAuditable).
import { getJson, type ApiTarget } from '../../lib/kube/api.ts';
import { isAuditable, type AuditedResource } from '../functions/audit-match.ts';

interface ApiResourceList {
  resources?: { name: string; kind: string; namespaced: boolean; verbs?: string[] }[];
}
interface ApiGroupList {
  groups?: { name: string; preferredVersion?: { version: string } }[];
}

/** The listable, watchable, auditable resources of one group version's discovery document. */
export function resourcesOf(
  group: string,
  version: string,
  list: ApiResourceList,
): AuditedResource[] {
  return (list.resources ?? [])
    .filter(
      (r) =>
        !r.name.includes('/') && r.verbs?.includes('list') === true && r.verbs.includes('watch'),
    )
    .map((r) => ({ group, version, resource: r.name, kind: r.kind, namespaced: r.namespaced }))
    .filter(isAuditable);
}

/**
 * Every auditable resource the apiserver serves. A group whose discovery fails (an aggregated
 * API that is down) is left out until the next discovery; the core group must answer.
 */
export async function discoverResources(api: ApiTarget): Promise<AuditedResource[]> {
  const core = resourcesOf('', 'v1', (await getJson(api, '/api/v1', {})) as ApiResourceList);
  const { groups = [] } = (await getJson(api, '/apis', {})) as ApiGroupList;
  const others = await Promise.all(
    groups.map(async ({ name, preferredVersion }) => {
      if (!preferredVersion) return [];
      try {
        const list = await getJson(api, `/apis/${name}/${preferredVersion.version}`, {});
        return resourcesOf(name, preferredVersion.version, list as ApiResourceList);
      } catch {
        return [];
      }
    }),
  );
  return [...core, ...others.flat()];
}
