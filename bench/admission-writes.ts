// node bench/admission-writes.ts [cluster dir]: after `npm run bench:admission -- --keep-cluster`,
// times one AdmissionReview at a time (one keep-alive connection, 100 requests each) to the
// policy-server replica directly and through the node agent's CONNECT proxy, sent as one write
// or as headers then body (two TLS records). A proxy leg with Nagle's algorithm on holds the
// second record until the first is acknowledged, which a receiver waiting for the rest of the
// request delays (~40 ms on Linux): only "proxy, 2 writes" shows it.
import { Agent, request } from 'node:https';
import { join } from 'node:path';
import { AdmissionregistrationV1Api, CoreV1Api } from '@kubernetes/client-node';
import { readNodeAgentState } from '../tooling/cluster/node-agent-state.ts';
import { repoRoot } from '../tooling/cluster/paths.ts';
import { PooledKubeConfig } from '../lib/kube/kube-config.ts';
import { admissionReview, benchPod } from './admission-policies.ts';
import { TunnelAgent } from './admission-tunnel.ts';
import { percentile, sleep } from './support.ts';

const dir = process.argv[2] ?? join(repoRoot, '.rollcall', 'bench-admission');
const kc = new PooledKubeConfig();
kc.loadFromFile(join(dir, 'kubeconfig'));
const state = readNodeAgentState(dir);
const pod = Object.values(state?.pods ?? {}).find((p) => p.namespace === 'rollcall-system');
if (!state || !pod) throw new Error(`no policy-server process in ${dir}/node-agent.json`);
const port = pod.port;
const service = await kc
  .makeApiClient(CoreV1Api)
  .readNamespacedService({ name: 'policy-server-adm', namespace: 'rollcall-system' });
const webhook = await kc
  .makeApiClient(AdmissionregistrationV1Api)
  .readValidatingWebhookConfiguration({ name: 'rollcall-adm-six' });
const path = webhook.webhooks?.[0]?.clientConfig.service?.path ?? '/validate/adm-six/1';
const authority = `${service.spec?.clusterIP}:${service.spec?.ports?.[0]?.port}`;

const options = { keepAlive: true, maxSockets: 1, rejectUnauthorized: false };
const agents: Record<string, Agent> = {
  direct: new Agent(options),
  proxy: new TunnelAgent(state.proxySocket, authority, options),
};

let seq = 0;
function once(agent: Agent, split: boolean): Promise<number> {
  const body = JSON.stringify(admissionReview(`w-${++seq}`, 'adm-rollcall', benchPod(`w-${seq}`)));
  const t = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path,
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(performance.now() - t));
      },
    );
    req.on('error', reject);
    if (split) {
      req.flushHeaders();
      setImmediate(() => req.end(body));
    } else req.end(body);
  });
}

for (const [name, agent] of Object.entries(agents))
  for (const split of [false, true]) {
    await once(agent, split); // the connection, outside the timing
    const samples: number[] = [];
    for (let i = 0; i < 100; i++) {
      samples.push(await once(agent, split));
      await sleep(5);
    }
    samples.sort((a, b) => a - b);
    const f = (p: number) => percentile(samples, p).toFixed(1);
    console.log(
      `${name.padEnd(6)} ${split ? '2 writes' : '1 write '}  p50 ${f(50)}  p90 ${f(90)}  max ${f(100)} ms`,
    );
  }
for (const agent of Object.values(agents)) agent.destroy();
