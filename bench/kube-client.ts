// npm run bench:kube-client [-- KUBECONFIG]: what one API client costs per request, as
// client-node ships it (a new undici Agent, so a new TLS connection, per request) against
// rollcall's PooledKubeConfig (lib/kube/kube-config.ts), in the same run against the same
// apiserver. Connections are counted from undici's diagnostics channel, not by the code under
// test. Without an argument it starts the local cluster (.rollcall/local) if needed.
import dc from 'node:diagnostics_channel';
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { up } from '../tooling/cluster/cluster.ts';
import { localDir } from '../tooling/cluster/paths.ts';
import { PooledKubeConfig } from '../lib/kube/kube-config.ts';
import { percentile, pool } from './support.ts';

const requests = 500;
const concurrency = 8;
const kubeconfig =
  process.argv[2] ?? (await up(localDir, (l) => console.error(`[cluster] ${l}`))).kubeconfig;

let connections = 0;
dc.subscribe('undici:client:connected', () => connections++);

async function measure(kc: KubeConfig) {
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(CustomObjectsApi);
  const get = () =>
    api.listClusterCustomObject({
      group: 'apiextensions.k8s.io',
      version: 'v1',
      plural: 'customresourcedefinitions',
      limit: 1,
    });
  const c0 = connections;
  await get(); // warm-up, outside the timing: both need a first connection
  const samples: number[] = [];
  const t0 = performance.now();
  await pool(Array.from({ length: requests }), concurrency, async () => {
    const t = performance.now();
    await get();
    samples.push(performance.now() - t);
  });
  const seconds = (performance.now() - t0) / 1000;
  samples.sort((a, b) => a - b);
  return {
    connections: connections - c0,
    requestsPerSecond: requests / seconds,
    p50: percentile(samples, 50),
    p99: percentile(samples, 99),
  };
}

const subjects = {
  'client-node as is': new KubeConfig(),
  PooledKubeConfig: new PooledKubeConfig(),
};
console.log(`${requests} list requests, concurrency ${concurrency}, ${kubeconfig}`);
for (const [name, kc] of Object.entries(subjects)) {
  const r = await measure(kc);
  console.log(
    `${name.padEnd(18)} connections opened ${String(r.connections).padStart(4)}  ${r.requestsPerSecond.toFixed(0).padStart(5)} req/s  p50 ${r.p50.toFixed(1)} ms  p99 ${r.p99.toFixed(1)} ms`,
  );
}
