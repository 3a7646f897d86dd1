// The node agent's kubelet: one real `rollcall <args> --address=127.0.0.1 --port=N` process
// per live pod of rollcall's image on the fake node, acting as the pod's ServiceAccount (a
// token bound to the pod, renewed, tokens.ts), its secret volumes written as files (and
// rewritten when the Secret changes, volumes.ts), its readiness probed every second and
// written to the pod's status; a deleted pod's process is stopped, and a process that exits
// gets its pod deleted so that its ReplicaSet replaces it.
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, mkdirSync, openSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { KubernetesObject } from '@kubernetes/client-node';
import { handover } from '../../../data-plane/https-server.ts';
import { requestJson, type ApiTarget } from '../../../lib/kube/api.ts';
import { errorText, isConflict, isNotFound } from '../../../lib/kube/errors.ts';
import { Reflector, type ReflectorLogger } from '../../../lib/kube/reflector.ts';
import { repoRoot } from '../paths.ts';
import { freePort } from '../ports.ts';
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
  terminationGraceMs,
  type AgentContainer,
  type AgentPod,
  type CrashRecord,
  type ProbeSpec,
} from './pod.ts';
import type { Backend } from './routing.ts';
import type { NodeAgentState } from '../node-agent-state.ts';
import { apiTime, nextPodIp, podStatus, statusDiffers, type ContainerPhase } from './status.ts';
import { PodTokens } from './tokens.ts';
import { SecretVolumes } from './volumes.ts';

export interface KubeletOptions {
  api: ApiTarget;
  /** The cluster directory: pods/ and logs/pods/ go here. */
  dir: string;
  /** The CA file that verifies the apiserver, for the pods' kubeconfigs (tokens.ts). */
  caFile: string;
  /** The lifetime of the pods' tokens (default an hour; renewed at 80% of it). */
  tokenSeconds?: number;
  nodeName: string;
  /** Pods with a container of this image are the kubelet's. */
  image: string;
  /** The image's entry point. */
  entry: string;
  log: (line: string) => void;
  logger: ReflectorLogger;
  /** What runs changed (a process started or ended, its probe's verdict): node-agent.json is due. */
  onChange: () => void;
}

/** How often a running process is probed; until its first success, a little more often. */
const probePeriodMs = 1_000;
const startupProbePeriodMs = 250;
const probeTimeoutMs = 1_000;
/** An API write that takes longer has failed. */
const requestTimeoutMs = 10_000;

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
  /** A start held back by the crash back-off, or retried after its token could not be had. */
  retryTimer?: NodeJS.Timeout;
  /** Token requests that failed in a row, for the retry's back-off. */
  tokenFailures: number;
  /** The kubelet stopped it (pod deleted, agent shutting down): its exit is expected. */
  stopping: boolean;
  /** Its process exited on its own: the pod is being deleted, never restarted here. */
  exited: boolean;
  /** The last status written, and the pod's resourceVersion it was computed from. */
  written?: { status: string; resourceVersion: string | undefined };
  /** Digest of each materialized volume's files, so unchanged Secrets are not rewritten. */
  volumes: Map<string, string>;
}

export class Kubelet {
  readonly #o: KubeletOptions;
  readonly #pods: Reflector<KubernetesObject>;
  readonly #volumes: SecretVolumes;
  readonly #tokens: PodTokens;
  readonly #runtimes = new Map<string, PodRuntime>();
  /** Runtimes being stopped, until their process exits. */
  readonly #stopping = new Set<PodRuntime>();
  readonly #chains = new Map<string, Promise<void>>();
  readonly #crashes = new Map<string, CrashRecord>();
  #closing = false;

