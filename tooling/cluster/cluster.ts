// Starts and stops the local control plane: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and kwok with one fake node, all on loopback with free ports, plus the node
// agent that runs real processes for the pods of rollcall's own image (node-agent.ts).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { DEFAULT_POLICY_SERVER_IMAGE } from '../../api/constants.ts';
import { isHealthy } from '../../lib/kube/api.ts';
import { prepareAuditLog } from './audit-log.ts';
import { ensureBinaries, kubernetesVersion, type Binaries } from './build.ts';
import { nodeAgentSocketPath, nodeAgentStateFile, readNodeAgentState } from './node-agent-state.ts';
import { localDir } from './paths.ts';
import { adminApiTarget, ensurePki, tokenFor, type Pki } from './pki.ts';
import { freePort } from './ports.ts';
import { processAlive } from './process.ts';

type Log = (line: string) => void;

const components = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
  'node-agent',
] as const;
type Component = (typeof components)[number];

/** What `up` records so that `down`, `status` and `kubectl` find the running cluster. */
export interface ClusterState {
  dir: string;
  kubeconfig: string;
  server: string;
  binaries: Binaries;
  ports: {
    etcd: number;
    etcdPeer: number;
    apiserver: number;
    controllerManager: number;
    scheduler: number;
    kwok: number;
  };
  /** The node agent's HTTP CONNECT proxy (a Unix socket): the apiserver's `cluster` egress. */
  nodeAgentSocket: string;
  /**
   * The apiserver's audit log (JSON lines; audit-log.ts says what it holds). Absent: a cluster
   * started before rollcall had one; `npm run cluster -- down` and `up` to get it.
   */
  auditLog?: string;
  pids: Partial<Record<Component, number>>;
}

export const fakeNodeName = 'kwok-node-0';

const stateFile = (dir: string) => join(dir, 'state.json');

export function readState(dir = localDir): ClusterState | undefined {
  try {
    return JSON.parse(readFileSync(stateFile(dir), 'utf8')) as ClusterState;
  } catch {
    return undefined;
  }
}

/** Starts the cluster and returns its state; on a running, healthy cluster it only returns the state. */
export async function up(dir = localDir, log: Log = console.error): Promise<ClusterState> {
  const existing = readState(dir);
  if (
    existing &&
    components.every((c) => processAlive(existing.pids[c])) &&
    (await apiserverReady(existing))
  ) {
    log(`cluster already running: ${existing.server} (kubeconfig ${existing.kubeconfig})`);
    if (!existing.auditLog)
      log('it runs without an audit log: `npm run cluster -- down` and `up` again to get one');
    return existing;
  }
  if (existing) await down(dir, () => {});

  const binaries = await ensureBinaries(log);
  const pki = ensurePki(join(dir, 'pki'));
  mkdirSync(join(dir, 'logs'), { recursive: true });
  rmSync(join(dir, 'etcd'), { recursive: true, force: true });

  const ports = {
    etcd: await freePort(),
    etcdPeer: await freePort(),
    apiserver: await freePort(),
    controllerManager: await freePort(),
    scheduler: await freePort(),
    kwok: await freePort(),
  };
  const server = `https://127.0.0.1:${ports.apiserver}`;
  const state: ClusterState = {
    dir,
    kubeconfig: join(dir, 'kubeconfig'),
    server,
    binaries,
    ports,
    nodeAgentSocket: nodeAgentSocketPath(dir),
    pids: {},
  };
  const audit = prepareAuditLog(dir);
  state.auditLog = audit.logFile;
  const save = () => writeFileSync(stateFile(dir), JSON.stringify(state, null, 2));

  rmSync(nodeAgentStateFile(dir), { force: true });
  const start = (name: Component, binary: string, args: string[]) => {
    state.pids[name] = daemon(binary, args, join(dir, 'logs', `${name}.log`));
    save();
  };

  try {
    log(`starting etcd on 127.0.0.1:${ports.etcd}`);
    start('etcd', binaries.kube, etcdArgs(dir, ports));
    await waitFor('etcd', () => httpOk(`${etcdUrl(ports)}/health`), state);

    log(`starting kube-apiserver ${kubernetesVersion} on ${server}`);
    const egress = writeEgressSelector(dir, state.nodeAgentSocket);
    start('kube-apiserver', binaries.kube, [...apiserverArgs(state, pki, egress), ...audit.args]);
    // The node agent starts with the apiserver, so that its own start (a few hundred ms of
    // loading, seconds on a busy machine) overlaps the apiserver's; it waits for the apiserver
    // before it watches. `up` waits for it last.
    start('node-agent', process.execPath, [nodeAgentScript, dir]);
    await waitFor('kube-apiserver', () => apiOk(state, pki, '/readyz'), state, 120_000);

    const kubeconfigFor = (user: string, file: string) => {
      writeFileSync(file, kubeconfig(server, pki, user), { mode: 0o600 });
      return file;
    };
    kubeconfigFor('admin', state.kubeconfig);

    log('starting kube-controller-manager, kube-scheduler and kwok');
    start('kube-controller-manager', binaries.kube, [
      'kube-controller-manager',
      `--kubeconfig=${kubeconfigFor('kube-controller-manager', join(pki.dir, 'controller-manager.kubeconfig'))}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${ports.controllerManager}`,
      `--service-account-private-key-file=${pki.serviceAccountKey}`,
      `--root-ca-file=${pki.caCert}`,
      // kwok's node never misses a heartbeat that matters; without this, a brief gap lets the
      // node lifecycle controller mark every pod NotReady for good (kwok only readies Pending pods).
      '--controllers=*,-node-lifecycle-controller',
      '--leader-elect=false',
    ]);
    start('kube-scheduler', binaries.kube, [
      'kube-scheduler',
      `--kubeconfig=${kubeconfigFor('kube-scheduler', join(pki.dir, 'scheduler.kubeconfig'))}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${ports.scheduler}`,
      '--leader-elect=false',
    ]);
    start('kwok', binaries.kwok, [
      `--kubeconfig=${kubeconfigFor('kwok', join(pki.dir, 'kwok.kubeconfig'))}`,
      '--manage-all-nodes=true',
      `--server-address=127.0.0.1:${ports.kwok}`,
      ...writeKwokStages(binaries, dir).map((f) => `--config=${f}`),
    ]);

    kubectl(state, ['apply', '-f', '-'], toYaml(fakeNode()));
    await waitFor(
      'the default namespace',
      () => kubectlOk(state, ['get', 'namespace', 'default']),
      state,
    );
    await waitFor(`node ${fakeNodeName} to be Ready`, () => nodeReady(state), state);
    await waitFor('the node agent', () => nodeAgentListening(state), state);
    log(`cluster ready: ${server}, kubeconfig ${state.kubeconfig}`);
    return state;
  } catch (err) {
    await down(dir, () => {});
    throw err;
  }
}

