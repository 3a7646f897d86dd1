// The kubelet's volumes: a pod's volume mounts as local directories. A secret volume's files
// are written the way a kubelet writes them and rewritten when the Secret changes; any other
// volume is an empty directory. The Secrets come from one reflector per namespace that the
// agent's pods live in.
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { KubernetesObject } from '@kubernetes/client-node';
import type { ApiTarget } from '../../../lib/kube/api.ts';
import { Reflector, type ReflectorLogger } from '../../../lib/kube/reflector.ts';
import {
  secretVolumeFiles,
  type AgentContainer,
  type AgentPod,
  type MountedDir,
  type VolumeFile,
} from './pod.ts';

export interface SecretVolumesOptions {
  api: ApiTarget;
  logger: ReflectorLogger;
  log: (line: string) => void;
  /** A Secret of `namespace` changed; with no name, the namespace's Secrets were listed. */
  onChange: (namespace: string, name: string | undefined) => void;
}

/** A pod whose volumes are mounted. */
export interface MountingPod {
  /** `<namespace>/<name>`, for the log. */
  key: string;
  pod: AgentPod;
  container: AgentContainer;
  /** Digest of each mounted volume's files, so that an unchanged Secret is not rewritten. */
  volumes: Map<string, string>;
}

/** Why a container cannot start yet, as its waiting state says. */
export interface NotMounted {
  reason: string;
  message: string;
}

export class SecretVolumes {
  readonly #o: SecretVolumesOptions;
  readonly #secrets = new Map<string, Reflector<KubernetesObject>>();

  constructor(options: SecretVolumesOptions) {
    this.#o = options;
  }

  /** The Secret reflector of a namespace, started on first use. */
  watch(namespace: string): Reflector<KubernetesObject> {
    let reflector = this.#secrets.get(namespace);
    if (reflector) return reflector;
    const changed = (obj: KubernetesObject) => this.#o.onChange(namespace, obj.metadata?.name);
    reflector = new Reflector({
      api: this.#o.api,
      path: `/api/v1/namespaces/${namespace}/secrets`,
      logger: this.#o.logger,
      onAdd: changed,
      onUpdate: (_old, obj) => changed(obj),
      onSynced: () => this.#o.onChange(namespace, undefined),
    });
    this.#secrets.set(namespace, reflector);
    reflector.start();
    return reflector;
  }

  /** Stops a namespace's Secret reflector (none of the agent's pods lives there any more). */
  release(namespace: string): void {
    const reflector = this.#secrets.get(namespace);
    this.#secrets.delete(namespace);
    void reflector?.stop();
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#secrets.values()].map((r) => r.stop()));
  }

  /** The pod's volume mounts as directories under `podDir`, or why the container cannot start yet. */
  mount(rt: MountingPod, podDir: string): MountedDir[] | NotMounted {
    const { pod, container } = rt;
    const ns = pod.metadata.namespace;
    const secrets = this.watch(ns);
    const mounts: MountedDir[] = [];
    for (const mount of container.volumeMounts ?? []) {
      const volume = pod.spec.volumes?.find((v) => v.name === mount.name);
      if (!volume)
        return {
          reason: 'CreateContainerConfigError',
          message: `volumeMount ${mount.name} names no volume of the pod`,
        };
      const dir = join(podDir, 'volumes', volume.name);
      if (volume.secret) {
        const name = volume.secret.secretName ?? '';
        if (!secrets.hasSynced())
          return { reason: 'ContainerCreating', message: `waiting for secret "${name}"` };
        const secret = secrets.get(`${ns}/${name}`) as
          { data?: Record<string, string> } | undefined;
        if (!secret && !volume.secret.optional)
          return { reason: 'ContainerCreating', message: `secret "${name}" not found` };
        const files = secretVolumeFiles(volume, secret?.data ?? {});
        if ('error' in files) return { reason: 'ContainerCreating', message: files.error };
        const before = rt.volumes.get(volume.name);
        const sum = writeVolume(dir, files, before);
        if (before !== undefined && before !== sum)
          this.#o.log(`pod ${rt.key}: volume ${volume.name} updated`);
        rt.volumes.set(volume.name, sum);
      } else {
        if (!volume.emptyDir)
          this.#o.log(
            `pod ${rt.key}: volume ${volume.name} is neither a secret nor an emptyDir; it gets an empty directory`,
          );
        mkdirSync(dir, { recursive: true });
      }
      mounts.push({ mountPath: mount.mountPath, dir });
    }
    return mounts;
  }
}

/**
 * Writes a volume's files the way a kubelet does, so a reader never sees half an update:
 * the files live in a fresh `..<stamp>` directory, `..data` is swapped to it by a rename,
 * and each top-level name is a symlink through `..data`. Returns the files' digest; when it
 * equals `previous`, the volume holds them already and nothing is written.
 */
function writeVolume(dir: string, files: VolumeFile[], previous: string | undefined): string {
  const digest = createHash('sha256');
  for (const f of files) digest.update(f.path).update('\0').update(f.content).update('\0');
  const sum = digest.digest('hex');
  if (previous === sum) return sum;
  mkdirSync(dir, { recursive: true });
  const stamp = `..${Date.now()}_${sum.slice(0, 8)}`;
  for (const f of files) {
    const file = join(dir, stamp, f.path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, f.content, { mode: 0o600 });
  }
  mkdirSync(join(dir, stamp), { recursive: true });
  rmSync(join(dir, '..data_tmp'), { force: true });
  symlinkSync(stamp, join(dir, '..data_tmp'));
  renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
  const top = new Set(files.map((f) => f.path.split('/')[0]!));
  for (const entry of readdirSync(dir)) {
    if (entry.startsWith('..')) {
      if (entry !== '..data' && entry !== stamp)
        rmSync(join(dir, entry), { recursive: true, force: true });
    } else if (!top.has(entry)) rmSync(join(dir, entry), { force: true });
  }
  for (const name of top) {
    try {
      symlinkSync(join('..data', name), join(dir, name));
    } catch {
      // exists already, pointing through ..data
    }
  }
  return sum;
}
