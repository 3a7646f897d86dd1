// `rollcall install-crds` / `run --install-crds`: applies deploy/crds for local use and waits
// until the apiserver serves them.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ApiextensionsV1Api,
  KubernetesObjectApi,
  loadAllYaml,
  PatchStrategy,
  type KubeConfig,
  type KubernetesObject,
} from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { FIELD_MANAGER } from '../api/constants.ts';

const crdDir = fileURLToPath(new URL('../deploy/crds/', import.meta.url));

/**
 * The CRDs as client-node's typed models: its serializer drops keys it does not know, so
 * plain YAML (`x-kubernetes-preserve-unknown-fields`) must be deserialized into them first.
 */
export function crdManifests(): KubernetesObject[] {
  return readdirSync(crdDir)
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
    .flatMap((f) => loadAllYaml(readFileSync(join(crdDir, f), 'utf8')) as KubernetesObject[]);
}

export async function installCrds(kc: KubeConfig, logger: Pick<Logger, 'info'>): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kc);
  const ext = kc.makeApiClient(ApiextensionsV1Api);
  for (const crd of crdManifests()) {
    await objects.patch(
      crd,
      undefined,
      undefined,
      FIELD_MANAGER,
      true,
      PatchStrategy.ServerSideApply,
    );
    const name = crd.metadata?.name ?? '';
    for (let i = 0; ; i++) {
      const live = await ext.readCustomResourceDefinition({ name });
      if (live.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'))
        break;
      if (i > 100) throw new Error(`CRD ${name} was applied but is not Established after 20 s`);
      await new Promise((r) => setTimeout(r, 200));
    }
    logger.info({ crd: name }, 'CRD installed');
  }
}
