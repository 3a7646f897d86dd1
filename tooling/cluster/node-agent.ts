// The local cluster's node agent: kubelet and kube-proxy for the pods of rollcall's own image
// on the fake node, which kwok would only pretend to run.
//
// - kubelet (node-agent/kubelet.ts): one real `rollcall <args> --address=127.0.0.1 --port=N`
//   process per live pod, acting as the pod's ServiceAccount (a token bound to the pod,
//   node-agent/tokens.ts), its readiness probed and written to the pod's status.
// - kube-proxy (node-agent/proxy.ts): an HTTP CONNECT proxy on a Unix socket that takes the
//   apiserver's `cluster` egress (webhooks that name a Service) to a Ready pod's process.
//
// `cluster up` starts it as `node tooling/cluster/node-agent.ts <cluster dir>`; it reads the rest from
// the cluster's state.json and writes what it runs to <dir>/node-agent.json.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_POLICY_SERVER_IMAGE } from '../../api/constants.ts';
import { isHealthy, type ApiTarget } from '../../lib/kube/api.ts';
import { errorText } from '../../lib/kube/errors.ts';
import type { ReflectorLogger } from '../../lib/kube/reflector.ts';
import { fakeNodeName, readState } from './cluster.ts';
import { Kubelet } from './node-agent/kubelet.ts';
import { ConnectProxy } from './node-agent/proxy.ts';
import { writeNodeAgentState } from './node-agent-state.ts';
import { repoRoot } from './paths.ts';
import { adminApiTarget, ensurePki } from './pki.ts';

export interface NodeAgentOptions {
  /** The cluster directory: pods/, logs/pods/ and node-agent.json go here. */
  dir: string;
  /** The agent's API access (the cluster admin). */
  api: ApiTarget;
  /** The CA file that verifies the apiserver, for the kubeconfigs of its pods' tokens. */
  caFile: string;
  /** The Unix socket the CONNECT proxy listens on (the apiserver's egress dials it). */
  proxySocket: string;
  nodeName?: string;
  /** Pods with a container of this image are the agent's. */
  image?: string;
  /** The image's entry point. */
  entry?: string;
  log?: (line: string) => void;
}

/** SIGKILL for processes still running this long after the agent's own SIGTERM. */
const shutdownGraceMs = 5_000;
/** How long one look at the apiserver's /readyz may take. */
const readyzTimeoutMs = 10_000;

export class NodeAgent {
  readonly #o: Required<NodeAgentOptions>;
  readonly #kubelet: Kubelet;
  readonly #proxy: ConnectProxy;
  #closing = false;

  constructor(options: NodeAgentOptions) {
    this.#o = {
      nodeName: fakeNodeName,
      image: DEFAULT_POLICY_SERVER_IMAGE,
      entry: join(repoRoot, 'cli', 'rollcall.ts'),
      log: (line) => console.log(`${new Date().toISOString()} ${line}`),
      ...options,
    };
    const { api, log } = this.#o;
    const logger = reflectorLogger(log);
    this.#kubelet = new Kubelet({
      api,
      dir: this.#o.dir,
      caFile: this.#o.caFile,
      nodeName: this.#o.nodeName,
      image: this.#o.image,
      entry: this.#o.entry,
      log,
      logger,
      onChange: () => this.#writeState(),
    });
    this.#proxy = new ConnectProxy({
      api,
      socket: this.#o.proxySocket,
      log,
      logger,
      backends: () => this.#kubelet.backends(),
      handoverTarget: (namespace, name) => this.#kubelet.handoverTarget(namespace, name),
    });
  }

  async start(): Promise<void> {
    await this.#proxy.listen();
    this.#writeState();
    this.#o.log(
      `node agent for ${this.#o.nodeName}: runs pods of image ${this.#o.image}; CONNECT proxy on ${this.#o.proxySocket}`,
    );
    // `cluster up` starts the agent with the apiserver, so that loading this program overlaps
    // the apiserver's start; the watches begin once it answers.
    while (
      !this.#closing &&
      !(await isHealthy(this.#o.api, '/readyz', AbortSignal.timeout(readyzTimeoutMs)))
    )
      await sleep(200);
    if (this.#closing) return;
    this.#proxy.watch();
    this.#kubelet.watch();
    this.#o.log('the apiserver is ready; watching pods and services');
  }

  /** Stops every process it started (SIGTERM, SIGKILL after 5 s), the proxy and the watches. */
  async stop(): Promise<void> {
    this.#closing = true;
    const stopped = this.#kubelet.stop(shutdownGraceMs); // the SIGTERMs go out now
    this.#proxy.close();
    await stopped;
    this.#writeState();
    await Promise.race([
      Promise.all([this.#kubelet.unwatch(), this.#proxy.unwatch()]),
      sleep(1_000),
    ]);
  }

  #writeState(): void {
    const pods = this.#closing ? {} : this.#kubelet.processes();
    try {
      writeNodeAgentState(this.#o.dir, {
        pid: process.pid,
        proxySocket: this.#o.proxySocket,
        pods,
      });
    } catch (err) {
      this.#o.log(`could not write node-agent.json: ${errorText(err)}`);
    }
  }
}

function reflectorLogger(log: (line: string) => void): ReflectorLogger {
  return {
    warn: (obj, msg) => log(`${msg}: ${errorText((obj as { err?: unknown }).err)}`),
    debug: () => {},
  };
}

async function main(): Promise<void> {
  const dir = process.argv[2];
  const state = dir ? readState(dir) : undefined;
  if (!dir || !state?.nodeAgentSocket) {
    console.error(
      'usage: node tooling/cluster/node-agent.ts <cluster dir> (started by `cluster up`)',
    );
    process.exit(2);
  }
  // Credentials from the cluster's PKI rather than the kubeconfig file, which `up` writes
  // only once the apiserver is ready (and an older one may name another port).
  const pki = ensurePki(join(dir, 'pki'));
  const agent = new NodeAgent({
    dir,
    api: adminApiTarget(state.server, pki),
    caFile: pki.caCert,
    proxySocket: state.nodeAgentSocket,
  });
  let stopping: Promise<void> | undefined;
  for (const sig of ['SIGTERM', 'SIGINT'] as const)
    process.on(sig, () => {
      stopping ??= agent.stop().then(() => process.exit(0));
    });
  await agent.start();
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    console.error(`node agent failed: ${errorText(err)}`);
    process.exit(1);
  });
}
