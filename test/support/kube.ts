// Shared helpers for integration tests that talk to the real local cluster started by test/run.ts.
import { KubeConfig, Watch, type KubernetesObject } from '@kubernetes/client-node';
import { readState, type ClusterState } from '../../tooling/cluster/cluster.ts';
import { getJson, kubeConfigTarget } from '../../lib/kube/api.ts';

/** The running test cluster; fails with a clear message when tests were not started by `npm test`. */
export function testCluster(): ClusterState {
  // Read now, not at import: `npm run soak` sets it after starting its own cluster.
  const state = process.env.KUBECONFIG ? readState(process.env.ROLLCALL_LOCAL_DIR) : undefined;
  if (!state) {
    throw new Error(
      'integration tests need the local cluster: run them with `npm test` (test/run.ts starts it)',
    );
  }
  return state;
}

export function testKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(testCluster().kubeconfig);
  return kc;
}

/** A name unique to this test process, so tests sharing the cluster never collide. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${process.pid}-${Math.random().toString(36).slice(2, 7)}`;
}

/**
 * Watches `path` (a list URL such as /apis/apps/v1/namespaces/default/deployments) and resolves
 * with the first object for which `done` holds. A watch without resourceVersion starts with
 * ADDED events for the objects that exist, so a state reached before the call is seen too.
 */
export async function watchUntil<T extends KubernetesObject>(
  kc: KubeConfig,
  path: string,
  done: (obj: T, phase: string) => boolean,
  {
    timeoutMs = 60_000,
    fieldSelector,
    labelSelector,
    resourceVersion,
  }: {
    timeoutMs?: number;
    fieldSelector?: string;
    labelSelector?: string;
    resourceVersion?: string;
  } = {},
): Promise<T> {
  let last: T | undefined;
  let controller: AbortController | undefined;
  let timer: NodeJS.Timeout | undefined;
  let finished = false;
  try {
    return await new Promise<T>((resolveWatch, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `timed out after ${timeoutMs} ms watching ${path}; last object seen: ${JSON.stringify(last)}`,
            ),
          ),
        timeoutMs,
      );
      // A watch can end quietly (server timeout, client inactivity): start it again.
      const start = (): void =>
        void new Watch(kc)
          .watch(
            path,
            { fieldSelector, labelSelector, resourceVersion, allowWatchBookmarks: true },
            (phase, obj: T) => {
              if (phase === 'BOOKMARK') return;
              last = obj;
              if (done(obj, phase)) resolveWatch(obj);
            },
            (err: unknown) => {
              // client-node ends a watch that saw no data for 30 s with a TimeoutError: go on.
              const quiet = !err || (err as Error).name === 'TimeoutError';
              if (quiet && !finished) start();
              else if (!quiet && (err as Error).name !== 'AbortError')
                reject(err instanceof Error ? err : new Error(String(err), { cause: err }));
            },
          )
          .then((c) => (controller = c), reject);
      start();
    });
  } finally {
    finished = true;
    clearTimeout(timer);
    controller?.abort();
  }
}

/** Resolves once the named object no longer exists (at once if it is already gone). */
export async function waitGone(
  kc: KubeConfig,
  path: string,
  name: string,
  timeoutMs = 60_000,
): Promise<void> {
  const list = (await getJson(kubeConfigTarget(kc), path, {
    fieldSelector: `metadata.name=${name}`,
  })) as {
    metadata: { resourceVersion: string };
    items: unknown[];
  };
  if (list.items.length === 0) return;
  await watchUntil(kc, path, (_obj, phase) => phase === 'DELETED', {
    fieldSelector: `metadata.name=${name}`,
    resourceVersion: list.metadata.resourceVersion,
    timeoutMs,
  });
}
