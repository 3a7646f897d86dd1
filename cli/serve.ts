// The long-running commands: `rollcall run` (watcher + workers + HTTP in one process),
// `rollcall watcher`, `rollcall worker`, `rollcall sim`, and the one-shot `install-crds`.
import { parseArgs } from 'node:util';
import { ConfigError, configHelp, parseConfig } from '../control-plane/config.ts';
import { createLogger } from '../lib/logger.ts';
import { startRoles, type Role } from '../control-plane/roles.ts';
import type { StatusIo } from './status.ts';

// client-node (about 60 MiB of a process, README "Why the control plane has an API client of
// its own") is imported only by the commands below that use it, and by `--install-crds`.

/** Resolves on the first SIGTERM or SIGINT. */
const terminated = () =>
  new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });

const wantsHelp = (argv: readonly string[]) => argv.includes('--help') || argv.includes('-h');

export function serveRoles(roles: readonly Role[]) {
  return async (argv: readonly string[], io: StatusIo): Promise<number> => {
    if (wantsHelp(argv)) {
      io.stdout(
        `usage: rollcall ${roles.length > 1 ? 'run' : roles[0]} [options]\n\n${configHelp}\n`,
      );
      return 0;
    }
    let config;
    try {
      config = parseConfig([...argv], process.env);
    } catch (err) {
      if (err instanceof ConfigError) {
        io.stderr(`rollcall: ${err.message}\n`);
        return 2;
      }
      throw err;
    }
    const logger = createLogger(config.logLevel);
    const running = await startRoles(roles, config, logger);
    const signal = await terminated();
    logger.info({ signal }, 'shutting down');
    await running.stop();
    return 0;
  };
}

const simHelp = `usage: rollcall sim [--namespace NS] [--kubeconfig PATH] [--log-level L]
                    [--tls-cert-file F --tls-key-file F [--admission-port N]]

Dev tooling for the local cluster: plays the policy servers' data plane. For every Ready pod
of a PolicyServer it writes the rollcall.dev/policies report, driven by each policy's module:
  sim://ok                 loads
  sim://fail?message=TEXT  fails with TEXT
  sim://slow?ms=N          reports Loading for N ms, then Loaded
  sim://flaky?p=P          fails on each replica with probability P
  sim://deny?message=TEXT  loads (and denies requests, where admission is served)
A PolicyServer whose image is sim://never-ready gets pods that never become Ready.

With --tls-cert-file and --tls-key-file it also answers AdmissionReview v1 requests for every
policy on https://127.0.0.1:PORT/validate/<policy>/<generation> (--admission-port, default
8443): register webhooks there with
\`rollcall run --webhook-url https://127.0.0.1:PORT --webhook-ca-file CA\`.
`;

export async function runSim(argv: readonly string[], io: StatusIo): Promise<number> {
  if (wantsHelp(argv)) {
    io.stdout(simHelp);
    return 0;
  }
  const { values } = parseArgs({
    args: [...argv],
    options: {
      namespace: { type: 'string' },
      kubeconfig: { type: 'string' },
      'log-level': { type: 'string' },
      'admission-port': { type: 'string', default: '8443' },
      'tls-cert-file': { type: 'string' },
      'tls-key-file': { type: 'string' },
    },
  });
  const admissionPort = Number(values['admission-port']);
  if (!Number.isInteger(admissionPort) || admissionPort < 0 || admissionPort > 65535) {
    io.stderr(
      `rollcall sim: --admission-port must be a port number, got ${JSON.stringify(values['admission-port'])}\n`,
    );
    return 2;
  }
  const cert = values['tls-cert-file'];
  const key = values['tls-key-file'];
  if ((cert === undefined) !== (key === undefined)) {
    io.stderr('rollcall sim: --tls-cert-file and --tls-key-file go together\n');
    return 2;
  }
  const logger = createLogger(values['log-level'] ?? process.env.LOG_LEVEL ?? 'info');
  const [{ loadKubeConfig }, { Simulator }, { startAdmissionServer }] = await Promise.all([
    import('../lib/kube/kube-config.ts'),
    import('../tooling/sim/sim.ts'),
    import('../tooling/sim/admission.ts'),
  ]);
  const sim = new Simulator({
    kc: loadKubeConfig(values.kubeconfig ?? process.env.KUBECONFIG),
    namespace: values.namespace ?? process.env.ROLLCALL_NAMESPACE ?? 'rollcall-system',
    logger,
  });
  sim.start();
  const admission =
    cert && key
      ? await startAdmissionServer({
          port: admissionPort,
          certFile: cert,
          keyFile: key,
          policy: (name) => sim.policy(name),
          logger,
        })
      : undefined;
  const address = admission?.address();
  logger.info(
    { admissionPort: typeof address === 'object' ? address?.port : undefined },
    'simulated policy servers running',
  );
  await terminated();
  // The apiserver keeps connections alive; close them too, or the process lingers.
  admission?.close();
  admission?.closeAllConnections();
  await sim.stop();
  return 0;
}

export async function runInstallCrds(argv: readonly string[], io: StatusIo): Promise<number> {
  if (wantsHelp(argv)) {
    io.stdout(
      'usage: rollcall install-crds [--kubeconfig PATH]\n\nApplies the PolicyServer and Policy CRDs (server-side apply) and waits until they are served.\n',
    );
    return 0;
  }
  const { values } = parseArgs({ args: [...argv], options: { kubeconfig: { type: 'string' } } });
  const [{ loadKubeConfig }, { installCrds }] = await Promise.all([
    import('../lib/kube/kube-config.ts'),
    import('../control-plane/install-crds.ts'),
  ]);
  await installCrds(
    loadKubeConfig(values.kubeconfig ?? process.env.KUBECONFIG),
    createLogger('info'),
  );
  return 0;
}