  constructor(options: KubeletOptions) {
    this.#o = options;
    const schedule = (obj: KubernetesObject) =>
      this.#schedule(`${obj.metadata?.namespace}/${obj.metadata?.name}`);
    this.#pods = new Reflector({
      api: options.api,
      path: '/api/v1/pods',
      fieldSelector: `spec.nodeName=${options.nodeName}`,
      logger: options.logger,
      onAdd: schedule,
      onUpdate: (_old, obj) => schedule(obj),
      onDelete: schedule,
    });
    this.#volumes = new SecretVolumes({
      api: options.api,
      logger: options.logger,
      log: options.log,
      onChange: (namespace, name) => this.#secretChanged(namespace, name),
    });
    this.#tokens = new PodTokens({
      api: options.api,
      server: options.api.server,
      caFile: options.caFile,
      log: options.log,
      seconds: options.tokenSeconds,
    });
  }

  /** Watches the node's pods (call it once the apiserver is ready). */
  watch(): void {
    mkdirSync(join(this.#o.dir, 'logs', 'pods'), { recursive: true });
    this.#pods.start();
  }

  /**
   * Stops every process it started (SIGTERM, SIGKILL after `graceMs`) and starts no other;
   * resolves once they exited, or a second after the last SIGKILL was due.
   */
  async stop(graceMs: number): Promise<void> {
    this.#closing = true;
    const all = [...this.#runtimes.values(), ...this.#stopping];
    for (const rt of all) this.#terminate(rt, graceMs, 'the node agent is stopping');
    this.#runtimes.clear();
    const deadline = Date.now() + graceMs + 1_000;
    while (this.#stopping.size > 0 && Date.now() < deadline) await sleep(50);
    this.#tokens.stop();
  }

  /** Ends the watches of pods and Secrets. */
  async unwatch(): Promise<void> {
    await Promise.all([this.#pods.stop(), this.#volumes.stop()]);
  }

  /** The pods it runs, as the proxy routes to them. */
  backends(): Backend[] {
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

  /** The pod's process, when it takes connections handed over on its IPC channel. */
  handoverTarget(namespace: string, name: string): ChildProcess | undefined {
    const rt = this.#runtimes.get(`${namespace}/${name}`);
    return rt?.takesConnections && rt.child?.connected ? rt.child : undefined;
  }

  /** The pods with a live process, by pod name, as node-agent.json lists them. */
  processes(): NodeAgentState['pods'] {
    const pods: NodeAgentState['pods'] = {};
    for (const rt of this.#runtimes.values()) {
      if (!rt.child || rt.port === undefined || rt.stopping || rt.exited) continue;
      pods[rt.pod.metadata.name] = {
        namespace: rt.pod.metadata.namespace,
        port: rt.port,
        pid: rt.child.pid ?? 0,
        ready: rt.phase.state === 'running' && rt.phase.ready,
        podIP: rt.podIP,
      };
    }
    return pods;
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

    rt ??= this.#adopt(key, pod, container);
    rt.pod = pod;
    if (rt.exited) return; // its deletion is on its way
    if (!rt.child) await this.#startProcess(rt);
    await this.#writeStatus(rt);
  }

  /** Takes a new pod: a runtime with a pod IP of its own, its container waiting to be created. */
  #adopt(key: string, pod: AgentPod, container: AgentContainer): PodRuntime {
    const used = new Set([...this.#runtimes.values()].map((r) => r.podIP));
    const own = pod.status?.podIP;
    const rt: PodRuntime = {
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
      tokenFailures: 0,
      stopping: false,
      exited: false,
      volumes: new Map(),
    };
    this.#runtimes.set(key, rt);
    this.#volumes.watch(pod.metadata.namespace);
    return rt;
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
    const mounts = this.#volumes.mount(rt, this.#podDir(rt));
    if ('reason' in mounts) {
      rt.phase = { state: 'waiting', ...mounts };
      return;
    }
    const identity = await this.#tokens.mount(pod, this.#podDir(rt));
    if (rt.stopping || this.#runtimes.get(rt.key) !== rt) {
      this.#tokens.release(rt.uid); // deleted meanwhile
      return;
    }
    if ('reason' in identity) {
      // As a kubelet retries a volume it could not mount: with a back-off, until it can.
      rt.phase = { state: 'waiting', ...identity };
      const delay = Math.min(2_000 * 2 ** rt.tokenFailures++, 30_000);
      clearTimeout(rt.retryTimer);
      rt.retryTimer = setTimeout(() => this.#schedule(rt.key), delay);
      return;
    }
    rt.tokenFailures = 0;
    const port = await freePort();
    if (rt.stopping || this.#runtimes.get(rt.key) !== rt) {
      this.#tokens.release(rt.uid);
      return;
    }
    const spec = processSpec({
      pod,
      container,
      execPath: process.execPath,
      entry: this.#o.entry,
      port,
      podIP: rt.podIP,
      mounts,
      kubeconfig: identity.kubeconfig,
      path: process.env.PATH,
    });
    if ('error' in spec) {
      this.#tokens.release(rt.uid);
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
    this.#o.onChange();
  }

  #exited(rt: PodRuntime, child: ChildProcess, how: string): void {
    if (rt.child !== child) return; // 'error' and 'exit' may both come
    rt.child = undefined;
    clearTimeout(rt.probeTimer);
    this.#tokens.release(rt.uid);
    const line = `process ${child.pid ?? '-'} ${how}`;
    appendFileSync(this.#podLog(rt), `[node-agent] ${new Date().toISOString()} ${line}\n`);
    if (rt.stopping) {
      this.#o.log(`pod ${rt.key}: ${line}`);
      this.#stopping.delete(rt);
      this.#o.onChange();
      return;
    }
    rt.exited = true;
    const group = crashGroup(rt.pod);
    this.#crashes.set(group, recordCrash(this.#crashes.get(group), Date.now()));
    this.#o.onChange();
    this.#o.log(`pod ${rt.key}: ${line}; deleting the pod so that its controller replaces it`);
    const { namespace, name, uid } = rt.pod.metadata;
    void requestJson(this.#o.api, 'DELETE', `/api/v1/namespaces/${namespace}/pods/${name}`, {
      body: {
        apiVersion: 'v1',
        kind: 'DeleteOptions',
        gracePeriodSeconds: 0,
        preconditions: { uid },
      },
      signal: AbortSignal.timeout(requestTimeoutMs),
    }).catch((err: unknown) =>
      this.#o.log(`pod ${rt.key}: could not delete it: ${errorText(err)}`),
    );
  }

  /** SIGTERM now, SIGKILL after `graceMs` if it is still running. */
  #terminate(rt: PodRuntime, graceMs: number, why: string): void {
    rt.stopping = true;
    clearTimeout(rt.probeTimer);
    clearTimeout(rt.retryTimer);
    this.#tokens.release(rt.uid);
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
    this.#o.onChange();
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
      this.#o.onChange();
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
    const version = this.#pods.get(rt.key)?.metadata?.resourceVersion;
    // The watch has not brought our last write back yet: writing it again changes nothing.
    if (rt.written?.status === text && rt.written.resourceVersion === version) return;
    const { namespace, name, uid } = rt.pod.metadata;
    try {
      await requestJson(
        this.#o.api,
        'PATCH',
        `/api/v1/namespaces/${namespace}/pods/${name}/status`,
        {
          body: { metadata: { uid }, status: desired },
          contentType: 'application/merge-patch+json',
          signal: AbortSignal.timeout(requestTimeoutMs),
        },
      );
      rt.written = { status: text, resourceVersion: version };
    } catch (err) {
      // Gone, or replaced under the same name (the uid precondition): nothing left to write.
      if (!isNotFound(err) && !isConflict(err))
        this.#o.log(`pod ${rt.key}: could not write its status: ${errorText(err)}`);
    }
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
        const result = this.#volumes.mount(rt, this.#podDir(rt));
        if ('reason' in result)
          this.#o.log(`pod ${rt.key}: kept its volumes as they were: ${result.message}`);
      }
    }
  }

  /** Stops a namespace's Secret watch once none of the kubelet's pods lives there. */
  #releaseSecrets(namespace: string): void {
    if ([...this.#runtimes.values()].some((r) => r.pod.metadata.namespace === namespace)) return;
    this.#volumes.release(namespace);
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
