// An apiserver proxy (tooling/cluster/api-proxy.ts) that can hold back one kind of request.
import type { KubeConfig } from '@kubernetes/client-node';
import {
  startApiProxy,
  writeProxyKubeconfig,
  type ApiProxy,
} from '../../tooling/cluster/api-proxy.ts';

/**
 * A proxy to the cluster's apiserver (tooling/cluster/api-proxy.ts) that holds back list requests of
 * one path until released: an informer that cannot finish its list.
 */
export class HoldingProxy {
  private released = false;
  private readonly waiting: (() => void)[] = [];
  private proxy!: ApiProxy;

  static async start(kc: KubeConfig, heldPath: string): Promise<HoldingProxy> {
    const holding = new HoldingProxy();
    holding.proxy = await startApiProxy(kc, (req) => {
      const url = new URL(req.url ?? '/', 'http://proxy');
      const held =
        !holding.released && url.pathname === heldPath && url.searchParams.get('watch') !== 'true';
      if (held) return new Promise<void>((resolve) => holding.waiting.push(resolve));
    });
    return holding;
  }

  writeKubeconfig(path: string): string {
    return writeProxyKubeconfig(this.proxy.url, path);
  }

  release(): void {
    this.released = true;
    for (const go of this.waiting.splice(0)) go();
  }

  close(): Promise<void> {
    return this.proxy.close();
  }
}