/** Stops every process of the cluster (TERM, then KILL after 10 s) and removes its data. */
export async function down(dir = localDir, log: Log = console.error): Promise<void> {
  const state = readState(dir);
  if (!state) {
    log('no local cluster is running');
    return;
  }
  // Each component leads its own process group (the node agent's pod processes are in its
  // group), and down waits until the whole group is gone. etcd goes last: an apiserver that
  // loses etcd while shutting down retries until it is killed (measured: 12 s, not 2).
  const alive = (names: readonly Component[]) =>
    names.map((c) => state.pids[c]).filter((p): p is number => groupAlive(p));
  const pids = alive(components);
  await stopGroups(alive(components.filter((c) => c !== 'etcd')));
  await stopGroups(alive(['etcd']));
  rmSync(stateFile(dir), { force: true });
  rmSync(nodeAgentStateFile(dir), { force: true });
  if (state.nodeAgentSocket) rmSync(state.nodeAgentSocket, { force: true }); // left if it was killed
  rmSync(join(dir, 'etcd'), { recursive: true, force: true });
  log(`cluster stopped (${pids.length} processes)`);
}

export interface ClusterStatus {
  running: boolean;
  healthy: boolean;
  server?: string;
  kubeconfig?: string;
  components: { name: Component; pid?: number; alive: boolean }[];
  /** What the node agent runs: its proxy socket and its pod processes. */
  nodeAgent?: { proxySocket: string; pods: number; ready: number };
}

export async function status(dir = localDir): Promise<ClusterStatus> {
  const state = readState(dir);
  if (!state) return { running: false, healthy: false, components: [] };
  const list = components.map((name) => ({
    name,
    pid: state.pids[name],
    alive: processAlive(state.pids[name]),
  }));
  let agent: ReturnType<typeof readNodeAgentState>;
  try {
    agent = readNodeAgentState(dir);
  } catch {
    agent = undefined; // being rewritten or unreadable: status shows no pod figures
  }
  const pods = Object.values(agent?.pods ?? {});
  return {
    running: list.some((c) => c.alive),
    healthy: list.every((c) => c.alive) && (await apiserverReady(state)),
    server: state.server,
    kubeconfig: state.kubeconfig,
    components: list,
    ...(agent
      ? {
          nodeAgent: {
            proxySocket: agent.proxySocket,
            pods: pods.length,
            ready: pods.filter((p) => p.ready).length,
          },
        }
      : {}),
  };
}

