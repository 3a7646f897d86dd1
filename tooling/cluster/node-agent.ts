// The local cluster's node agent: kubelet and kube-proxy for the pods of rollcall's own image
// on the fake node, which kwok would only pretend to run.
//
// - kubelet: one real `rollcall <args> --address=127.0.0.1 --port=N` process per live pod, its
//   secret volumes written as files (and rewritten when the Secret changes), its readiness
//   probed every second and written to the pod's status; a deleted pod's process is stopped,
//   and a process that exits gets its pod deleted so that its ReplicaSet replaces it.
// - kube-proxy: an HTTP CONNECT proxy on a Unix socket. The apiserver's `cluster` egress goes
//   through it, so a webhook that names a Service arrives as `CONNECT <clusterIP>:<port>`
//   and goes to a Ready pod's process (round robin per connection): handed over to it on its
//   IPC channel when it takes connections so (a policy server does), else piped to its port
//   on loopback.
//
// `cluster up` starts it as `node tooling/cluster/node-agent.ts <cluster dir>`; it reads the rest from
// the cluster's state.json and writes what it runs to <dir>/node-agent.json.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  appendFileSync,
  chmodSync,
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { connect, Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { Duplex } from 'node:stream';
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
import { DEFAULT_POLICY_SERVER_IMAGE } from '../../api/constants.ts';
import { handover } from '../../data-plane/https-server.ts';
import { PooledKubeConfig } from '../../lib/kube/kube-config.ts';
import { Reflector, type ReflectorLogger } from '../../lib/kube/reflector.ts';
import { fakeNodeName, readState } from './cluster.ts';
import {
  agentContainer,
  agentPodSchema,
  crashBackoffUntil,
  crashGroup,
  isTerminating,
  podUsesImage,
  processSpec,
  readinessProbe,
  recordCrash,
  secretVolumeFiles,
  terminationGraceMs,
  type AgentContainer,
  type AgentPod,
  type CrashRecord,
  type MountedDir,
  type ProbeSpec,
  type VolumeFile,
} from './node-agent-pod.ts';
import {
  agentServiceSchema,
  parseConnectTarget,
  pick,
  route,
  type AgentService,
  type Backend,
} from './node-agent-routing.ts';
import { writeNodeAgentState, type NodeAgentState } from './node-agent-state.ts';
import {
  apiTime,
  nextPodIp,
  podStatus,
  statusDiffers,
  type ContainerPhase,
} from './node-agent-status.ts';
import { repoRoot } from './paths.ts';
import { ensurePki, tokenFor } from './pki.ts';
import { freePort } from './ports.ts';
import { kubeConfigTarget } from '../../lib/kube/api.ts';

export interface NodeAgentOptions {
  /** The cluster directory: pods/, logs/pods/ and node-agent.json go here. */
  dir: string;
  /** The agent's API client (the cluster admin). */
  kc: KubeConfig;
  /** The admin kubeconfig file, for its pods' processes (see processSpec). */
  kubeconfig: string;
  /** The Unix socket the CONNECT proxy listens on (the apiserver's egress dials it). */
  proxySocket: string;
  nodeName?: string;
  /** Pods with a container of this image are the agent's. */
  image?: string;
  /** The image's entry point. */
  entry?: string;
  log?: (line: string) => void;
}

/** How often a running process is probed; until its first success, a little more often. */
const probePeriodMs = 1_000;
const startupProbePeriodMs = 250;
const probeTimeoutMs = 1_000;
/** SIGKILL for processes still running this long after the agent's own SIGTERM. */
const shutdownGraceMs = 5_000;

interface PodRuntime {
  key: string;
  uid: string;
  pod: AgentPod;
  container: AgentContainer;
  podIP: string;
  startTime: string;
  phase: ContainerPhase;
  child?: ChildProcess;
  port?: number;
  /** Its process takes connections handed over on its IPC channel (it said so). */
  takesConnections?: boolean;
  probe: ProbeSpec;
  successes: number;
  failures: number;
  everReady: boolean;
  probeTimer?: NodeJS.Timeout;
  /** A start held back by the crash back-off. */
  retryTimer?: NodeJS.Timeout;
  /** The agent stopped it (pod deleted, agent shutting down): its exit is expected. */
  stopping: boolean;
  /** Its process exited on its own: the pod is being deleted, never restarted here. */
  exited: boolean;
  /** The last status written, and the pod's resourceVersion it was computed from. */
  written?: { status: string; resourceVersion: string | undefined };
  /** Digest of each materialized volume's files, so unchanged Secrets are not rewritten. */
  volumes: Map<string, string>;
}

export class NodeAgent {
  readonly #o: Required<NodeAgentOptions>;
  readonly #kc: KubeConfig;
  readonly #pods: Reflector<KubernetesObject>;
  readonly #services: Reflector<KubernetesObject>;
  readonly #secrets = new Map<string, Reflector<KubernetesObject>>();
  readonly #runtimes = new Map<string, PodRuntime>();
  /** Runtimes being stopped, until their process exits. */
  readonly #stopping = new Set<PodRuntime>();
  readonly #chains = new Map<string, Promise<void>>();
  readonly #turns = new Map<string, number>();
  readonly #crashes = new Map<string, CrashRecord>();
  readonly #tunnels = new Set<Duplex>();
  readonly #server: Server;
  #closing = false;

  constructor(options: NodeAgentOptions) {
    this.#o = {
      nodeName: fakeNodeName,
      image: DEFAULT_POLICY_SERVER_IMAGE,
      entry: join(repoRoot, 'cli', 'rollcall.ts'),
      log: (line) => console.log(`${new Date().toISOString()} ${line}`),
      ...options,
    };
    this.#kc = options.kc;
    const logger = reflectorLogger(this.#o.log);
    const schedule = (obj: KubernetesObject) =>
      this.#schedule(`${obj.metadata?.namespace}/${obj.metadata?.name}`);
    this.#pods = new Reflector({
      api: kubeConfigTarget(this.#kc),
      path: '/api/v1/pods',
      fieldSelector: `spec.nodeName=${this.#o.nodeName}`,
      logger,
      onAdd: schedule,
      onUpdate: (_old, obj) => schedule(obj),
      onDelete: schedule,
    });
    this.#services = new Reflector({
      api: kubeConfigTarget(this.#kc),
      path: '/api/v1/services',
      logger,
    });
    this.#server = createServer((_req, res) => {
      res.writeHead(405, { 'content-type': 'text/plain' });
      res.end('the local node agent is an HTTP CONNECT proxy\n');
    });
    this.#server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#connect(req, socket, head),
    );
  }

  async start(): Promise<void> {
    mkdirSync(join(this.#o.dir, 'logs', 'pods'), { recursive: true });
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      rmSync(this.#o.proxySocket, { force: true }); // left by an agent that was killed
      this.#server.listen(this.#o.proxySocket, () => resolve());
    });
    chmodSync(this.#o.proxySocket, 0o600); // only this user (the apiserver's) may tunnel
    this.#writeState();
    this.#o.log(
      `node agent for ${this.#o.nodeName}: runs pods of image ${this.#o.image}; CONNECT proxy on ${this.#o.proxySocket}`,
    );
    // `cluster up` starts the agent with the apiserver, so that loading this program overlaps
    // the apiserver's start; the watches begin once it answers.
    while (!this.#closing && (await kubeRequest(this.#kc, 'GET', '/readyz').catch(() => 0)) !== 200)
      await new Promise((r) => setTimeout(r, 200));
    if (this.#closing) return;
    this.#services.start();
    this.#pods.start();
    this.#o.log('the apiserver is ready; watching pods and services');
  }

  /** Stops every process it started (SIGTERM, SIGKILL after 5 s), the proxy and the watches. */
  async stop(): Promise<void> {
    this.#closing = true;
    const all = [...this.#runtimes.values(), ...this.#stopping];
    for (const rt of all) this.#terminate(rt, shutdownGraceMs, 'the node agent is stopping');
    this.#runtimes.clear();
    for (const socket of this.#tunnels) socket.destroy();
    this.#server.close();
    const deadline = Date.now() + shutdownGraceMs + 1_000;
    while (this.#stopping.size > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 50));
    this.#writeState();
    await Promise.race([
      Promise.all([
        this.#pods.stop(),
        this.#services.stop(),
        ...[...this.#secrets.values()].map((r) => r.stop()),
      ]),
      new Promise((r) => setTimeout(r, 1_000)),
    ]);
  }

  /** Runs `#sync` for one pod, never two at once for the same pod. */
  #schedule(key: string): void {
    if (this.#closing) return;
    const next = (this.#chains.get(key) ?? Promise.resolve())
      .then(() => this.#sync(key))
      .catch((err: unknown) => this.#o.log(`pod ${key}: ${errorText(err)}`));
    this.#chains.set(key, next);
    void next.then(() => {
      if (this.#chains.get(key) === next) this.#chains.delete(key);
    });
  }

  /** Brings the pod's process and status in line with the pod as the watch last saw it. */
  async #sync(key: string): Promise<void> {
    if (this.#closing) return;
    const raw = this.#pods.get(key);
    if (!this.#runtimes.has(key) && !podUsesImage(raw, this.#o.image)) return;
    const parsed = raw ? agentPodSchema.safeParse(raw) : undefined;
    if (parsed && !parsed.success) this.#o.log(`pod ${key}: unreadable (${parsed.error.message})`);
    const pod = parsed?.success ? parsed.data : undefined;
    let rt = this.#runtimes.get(key);

    if (rt && (!pod || pod.metadata.uid !== rt.uid || isTerminating(pod))) {
      const why = !pod
        ? 'the pod is gone'
        : isTerminating(pod)
          ? 'the pod is being deleted'
          : 'the pod was replaced';
      this.#runtimes.delete(key);
      this.#terminate(rt, terminationGraceMs(pod?.metadata.uid === rt.uid ? pod : rt.pod), why);
      this.#releaseSecrets(rt.pod.metadata.namespace);
      rt = undefined;
    }
    if (!pod || isTerminating(pod)) return;
    const container = agentContainer(pod, this.#o.image);
    if (!container) return;

    if (!rt) {
      const used = new Set([...this.#runtimes.values()].map((r) => r.podIP));
      const own = pod.status?.podIP;
      rt = {
        key,
        uid: pod.metadata.uid,
        pod,
        container,
        podIP: own && !used.has(own) ? own : nextPodIp(used),
        startTime: pod.status?.startTime ?? apiTime(new Date()),
        phase: { state: 'waiting', reason: 'ContainerCreating' },
        probe: readinessProbe(container),
        successes: 0,
        failures: 0,
        everReady: false,
        stopping: false,
        exited: false,
        volumes: new Map(),
      };
      this.#runtimes.set(key, rt);
      this.#secretsOf(pod.metadata.namespace);
    }
    rt.pod = pod;
    if (rt.exited) return; // its deletion is on its way
    if (!rt.child) await this.#startProcess(rt);
    await this.#writeStatus(rt);
  }

  /** Materializes the volumes and starts the process, or leaves the pod waiting with a reason. */
  async #startProcess(rt: PodRuntime): Promise<void> {
    const { pod, container } = rt;
    const crashes = this.#crashes.get(crashGroup(pod));
    const until = crashBackoffUntil(crashes);
    if (until > Date.now()) {
      // A fixed text (the end of the back-off, not the time left), so that writing it once
      // is enough: the status write's own watch event must not make it differ again.
      rt.phase = {
        state: 'waiting',
        reason: 'CrashLoopBackOff',
        message: `back-off until ${apiTime(new Date(until))}: ${crashes?.count} processes of this pod's controller crashed (see the node agent's log)`,
      };
      clearTimeout(rt.retryTimer);
      rt.retryTimer = setTimeout(() => this.#schedule(rt.key), until - Date.now());
      return;
    }
    const mounts = this.#materializeVolumes(rt);
    if ('reason' in mounts) {
      rt.phase = { state: 'waiting', ...mounts };
      return;
    }
    const port = await freePort();
    if (rt.stopping || this.#runtimes.get(rt.key) !== rt) return; // deleted meanwhile
    const spec = processSpec({
      pod,
      container,
      execPath: process.execPath,
      entry: this.#o.entry,
      port,
      podIP: rt.podIP,
      mounts,
      kubeconfig: this.#o.kubeconfig,
      path: process.env.PATH,
    });
    if ('error' in spec) {
      rt.phase = { state: 'waiting', reason: 'CreateContainerConfigError', message: spec.error };
      return;
    }
    const logFile = this.#podLog(rt);
    const fd = openSync(logFile, 'a');
    // Not detached: the process stays in the agent's process group, so `cluster down`'s
    // signal to the group reaches it even if the agent itself died.
    const child = spawn(spec.command, spec.args, {
      cwd: repoRoot,
      env: spec.env,
      stdio: ['ignore', fd, fd, 'ipc'],
    });
    closeSync(fd);
    rt.child = child;
    rt.port = port;
    rt.takesConnections = false;
    child.on('message', (message) => {
      if (message === handover.ready) rt.takesConnections = true;
    });
    child.channel?.unref();
    rt.phase = {
      state: 'running',
      startedAt: apiTime(new Date()),
      ready: false,
      pid: child.pid ?? 0,
    };
    this.#o.log(`pod ${rt.key}: started pid ${child.pid} on 127.0.0.1:${port} (log ${logFile})`);
    child.once('error', (err) => this.#exited(rt, child, `could not start: ${err.message}`));
    child.once('exit', (code, sig) =>
      this.#exited(rt, child, sig ? `was killed by ${sig}` : `exited with code ${code}`),
    );
    this.#probeLater(rt, startupProbePeriodMs);
    this.#writeState();
  }

  #exited(rt: PodRuntime, child: ChildProcess, how: string): void {
    if (rt.child !== child) return; // 'error' and 'exit' may both come
    rt.child = undefined;
    clearTimeout(rt.probeTimer);
    const line = `process ${child.pid ?? '-'} ${how}`;
    appendFileSync(this.#podLog(rt), `[node-agent] ${new Date().toISOString()} ${line}\n`);
    if (rt.stopping) {
      this.#o.log(`pod ${rt.key}: ${line}`);
      this.#stopping.delete(rt);
      this.#writeState();
      return;
    }
    rt.exited = true;
    const group = crashGroup(rt.pod);
    this.#crashes.set(group, recordCrash(this.#crashes.get(group), Date.now()));
    this.#writeState();
    this.#o.log(`pod ${rt.key}: ${line}; deleting the pod so that its controller replaces it`);
    const { namespace, name, uid } = rt.pod.metadata;
    void kubeRequest(this.#kc, 'DELETE', `/api/v1/namespaces/${namespace}/pods/${name}`, {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      gracePeriodSeconds: 0,
      preconditions: { uid },
    }).catch((err: unknown) =>
      this.#o.log(`pod ${rt.key}: could not delete it: ${errorText(err)}`),
    );
  }

  /** SIGTERM now, SIGKILL after `graceMs` if it is still running. */
  #terminate(rt: PodRuntime, graceMs: number, why: string): void {
    rt.stopping = true;
    clearTimeout(rt.probeTimer);
    clearTimeout(rt.retryTimer);
    const child = rt.child;
    if (!child) return;
    this.#stopping.add(rt);
    this.#o.log(
      `pod ${rt.key}: ${why}; stopping pid ${child.pid} (SIGKILL after ${graceMs / 1000} s)`,
    );
    child.kill('SIGTERM');
    const timer = setTimeout(() => {
      if (rt.child === child) child.kill('SIGKILL');
    }, graceMs);
    timer.unref();
    child.once('exit', () => clearTimeout(timer));
    this.#writeState();
  }

  #probeLater(rt: PodRuntime, delayMs: number): void {
    clearTimeout(rt.probeTimer);
    rt.probeTimer = setTimeout(() => void this.#probe(rt), delayMs);
  }

  /** One readiness probe; a change of verdict is written to the pod's status. */
  async #probe(rt: PodRuntime): Promise<void> {
    if (!rt.child || rt.port === undefined || rt.stopping || rt.phase.state !== 'running') return;
    const ok = await probeOnce(rt.port, rt.probe);
    if (!rt.child || rt.stopping || rt.phase.state !== 'running') return;
    const before = rt.phase.ready;
    if (ok) {
      rt.successes++;
      rt.failures = 0;
      if (rt.successes >= rt.probe.successThreshold) rt.phase.ready = true;
    } else {
      rt.failures++;
      rt.successes = 0;
      if (rt.failures >= rt.probe.failureThreshold) rt.phase.ready = false;
    }
    if (rt.phase.ready) rt.everReady = true;
    if (rt.phase.ready !== before) {
      this.#o.log(`pod ${rt.key}: ${rt.phase.ready ? 'ready' : 'not ready'}`);
      this.#writeState();
      this.#schedule(rt.key);
    }
    this.#probeLater(rt, rt.everReady ? probePeriodMs : startupProbePeriodMs);
  }

  /** Writes the pod's status through the status subresource when it changed. */
  async #writeStatus(rt: PodRuntime): Promise<void> {
    if (rt.stopping || rt.exited) return;
    const desired = podStatus({
      pod: rt.pod,
      container: rt.container,
      phase: rt.phase,
      podIP: rt.podIP,
      startTime: rt.startTime,
      now: apiTime(new Date()),
    });
    if (!statusDiffers(rt.pod, desired)) return;
    const text = JSON.stringify(desired);
    const version = (this.#pods.get(rt.key) as KubernetesObject | undefined)?.metadata
      ?.resourceVersion;
    // The watch has not brought our last write back yet: writing it again changes nothing.
    if (rt.written?.status === text && rt.written.resourceVersion === version) return;
    const { namespace, name, uid } = rt.pod.metadata;
    try {
      await kubeRequest(
        this.#kc,
        'PATCH',
        `/api/v1/namespaces/${namespace}/pods/${name}/status`,
        { metadata: { uid }, status: desired },
        'application/merge-patch+json',
      );
      rt.written = { status: text, resourceVersion: version };
    } catch (err) {
      if (statusOf(err) !== 404 && statusOf(err) !== 409)
        this.#o.log(`pod ${rt.key}: could not write its status: ${errorText(err)}`);
    }
  }

  /** The pod's volume mounts as local directories, or why the container cannot start yet. */
  #materializeVolumes(rt: PodRuntime): MountedDir[] | { reason: string; message: string } {
    const { pod, container } = rt;
    const ns = pod.metadata.namespace;
    const secrets = this.#secretsOf(ns);
    const mounts: MountedDir[] = [];
    for (const mount of container.volumeMounts ?? []) {
      const volume = pod.spec.volumes?.find((v) => v.name === mount.name);
      if (!volume)
        return {
          reason: 'CreateContainerConfigError',
          message: `volumeMount ${mount.name} names no volume of the pod`,
        };
      const dir = join(this.#podDir(rt), 'volumes', volume.name);
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
        this.#writeVolume(rt, volume.name, dir, files);
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

  /**
   * Writes a volume's files the way a kubelet does, so a reader never sees half an update:
   * the files live in a fresh `..<stamp>` directory, `..data` is swapped to it by a rename,
   * and each top-level name is a symlink through `..data`.
   */
  #writeVolume(rt: PodRuntime, volume: string, dir: string, files: VolumeFile[]): void {
    const digest = createHash('sha256');
    for (const f of files) digest.update(f.path).update('\0').update(f.content).update('\0');
    const sum = digest.digest('hex');
    if (rt.volumes.get(volume) === sum) return;
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
    if (rt.volumes.has(volume)) this.#o.log(`pod ${rt.key}: volume ${volume} updated`);
    rt.volumes.set(volume, sum);
  }

  /** The Secret reflector of a namespace, started on first use. */
  #secretsOf(namespace: string): Reflector<KubernetesObject> {
    let reflector = this.#secrets.get(namespace);
    if (reflector) return reflector;
    const changed = (obj: KubernetesObject) => this.#secretChanged(namespace, obj.metadata?.name);
    reflector = new Reflector({
      api: kubeConfigTarget(this.#kc),
      path: `/api/v1/namespaces/${namespace}/secrets`,
      logger: reflectorLogger(this.#o.log),
      onAdd: changed,
      onUpdate: (_old, obj) => changed(obj),
      onSynced: () => this.#secretChanged(namespace, undefined),
    });
    this.#secrets.set(namespace, reflector);
    reflector.start();
    return reflector;
  }

  /** A Secret changed (or, with no name, the namespace's Secrets were listed): update the pods that mount it. */
  #secretChanged(namespace: string, name: string | undefined): void {
    for (const rt of this.#runtimes.values()) {
      if (rt.pod.metadata.namespace !== namespace || rt.stopping || rt.exited) continue;
      const mounts = rt.pod.spec.volumes?.some(
        (v) => v.secret && (name === undefined || v.secret.secretName === name),
      );
      if (!mounts) continue;
      if (!rt.child)
        this.#schedule(rt.key); // waiting for it: try to start now
      else {
        const result = this.#materializeVolumes(rt);
        if ('reason' in result)
          this.#o.log(`pod ${rt.key}: kept its volumes as they were: ${result.message}`);
      }
    }
  }

  /** Stops a namespace's Secret reflector once none of the agent's pods lives there. */
  #releaseSecrets(namespace: string): void {
    if ([...this.#runtimes.values()].some((r) => r.pod.metadata.namespace === namespace)) return;
    const reflector = this.#secrets.get(namespace);
    this.#secrets.delete(namespace);
    void reflector?.stop();
  }

  /** kube-proxy: takes a CONNECT from the apiserver to a Ready pod's process (handed over or piped). */
  #connect(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    // The reason is the status line's phrase too: the apiserver puts only the status line into
    // the error a webhook call fails with, so this is what an operator sees.
    const refuse = (code: 400 | 502 | 503, reason: string) => {
      this.#o.log(`CONNECT ${req.url}: ${code} ${reason}`);
      const phrase = reason.replace(/[^\x20-\x7e]/g, ' ');
      socket.end(
        `HTTP/1.1 ${code} ${phrase}\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${reason}\n`,
      );
    };
    const target = parseConnectTarget(req.url);
    if (!target) return refuse(400, `not an IP:port authority: ${req.url}`);
    const services: AgentService[] = [];
    for (const obj of this.#services.list()) {
      const parsed = agentServiceSchema.safeParse(obj);
      if (parsed.success) services.push(parsed.data);
    }
    const chosen = route(target, services, this.#backends());
    if ('error' in chosen) return refuse(503, chosen.error);
    const turn = this.#turns.get(chosen.key) ?? 0;
    this.#turns.set(chosen.key, turn + 1);
    const backend = pick(chosen.candidates, turn);
    const rt = this.#runtimes.get(`${backend.namespace}/${backend.name}`);
    if (
      rt?.takesConnections &&
      rt.child?.connected &&
      head.length === 0 &&
      socket instanceof Socket
    )
      return this.#handOver(socket, rt.child);
    // Only ever loopback: the backend's port is a process this agent started. noDelay: a request
    // that arrives as two TLS records must not wait for the first one's delayed ACK (~40 ms
    // stalls, bench/RESULTS.md "Where rollcall's time goes").
    const upstream: Socket = connect({ host: '127.0.0.1', port: backend.port!, noDelay: true });
    let established = false;
    this.#tunnels.add(socket);
    const close = () => {
      this.#tunnels.delete(socket);
      upstream.destroy();
      socket.destroy();
    };
    upstream.once('connect', () => {
      established = true;
      socket.write('HTTP/1.1 200 Connection established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
      upstream.on('close', close);
    });
    upstream.on('error', (err) => {
      if (established) return close();
      this.#tunnels.delete(socket);
      refuse(502, `pod ${backend.namespace}/${backend.name}: ${err.message}`);
    });
    socket.on('close', close);
  }

  /**
   * Hands the apiserver's socket to the pod's process, so that no byte of the connection
   * passes through the agent. Reading stops before the 200 goes out: the TLS handshake the
   * apiserver sends next waits in the kernel for the process, not in the agent's buffers.
   */
  #handOver(socket: Socket, child: ChildProcess): void {
    (socket as unknown as { _handle?: { readStop(): number } })._handle?.readStop();
    socket.write('HTTP/1.1 200 Connection established\r\n\r\n', (err) => {
      if (err) return socket.destroy();
      child.send(handover.connection, socket, (sendErr) => {
        if (sendErr) socket.destroy();
      });
    });
  }

  #backends(): Backend[] {
    return [...this.#runtimes.values()]
      .filter((rt) => !rt.stopping && !rt.exited)
      .map((rt) => ({
        namespace: rt.pod.metadata.namespace,
        name: rt.pod.metadata.name,
        labels: rt.pod.metadata.labels ?? {},
        podIP: rt.podIP,
        ready: rt.phase.state === 'running' && rt.phase.ready,
        port: rt.child ? rt.port : undefined,
      }));
  }

  #writeState(): void {
    const state: NodeAgentState = { pid: process.pid, proxySocket: this.#o.proxySocket, pods: {} };
    if (!this.#closing)
      for (const rt of this.#runtimes.values()) {
        if (!rt.child || rt.port === undefined || rt.stopping || rt.exited) continue;
        state.pods[rt.pod.metadata.name] = {
          namespace: rt.pod.metadata.namespace,
          port: rt.port,
          pid: rt.child.pid ?? 0,
          ready: rt.phase.state === 'running' && rt.phase.ready,
          podIP: rt.podIP,
        };
      }
    try {
      writeNodeAgentState(this.#o.dir, state);
    } catch (err) {
      this.#o.log(`could not write node-agent.json: ${errorText(err)}`);
    }
  }

  #podDir(rt: PodRuntime): string {
    return join(this.#o.dir, 'pods', rt.pod.metadata.name);
  }

  #podLog(rt: PodRuntime): string {
    return join(this.#o.dir, 'logs', 'pods', `${rt.pod.metadata.name}.log`);
  }
}

/** An HTTP(S) GET on the process's port; 2xx and 3xx pass, as for a kubelet's httpGet probe. */
function probeOnce(port: number, probe: ProbeSpec): Promise<boolean> {
  return new Promise((resolve) => {
    const options: RequestOptions = {
      host: '127.0.0.1',
      port,
      path: probe.path,
      timeout: probeTimeoutMs,
      agent: false,
      // A kubelet does not verify the certificate of an HTTPS probe either.
      rejectUnauthorized: false,
    };
    const req = (probe.https ? httpsRequest : httpRequest)(options, (res) => {
      res.resume();
      resolve((res.statusCode ?? 0) >= 200 && (res.statusCode ?? 0) < 400);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

class KubeRequestError extends Error {
  readonly statusCode: number;
  constructor(statusCode: number, body: string) {
    super(`apiserver answered ${statusCode}: ${body.slice(0, 300)}`);
    this.statusCode = statusCode;
  }
}

const statusOf = (err: unknown) => (err instanceof KubeRequestError ? err.statusCode : undefined);

/**
 * One API request with the agent's credentials (a JSON body for PATCH and DELETE); resolves
 * with the 2xx status, rejects with a KubeRequestError otherwise.
 */
async function kubeRequest(
  kc: KubeConfig,
  method: 'GET' | 'PATCH' | 'DELETE',
  path: string,
  body?: unknown,
  contentType = 'application/json',
): Promise<number> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const options: RequestOptions = {
    method,
    headers: { 'content-type': contentType, accept: 'application/json' },
    timeout: 10_000,
  };
  await kc.applyToHTTPSOptions(options);
  return new Promise<number>((resolve, reject) => {
    const req = httpsRequest(new URL(cluster.server + path), options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => {
        const code = res.statusCode ?? 0;
        if (code >= 200 && code < 300) resolve(code);
        else reject(new KubeRequestError(code, Buffer.concat(chunks).toString('utf8')));
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path} timed out`)));
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

function reflectorLogger(log: (line: string) => void): ReflectorLogger {
  return {
    warn: (obj, msg) => log(`${msg}: ${errorText((obj as { err?: unknown }).err)}`),
    debug: () => {},
  };
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
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
  const kc = new PooledKubeConfig();
  kc.loadFromClusterAndUser(
    { name: 'rollcall-local', server: state.server, caFile: pki.caCert, skipTLSVerify: false },
    { name: 'admin', token: tokenFor(pki, 'admin') },
  );
  const agent = new NodeAgent({
    dir,
    kc,
    kubeconfig: state.kubeconfig,
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
