// `rollcall install-crds` / `run --install-crds`: installs deploy/crds for local use and waits
// until the apiserver serves them. rollcall's own CRDs (rollcall.dev) are server-side applied, so
// a new rollcall brings its new schema. OpenReports' (openreports.io Report and ClusterReport,
// where the audit writes) are only created when absent: Kyverno, Kubewarden or the OpenReports
// chart may own them, and another owner's definition is never overwritten.
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
import { FIELD_MANAGER, GROUP } from '../api/constants.ts';
import { isConflict, isNotFound } from '../lib/kube/errors.ts';

const crdDir = fileURLToPath(new URL('../deploy/crds/', import.meta.url));

type Crd = KubernetesObject & { spec?: { group?: string } };

/**
 * The CRDs as client-node's typed models: its serializer drops keys it does not know, so
 * plain YAML (`x-kubernetes-preserve-unknown-fields`) must be deserialized into them first.
 */
export function crdManifests(): Crd[] {
  return readdirSync(crdDir)
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
    .flatMap((f) => loadAllYaml(readFileSync(join(crdDir, f), 'utf8')) as Crd[]);
}

/** rollcall's own CRDs are kept as rollcall defines them; any other group's only made to exist. */
export function installMode(crd: Crd): 'apply' | 'create-if-absent' {
  return crd.spec?.group === GROUP ? 'apply' : 'create-if-absent';
}

export async function installCrds(kc: KubeConfig, logger: Pick<Logger, 'info'>): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kc);
  const ext = kc.makeApiClient(ApiextensionsV1Api);
  for (const crd of crdManifests()) {
    const name = crd.metadata?.name ?? '';
    let outcome: 'applied' | 'created' | 'already present';
    if (installMode(crd) === 'apply') {
      await objects.patch(
        crd,
        undefined,
        undefined,
        FIELD_MANAGER,
        true,
        PatchStrategy.ServerSideApply,
      );
      outcome = 'applied';
    } else {
      outcome = await createIfAbsent(objects, ext, crd, name);
    }
    await waitEstablished(ext, name);
    logger.info({ crd: name, outcome }, 'CRD installed');
  }
}

/** Creates the CRD unless one of that name exists (or appears meanwhile); never changes one. */
async function createIfAbsent(
  objects: KubernetesObjectApi,
  ext: ApiextensionsV1Api,
  crd: Crd,
  name: string,
): Promise<'created' | 'already present'> {
  try {
    await ext.readCustomResourceDefinition({ name });
    return 'already present';
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
  try {
    await objects.create(crd, undefined, undefined, FIELD_MANAGER);
    return 'created';
  } catch (err) {
    if (isConflict(err)) return 'already present'; // another installer was quicker
    throw err;
  }
}

async function waitEstablished(ext: ApiextensionsV1Api, name: string): Promise<void> {
  for (let i = 0; ; i++) {
    const live = await ext.readCustomResourceDefinition({ name });
    if (live.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True'))
      return;
    if (i > 100) throw new Error(`CRD ${name} was installed but is not Established after 20 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
