// npm run bench:kube-client [-- KUBECONFIG]: what one API client costs per request, as
// client-node ships it (a new undici Agent, so a new TLS connection, per request), with
// rollcall's PooledKubeConfig (lib/kube/kube-config.ts, for the tooling), and rollcall's own
// client (lib/kube/api.ts, every role), in the same run against the same apiserver.
// Connections are counted from node:net's diagnostics channel, not by the code under test;
// CPU is this process's. Without an argument it starts the local cluster
// (.rollcall/local) if needed.
import dc from 'node:diagnostics_channel';
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { up } from '../tooling/cluster/cluster.ts';
import { localDir } from '../tooling/cluster/paths.ts';
import { getJson, loadApiTarget } from '../lib/kube/api.ts';
import { PooledKubeConfig } from '../lib/kube/kube-config.ts';
import { percentile, pool } from './support.ts';

const requests = 500;
const concurrency = 8;
const kubeconfig =
  process.argv[2] ?? (await up(localDir, (l) => console.error(`[cluster] ${l}`))).kubeconfig;

let connections = 0;
// Every client's sockets, undici's included, pass through node:net.
dc.subscribe('net.client.socket', () => connections++);

/** The same list request through client-node's generated client. */
function clientNodeList(kc: KubeConfig): () => Promise<unknown> {
  kc.loadFromFile(kubeconfig);
  const api = kc.makeApiClient(CustomObjectsApi);
  return () =>
    api.listClusterCustomObject({
      group: 'apiextensions.k8s.io',
      version: 'v1',
      plural: 'customresourcedefinitions',
      limit: 1,
    });
}

async function measure(get: () => Promise<unknown>) {
  const c0 = connections;
  await get(); // warm-up, outside the timing: both need a first connection
  const samples: number[] = [];
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  await pool(Array.from({ length: requests }), concurrency, async () => {
    const t = performance.now();
    await get();
    samples.push(performance.now() - t);
  });
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  samples.sort((a, b) => a - b);
  return {
    connections: connections - c0,
    requestsPerSecond: requests / seconds,
    p50: percentile(samples, 50),
    p99: percentile(samples, 99),
    cpuMsPerRequest: (cpu.user + cpu.system) / 1000 / requests,
  };
}

const target = await loadApiTarget(kubeconfig);
const subjects = {
  'client-node as is': clientNodeList(new KubeConfig()),
  PooledKubeConfig: clientNodeList(new PooledKubeConfig()),
  'lib/kube/api.ts': () =>
    getJson(target, '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', { limit: 1 }),
};
console.log(`${requests} list requests, concurrency ${concurrency}, ${kubeconfig}`);
for (const [name, get] of Object.entries(subjects)) {
  const r = await measure(get);
  console.log(
    `${name.padEnd(18)} connections opened ${String(r.connections).padStart(4)}  ${r.requestsPerSecond.toFixed(0).padStart(5)} req/s  p50 ${r.p50.toFixed(1)} ms  p99 ${r.p99.toFixed(1)} ms  CPU ${r.cpuMsPerRequest.toFixed(2)} ms/request`,
  );
}