/** Runs the built kubectl against the cluster; returns its output or throws with stderr. */
export function kubectl(state: ClusterState, args: string[], input?: string): string {
  const out = spawnSync(
    state.binaries.kube,
    ['kubectl', `--kubeconfig=${state.kubeconfig}`, ...args],
    {
      input,
      encoding: 'utf8',
    },
  );
  if (out.status !== 0)
    throw new Error(`kubectl ${args.join(' ')} failed: ${out.stderr || out.error?.message}`);
  return out.stdout;
}

function kubectlOk(state: ClusterState, args: string[]): boolean {
  try {
    kubectl(state, args);
    return true;
  } catch {
    return false;
  }
}

function nodeReady(state: ClusterState): boolean {
  try {
    const out = kubectl(state, [
      'get',
      'node',
      fakeNodeName,
      '-o',
      'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
    ]);
    return out.trim() === 'True';
  } catch {
    return false;
  }
}

/** True when the apiserver answers /readyz with 200 to the admin token. */
export async function apiserverReady(state: ClusterState): Promise<boolean> {
  try {
    const pki = ensurePki(join(state.dir, 'pki'));
    return await apiOk(state, pki, '/readyz');
  } catch {
    return false;
  }
}

/** A fake node for kwok. kwok fills in its status and keeps it Ready; pods scheduled here get Ready from kwok's stages. */
function fakeNode() {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: fakeNodeName,
      annotations: { 'kwok.x-k8s.io/node': 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
      labels: {
        type: 'kwok',
        'kubernetes.io/hostname': fakeNodeName,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
      },
    },
    status: {
      allocatable: { cpu: '64', memory: '256Gi', pods: '20000' },
      capacity: { cpu: '64', memory: '256Gi', pods: '20000' },
    },
  };
}

/**
 * The stages kwok plays: node-initialize and node heartbeat, pod-ready and pod-delete, read
 * from kwok's own module. pod-ready skips pods whose image is `sim://never-ready`, so a
 * PolicyServer with that image gets pods that never become Ready, and pods of rollcall's own
 * image, whose status the node agent writes from a real process.
 */
function writeKwokStages(binaries: Binaries, dir: string): string[] {
  const sources = [
    ['node', 'fast', 'node-initialize.yaml'],
    ['node', 'heartbeat-with-lease', 'node-heartbeat-with-lease.yaml'],
    ['pod', 'fast', 'pod-ready.yaml'],
    ['pod', 'fast', 'pod-delete.yaml'],
  ];
  mkdirSync(join(dir, 'kwok'), { recursive: true });
  return sources.map((parts) => {
    const stage = parseYaml(readFileSync(join(binaries.kwokStageDir, ...parts), 'utf8')) as {
      metadata: { name: string };
      spec: { selector: { matchExpressions: unknown[] } };
    };
    if (stage.metadata.name === 'pod-ready') {
      stage.spec.selector.matchExpressions.push({
        key: '.spec.containers.[].image',
        operator: 'NotIn',
        values: ['sim://never-ready', DEFAULT_POLICY_SERVER_IMAGE],
      });
    }
    const file = join(dir, 'kwok', parts[parts.length - 1]!);
    writeFileSync(file, toYaml(stage));
    return file;
  });
}

function etcdUrl(ports: ClusterState['ports']): string {
  return `http://127.0.0.1:${ports.etcd}`;
}

/** etcd's command line: one member on loopback, its data in <dir>/etcd. */
function etcdArgs(dir: string, ports: ClusterState['ports']): string[] {
  const peerUrl = `http://127.0.0.1:${ports.etcdPeer}`;
  return [
    'etcd',
    '--name=local',
    `--data-dir=${join(dir, 'etcd')}`,
    `--listen-client-urls=${etcdUrl(ports)}`,
    `--advertise-client-urls=${etcdUrl(ports)}`,
    `--listen-peer-urls=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--initial-cluster=local=${peerUrl}`,
    '--unsafe-no-fsync', // a disposable cluster: speed over durability
    '--log-level=warn',
  ];
}

/** kube-apiserver's command line: on loopback, with the cluster's PKI and the egress selection. */
function apiserverArgs(state: ClusterState, pki: Pki, egressSelectorFile: string): string[] {
  return [
    'kube-apiserver',
    `--etcd-servers=${etcdUrl(state.ports)}`,
    '--bind-address=127.0.0.1',
    '--advertise-address=127.0.0.1',
    `--secure-port=${state.ports.apiserver}`,
    `--cert-dir=${pki.dir}`,
    `--tls-cert-file=${pki.servingCert}`,
    `--tls-private-key-file=${pki.servingKey}`,
    `--client-ca-file=${pki.caCert}`,
    `--token-auth-file=${pki.tokenFile}`,
    '--authorization-mode=RBAC',
    '--service-cluster-ip-range=10.0.0.0/24',
    `--service-account-issuer=${state.server}`,
    `--service-account-key-file=${pki.serviceAccountPub}`,
    `--service-account-signing-key-file=${pki.serviceAccountKey}`,
    '--allow-privileged=true',
    // The kubernetes Service's endpoint cannot be a loopback address; nothing here needs it.
    '--endpoint-reconciler-type=none',
    // Pods need no token volumes on fake nodes (ServiceAccount); the fake node must not start
    // tainted not-ready (TaintNodesByCondition), as no node lifecycle controller runs to lift it.
    '--disable-admission-plugins=ServiceAccount,TaintNodesByCondition',
    '--profiling=false',
    // Webhooks that name a Service are dialed through the `cluster` egress: the node agent's
    // CONNECT proxy, which plays kube-proxy. URL webhooks use `controlplane` (direct).
    `--egress-selector-config-file=${egressSelectorFile}`,
  ];
}

