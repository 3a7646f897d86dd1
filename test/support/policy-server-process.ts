// A real `rollcall policy-server` process against the test cluster, run by the test itself
// rather than by the node agent: a namespace and a pod of its own that name the server (the
// process reports on the pod), a serving certificate for 127.0.0.1, and the process,
// listening on a port of its choosing. The test creates its Policies in between.
import { spawn, type ChildProcess } from 'node:child_process';
import {
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { POLICY_SERVER_LABEL, REPORT_ANNOTATION } from '../../api/constants.ts';
import { repoRoot } from '../../tooling/cluster/paths.ts';
import { ensurePki, issueCertificate } from '../../tooling/cluster/pki.ts';
import { installCrds } from '../../control-plane/install-crds.ts';
import { testCluster, testKubeConfig } from './kube.ts';
import { ensureNamespace, logDir } from './rollcall.ts';

/** What the process reports about one Policy on its pod. */
export interface ReportEntry {
  uid: string;
  generation: number;
  state: string;
  message?: string;
  serving?: number;
}

/** What `start` gives: the process, the port it chose, and when. */
export interface StartedPolicyServer {
  child: ChildProcess;
  port: number;
  /** Date.now() at the spawn and when the process said it listens. */
  startedAt: number;
  listeningAt: number;
  /** Where its output goes. */
  logFile: string;
}

/** One pod of `server` in `namespace`, and the process the test runs for it. */
export class TestPolicyServer {
  readonly namespace: string;
  readonly server: string;
  readonly podName: string;
  readonly #kc = testKubeConfig();
  readonly #core = this.#kc.makeApiClient(CoreV1Api);
  readonly #dir = mkdtempSync(join(tmpdir(), 'rollcall-ps-'));
  readonly #tlsDir = join(this.#dir, 'tls');
  #ca: Buffer | undefined;
  #child: ChildProcess | undefined;

  constructor({
    namespace,
    server,
    podName,
  }: {
    namespace: string;
    server: string;
    podName: string;
  }) {
    this.namespace = namespace;
    this.server = server;
    this.podName = podName;
  }

  /** The CA that signed the process's serving certificate. */
  get ca(): Buffer {
    if (!this.#ca) throw new Error('TestPolicyServer: prepare() first');
    return this.#ca;
  }

  /**
   * Creates the CRDs, the namespace and the pod, labelled for the server (not rollcall's
   * image: the node agent must leave it alone), and issues the serving certificate.
   */
  async prepare(): Promise<void> {
    await installCrds(this.#kc, { info: () => {} });
    await ensureNamespace(this.#kc, this.namespace);
    await this.#core.createNamespacedPod({
      namespace: this.namespace,
      body: {
        metadata: { name: this.podName, labels: { [POLICY_SERVER_LABEL]: this.server } },
        spec: { containers: [{ name: 'policy-server', image: 'example.invalid/not-run:1' }] },
      },
    });
    const pki = ensurePki(join(this.#dir, 'pki'));
    this.#ca = readFileSync(pki.caCert);
    const { cert, key } = issueCertificate(pki.dir, 'serving', 'policy-server', ['IP:127.0.0.1']);
    mkdirSync(this.#tlsDir);
    writeFileSync(join(this.#tlsDir, 'tls.crt'), readFileSync(cert));
    writeFileSync(join(this.#tlsDir, 'tls.key'), readFileSync(key));
  }

  /** What the process last reported on its pod, by Policy name. */
  async report(): Promise<Record<string, ReportEntry>> {
    const pod: V1Pod = await this.#core.readNamespacedPod({
      name: this.podName,
      namespace: this.namespace,
    });
    const raw = pod.metadata?.annotations?.[REPORT_ANNOTATION];
    return raw ? (JSON.parse(raw) as Record<string, ReportEntry>) : {};
  }

  /**
   * Runs `rollcall policy-server` for the pod, its output in .rollcall/test/logs/`logName`;
   * `args` go before `--address=127.0.0.1 --port=0`, `env` over the test's own.
   */
  async start({
    logName,
    args = [],
    env = {},
  }: {
    logName: string;
    args?: string[];
    env?: Record<string, string>;
  }): Promise<StartedPolicyServer> {
    mkdirSync(logDir, { recursive: true });
    const logFile = join(logDir, logName);
    const log = createWriteStream(logFile, { flags: 'a' });
    const startedAt = Date.now();
    const child = spawn(
      process.execPath,
      [
        join(repoRoot, 'cli', 'rollcall.ts'),
        'policy-server',
        `--server=${this.server}`,
        `--pod=${this.podName}`,
        `--namespace=${this.namespace}`,
        `--tls-dir=${this.#tlsDir}`,
        ...args,
        '--address=127.0.0.1',
        '--port=0',
      ],
      {
        cwd: repoRoot,
        env: { ...process.env, KUBECONFIG: testCluster().kubeconfig, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    this.#child = child;
    child.stderr?.pipe(log);
    // The port the process chose, from its "policy server started" line.
    const { port, listeningAt } = await new Promise<{ port: number; listeningAt: number }>(
      (resolve, reject) => {
        let buffered = '';
        child.once('exit', (code) =>
          reject(new Error(`policy-server exited with ${code} before listening`)),
        );
        child.stdout?.on('data', (chunk: Buffer) => {
          log.write(chunk);
          buffered += String(chunk);
          const line = buffered.split('\n').find((l) => l.includes('"policy server started"'));
          if (line)
            resolve({ port: (JSON.parse(line) as { port: number }).port, listeningAt: Date.now() });
        });
      },
    );
    return { child, port, startedAt, listeningAt, logFile };
  }

  /** Kills the process if it still runs. */
  kill(): void {
    if (this.#child && this.#child.exitCode === null) this.#child.kill('SIGKILL');
  }

  /** Deletes the namespace and the certificate files. */
  async cleanUp(): Promise<void> {
    await this.#core.deleteNamespace({ name: this.namespace }).catch(() => {});
    rmSync(this.#dir, { recursive: true, force: true });
  }
}

/** The AdmissionReview the apiserver sends a webhook for creating a ConfigMap. */
export function configMapReview(
  uid: string,
  namespace: string,
  name: string,
  data: Record<string, string>,
) {
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: { group: '', version: 'v1', kind: 'ConfigMap' },
      resource: { group: '', version: 'v1', resource: 'configmaps' },
      operation: 'CREATE',
      namespace,
      name,
      userInfo: { username: 'tester' },
      object: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace }, data },
      oldObject: null,
      dryRun: false,
    },
  };
}
