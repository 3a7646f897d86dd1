// `rollcall policy-server`: wires the replica (watches, loads, report), the evaluation pool,
// the TLS reloader and the HTTPS server together, and runs until SIGTERM or SIGINT.
import { setFlagsFromString } from 'node:v8';
import { REPORT_ANNOTATION } from '../api/constants.ts';
import { loadApiTarget, requestJson, type ApiTarget } from '../lib/kube/api.ts';
import type { Logger } from 'pino';
import { createLogger } from '../lib/logger.ts';
import {
  parsePolicyServerConfig,
  PolicyServerConfigError,
  policyServerHelp,
  type PolicyServerConfig,
} from './config.ts';
import { startHttpsServer, type PolicyHttpsServer } from './https-server.ts';
import { compileWithinBudget } from './cel/index.ts';
import { InlineEvaluator } from './inline.ts';
import type { Compile } from './load.ts';
import { PolicyServerMetrics } from './metrics.ts';
import { NamespaceCache } from './namespaces.ts';
import { EvaluationPool } from './pool.ts';
import { Replica } from './replica.ts';
import { fetchSource } from './source.ts';
import { ReportPublisher } from './report-publisher.ts';
import { TlsReloader } from './tls.ts';

// A catastrophic regular expression falls back to a linear-time engine instead of stalling
// its thread. V8 flags are process-wide: this covers the evaluation threads started later.
setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');

interface Io {
  stdout(s: string): void;
  stderr(s: string): void;
}

export interface RunningPolicyServer {
  https: PolicyHttpsServer;
  replica: Replica;
  stop(): Promise<void>;
}

/** Starts everything; resolves once the HTTPS server listens. */
export async function startPolicyServer(
  config: PolicyServerConfig,
  baseLogger = createLogger(config.logLevel),
): Promise<RunningPolicyServer> {
  const logger = baseLogger.child({ server: config.server, pod: config.pod });
  const api = await loadApiTarget(config.kubeconfig);
  const metrics = new PolicyServerMetrics();
  const compile: Compile = compileWithinBudget;

  const publisher = reportPublisher(config, api, metrics, logger);
  const replica = new Replica({
    api,
    server: config.server,
    logger,
    metrics,
    load: {
      compile,
      // This replica's own allowances, and its server's name in what it refuses.
      fetch: (source, options) =>
        fetchSource(source, {
          ...options,
          allowances: config.sources,
          policyServer: config.server,
        }),
    },
    publish: (report) => publisher.publish(report),
  });
  const namespaces = new NamespaceCache({ api, logger });
  const { pool, inline } = evaluators(config, metrics, logger);
  const https = await startHttpsServer({
    port: config.port,
    address: config.address,
    logger,
    metrics,
    clientCaFile: config.clientCaFile,
    limits: {
      maxReviewBytes: config.maxReviewBytes,
      maxConnections: config.maxConnections,
      maxInFlight: config.maxInFlight,
      tlsHandshakeTimeoutMs: config.tlsHandshakeTimeoutSeconds * 1000,
    },
    readiness: () => {
      const r = replica.readiness();
      if (!r.ready) return r;
      if (!pool.warm()) return { ready: false, detail: 'evaluation threads are starting' };
      const ns = namespaces.readiness();
      if (!ns.ready) return { ready: false, detail: ns.detail ?? '' };
      return ns.detail ? { ready: true, detail: `${r.detail}; ${ns.detail}` } : r;
    },
    admission: {
      target: (policy, generation) => replica.target(policy, generation),
      namespace: (name) => namespaces.get(name),
      evaluate: (job, ms) => pool.evaluate(job, ms),
      inline: (job) => inline.evaluate(job),
    },
  });
  let first = true;
  const tls = new TlsReloader({
    dir: config.tlsDir,
    onChange: (pair) => {
      https.setCertificate(pair);
      logger.info(
        { dir: config.tlsDir },
        first ? 'serving certificate loaded' : 'serving certificate reloaded',
      );
      first = false;
    },
    onError: (message) => logger.error({ dir: config.tlsDir }, message),
  });
  await tls.start();
  replica.start();
  namespaces.start();
  logger.info({ port: https.port, address: config.address }, 'policy server started');

  return {
    https,
    replica,
    async stop() {
      tls.stop();
      await https.close();
      publisher.stop();
      await Promise.all([replica.stop(), namespaces.stop()]);
      await pool.close();
    },
  };
}

/** Publishes this replica's report on its own pod, retrying until it lands. */
function reportPublisher(
  config: PolicyServerConfig,
  api: ApiTarget,
  metrics: PolicyServerMetrics,
  logger: Logger,
): ReportPublisher {
  return new ReportPublisher({
    patch: async (value) => {
      const pod = `/api/v1/namespaces/${config.namespace}/pods/${config.pod}`;
      await requestJson(api, 'PATCH', pod, {
        contentType: 'application/merge-patch+json',
        body: { metadata: { annotations: { [REPORT_ANNOTATION]: value } } },
      });
    },
    onPublished: (value) => {
      metrics.reportWrite('ok');
      logger.debug({ report: value }, 'report published');
    },
    onError: (err, attempt) => {
      metrics.reportWrite('error');
      logger.warn(
        { err: (err as Error).message, attempt, pod: `${config.namespace}/${config.pod}` },
        'could not publish the report; retrying',
      );
    },
  });
}

/** The two ways a request is evaluated: inline on the main thread, or in the thread pool. */
function evaluators(config: PolicyServerConfig, metrics: PolicyServerMetrics, logger: Logger) {
  const pool = new EvaluationPool({
    size: config.workers,
    max: config.maxWorkers,
    onWorkerLost: (reason, detail) => {
      metrics.workerLost(reason);
      logger.warn({ reason, detail }, 'evaluation thread replaced');
    },
  });
  metrics.watchPool(() => pool.stats());
  const inline = new InlineEvaluator({
    maxBodyBytes: config.inlineMaxBytes,
    onClassified: (key, bound) =>
      logger.info(
        bound.bounded ? { key, path: 'inline' } : { key, path: 'pool', reason: bound.reason },
        bound.bounded
          ? 'policy generation is bounded: small requests are evaluated inline'
          : 'policy generation is not bounded: evaluated in the thread pool',
      ),
  });
  return { pool, inline };
}

/** Resolves on the first SIGTERM or SIGINT. */
const terminated = () =>
  new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });

export async function run(argv: readonly string[], io: Io): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    io.stdout(`${policyServerHelp}\n`);
    return 0;
  }
  let config: PolicyServerConfig;
  try {
    config = parsePolicyServerConfig(argv, process.env);
  } catch (err) {
    if (err instanceof PolicyServerConfigError) {
      io.stderr(`rollcall policy-server: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const logger = createLogger(config.logLevel);
  const running = await startPolicyServer(config, logger);
  // A bug must not take admission down with the process: log it and keep serving.
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled rejection'));
  await terminated();
  await running.stop();
  return 0;
}