function kubeconfig(server: string, pki: Pki, user: string): string {
  return toYaml({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'rollcall-local',
        cluster: {
          server,
          'certificate-authority-data': readFileSync(pki.caCert).toString('base64'),
        },
      },
    ],
    users: [{ name: user, user: { token: tokenFor(pki, user) } }],
    contexts: [{ name: 'rollcall-local', context: { cluster: 'rollcall-local', user } }],
    'current-context': 'rollcall-local',
  });
}

const nodeAgentScript = fileURLToPath(new URL('node-agent.ts', import.meta.url));

/**
 * The apiserver's egress selection: `cluster` (webhooks and aggregated APIs that name a
 * Service, the service and pod proxy) goes through the node agent as HTTP CONNECT over a
 * Unix socket; everything else stays direct. Not TCP: for a TCP transport the apiserver
 * requires TLS with a client certificate (v1.37.2 dereferences a missing tlsConfig and
 * panics, though validation lets an http:// URL through).
 */
function writeEgressSelector(dir: string, socket: string): string {
  const file = join(dir, 'egress-selector.yaml');
  writeFileSync(
    file,
    toYaml({
      apiVersion: 'apiserver.k8s.io/v1beta1',
      kind: 'EgressSelectorConfiguration',
      egressSelections: [
        {
          name: 'cluster',
          connection: {
            proxyProtocol: 'HTTPConnect',
            transport: { uds: { udsName: socket } },
          },
        },
      ],
    }),
  );
  return file;
}

/** True once the node agent (the one this state started) listens and has written its state. */
function nodeAgentListening(state: ClusterState): boolean {
  try {
    const agent = readNodeAgentState(state.dir);
    return agent?.pid === state.pids['node-agent'] && agent?.proxySocket === state.nodeAgentSocket;
  } catch {
    return false;
  }
}

/** Starts a process in its own process group with output to a log file; it outlives this process. */
function daemon(binary: string, args: string[], logFile: string): number {
  const fd = openSync(logFile, 'a');
  const child = spawn(binary, args, { detached: true, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error(`could not start ${binary} ${args[0]}`);
  return child.pid;
}

/** SIGTERM to each process group, SIGKILL to those still alive after 10 s; resolves once all are gone. */
async function stopGroups(pids: number[]): Promise<void> {
  for (const pid of pids) signal(pid, 'SIGTERM');
  const deadline = Date.now() + 10_000;
  while (pids.some(groupAlive) && Date.now() < deadline) await sleep(100);
  for (const pid of pids.filter(groupAlive)) signal(pid, 'SIGKILL');
  while (pids.some(groupAlive)) await sleep(50);
}

/** True while any process of the group `pid` leads (or the process itself) exists. */
function groupAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return processAlive(pid);
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig); // the whole process group
  } catch {
    try {
      process.kill(pid, sig);
    } catch {
      // already gone
    }
  }
}

async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  state: ClusterState,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    const dead = components.find((c) => state.pids[c] && !processAlive(state.pids[c]));
    if (dead)
      throw new Error(
        `${dead} exited while waiting for ${what}; see ${join(state.dir, 'logs', `${dead}.log`)}`,
      );
    await sleep(200);
  }
  throw new Error(
    `timed out after ${timeoutMs / 1000} s waiting for ${what}; logs are in ${join(state.dir, 'logs')}`,
  );
}

function httpOk(url: string): Promise<boolean> {
  return new Promise((resolveOk) => {
    const req = httpRequest(url, { timeout: 2000 }, (res) => {
      res.resume();
      resolveOk(res.statusCode === 200);
    });
    req.on('error', () => resolveOk(false));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/** True when the apiserver answers `path` (/readyz) with 200 to the admin token. */
function apiOk(state: ClusterState, pki: Pki, path: string): Promise<boolean> {
  return isHealthy(adminApiTarget(state.server, pki), path, AbortSignal.timeout(2_000));
}
