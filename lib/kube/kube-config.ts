import { KubeConfig, type RequestContext } from '@kubernetes/client-node';

/**
 * client-node 2.0 builds a new undici Agent for every request, so every API call paid for a
 * new TCP + TLS connection (bench/kube-client.ts measures it). This KubeConfig keeps the first
 * request's Agent and hands it to every later request, watches included, so connections are
 * pooled and kept alive. Headers (the token, reread per request) are still set per request;
 * the TLS material (CA, client certificate) is the one of the first request.
 */
export class PooledKubeConfig extends KubeConfig {
  private dispatcher: ReturnType<RequestContext['getDispatcher']>;

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    this.dispatcher ??= context.getDispatcher();
    if (this.dispatcher) context.setDispatcher(this.dispatcher);
  }
}

/** The kubeconfig at `path`, or the pod's service account when there is none. */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const kc = new PooledKubeConfig();
  if (path) kc.loadFromFile(path);
  else kc.loadFromCluster();
  return kc;
}
