// Runs rollcall as real processes (the same commands the image runs) against the test
// cluster and Redis, and gives tests handles to stop, kill and restart them.
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  CoreV1Api,
  CustomObjectsApi,
  AdmissionregistrationV1Api,
  type KubeConfig,
} from '@kubernetes/client-node';
import { repoRoot } from '../../cluster/paths.ts';
import { redisUrl } from './redis.ts';
import { testCluster } from './kube.ts';

export const logDir = join(repoRoot, '.rollcall', 'test', 'logs');

export interface RollcallProcess {
  name: string;
  child: ChildProcess;
  /** SIGTERM and wait for a clean exit. */
  stop(): Promise<void>;
  /** SIGKILL: the process dies mid-whatever. */
  kill(): Promise<void>;
}

/**
 * Starts `rollcall <args>` with output in .rollcall/test/logs/<name>.log. `db` picks a Redis
 * database so that test files never share queues or projections.
 */
export function startRollcall(
  name: string,
  args: string[],
  { db, env = {} }: { db: number; env?: Record<string, string> },
): RollcallProcess {
  mkdirSync(logDir, { recursive: true });
  const log = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' });
  const child = spawn(process.execPath, [join(repoRoot, 'cli', 'rollcall.ts'), ...args], {
    cwd: repoRoot,
    env: {
      ...process.env,
      KUBECONFIG: testCluster().kubeconfig,
      REDIS_URL: `${redisUrl()}/${db}`,
      LOG_LEVEL: 'debug',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const signal = async (sig: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sig);
    await exited;
  };
  return { name, child, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL') };
}

/** A fresh Redis database number for this test file. */
export const testDb = () => 1 + (process.pid % 15);

/** Deletes every Policy and PolicyServer, and the webhooks rollcall made, so the next file starts clean. */
export async function deleteRollcallObjects(kc: KubeConfig): Promise<void> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  for (const plural of ['policies', 'policyservers']) {
    const list = (await custom.listClusterCustomObject({
      group: 'rollcall.dev',
      version: 'v1alpha1',
      plural,
    })) as { items: { metadata: { name: string } }[] };
    for (const item of list.items)
      await custom
        .deleteClusterCustomObject({
          group: 'rollcall.dev',
          version: 'v1alpha1',
          plural,
          name: item.metadata.name,
        })
        .catch(() => {});
  }
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await admission.deleteCollectionValidatingWebhookConfiguration({
    labelSelector: 'app.kubernetes.io/managed-by=rollcall',
  });
}

/** Creates the namespace (idempotent). */
export async function ensureNamespace(kc: KubeConfig, name: string): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name } } }).catch((err: { code?: number }) => {
    if (err.code !== 409) throw err;
  });
}
