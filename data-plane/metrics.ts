// The policy server's Prometheus metrics.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EvaluationPath } from './admission.ts';
import type { VerdictLabel } from './verdict.ts';

/** Each metric's HELP line, by name. */
const HELP = {
  rollcall_policy_server_audit_evaluations_total:
    'Existing objects judged for the continuous audit (POST /audit), by policy',
  rollcall_admission_requests_total:
    'AdmissionReview requests answered, by policy, generation and verdict (allowed|denied|error|timeout|cost)',
  rollcall_admission_duration_seconds:
    'Time from a request’s last body byte to its answer, by policy and evaluation path (inline|pool|none)',
  rollcall_policy_load_duration_seconds:
    'Time to load one policy generation (download and compile), by source (inline|url|none) and outcome',
  rollcall_policy_load_failures_total: 'Policy generations that failed to load, by policy',
  rollcall_evaluation_threads_lost_total:
    'Evaluation threads terminated at a deadline (timeout) or that died (crash)',
  rollcall_report_writes_total: 'Patches of the pod’s report annotation, by result (ok|error)',
  rollcall_connections_refused_total:
    'Connections closed unanswered because --max-connections were open',
  rollcall_tls_handshake_failures_total:
    'TLS handshakes that failed, by reason (timeout: not finished within --tls-handshake-timeout-seconds; error)',
  rollcall_admission_refused_total:
    'AdmissionReview requests not evaluated, by reason (overloaded: past --max-in-flight or a policy’s half of it, answered by failurePolicy; too_large: past --max-review-bytes, HTTP 413)',
  rollcall_open_connections:
    'Connections open now, accepted or handed over, TLS handshakes included',
  rollcall_admission_requests_in_flight:
    'AdmissionReview requests being answered now (received whole, not yet answered)',
  rollcall_evaluation_threads: 'Evaluation threads, by state (busy|idle)',
  rollcall_evaluation_queued_requests: 'Admission requests waiting for an evaluation thread',
} as const;

type MetricName = keyof typeof HELP;

export class PolicyServerMetrics {
  readonly registry = new Registry();
  readonly #requests: Counter<'policy' | 'generation' | 'verdict'>;
  readonly #latency: Histogram<'policy' | 'path'>;
  readonly #loadDuration: Histogram<'source' | 'state'>;
  readonly #loadFailures: Counter<'policy'>;
  readonly #workersLost: Counter<'reason'>;
  readonly #reportWrites: Counter<'result'>;
  readonly #connectionsRefused: Counter;
  readonly #handshakeFailures: Counter<'reason'>;
  readonly #admissionRefused: Counter<'reason'>;
  readonly #audited: Counter<'policy'>;
  #ingress: () => { connections: number; inFlight: number } = () => ({
    connections: 0,
    inFlight: 0,
  });

  constructor() {
    // Includes nodejs_eventloop_lag_{min,max,mean,p50,p90,p99}_seconds (monitorEventLoopDelay,
    // sampled every 10 ms, so an idle loop reads ~0.010; reset at each scrape).
    collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    const counter = <Label extends string>(name: MetricName, labelNames: Label[]) =>
      new Counter({ name, help: HELP[name], labelNames, registers });
    const histogram = <Label extends string>(
      name: MetricName,
      labelNames: Label[],
      buckets: number[],
    ) => new Histogram({ name, help: HELP[name], labelNames, buckets, registers });

    this.#requests = counter('rollcall_admission_requests_total', [
      'policy',
      'generation',
      'verdict',
    ]);
    this.#latency = histogram(
      'rollcall_admission_duration_seconds',
      ['policy', 'path'],
      [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    );
    this.#loadDuration = histogram(
      'rollcall_policy_load_duration_seconds',
      ['source', 'state'],
      [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
    );
    this.#loadFailures = counter('rollcall_policy_load_failures_total', ['policy']);
    this.#workersLost = counter('rollcall_evaluation_threads_lost_total', ['reason']);
    this.#reportWrites = counter('rollcall_report_writes_total', ['result']);
    this.#connectionsRefused = counter('rollcall_connections_refused_total', []);
    this.#handshakeFailures = counter('rollcall_tls_handshake_failures_total', ['reason']);
    this.#admissionRefused = counter('rollcall_admission_refused_total', ['reason']);
    this.#audited = counter('rollcall_policy_server_audit_evaluations_total', ['policy']);
    this.#gauge('rollcall_open_connections', () => this.#ingress().connections);
    this.#gauge('rollcall_admission_requests_in_flight', () => this.#ingress().inFlight);
  }

  /** A gauge without labels, read at scrape time. */
  #gauge(name: MetricName, read: () => number): void {
    new Gauge({
      name,
      help: HELP[name],
      registers: [this.registry],
      collect() {
        this.set(read());
      },
    });
  }

  /** One answer; `path` says where it was evaluated (none: a generation not loaded here). */
  admission(
    policy: string,
    generation: number,
    verdict: VerdictLabel,
    seconds: number,
    path: EvaluationPath | 'none' = 'none',
  ): void {
    this.#requests.inc({ policy, generation: String(generation), verdict });
    this.#latency.observe({ policy, path }, seconds);
  }

  loaded(policy: string, source: string, state: 'Loaded' | 'Failed', seconds: number): void {
    this.#loadDuration.observe({ source, state }, seconds);
    if (state === 'Failed') this.#loadFailures.inc({ policy });
  }

  workerLost(reason: 'timeout' | 'crash'): void {
    this.#workersLost.inc({ reason });
  }

  /** Exposes the evaluation pool's threads (busy, idle) and queued requests, read at scrape time. */
  watchPool(stats: () => { threads: number; busy: number; queued: number }): void {
    const name = 'rollcall_evaluation_threads';
    new Gauge({
      name,
      help: HELP[name],
      labelNames: ['state'],
      registers: [this.registry],
      collect() {
        const { threads, busy } = stats();
        this.set({ state: 'busy' }, busy);
        this.set({ state: 'idle' }, threads - busy);
      },
    });
    this.#gauge('rollcall_evaluation_queued_requests', () => stats().queued);
  }

  reportWrite(result: 'ok' | 'error'): void {
    this.#reportWrites.inc({ result });
  }

  /** Exposes the HTTPS server's open connections and requests in flight, read at scrape time. */
  watchIngress(stats: () => { connections: number; inFlight: number }): void {
    this.#ingress = stats;
  }

  connectionRefused(): void {
    this.#connectionsRefused.inc();
  }

  handshakeFailed(reason: 'timeout' | 'error'): void {
    this.#handshakeFailures.inc({ reason });
  }

  audited(policy: string): void {
    this.#audited.inc({ policy });
  }

  admissionRefused(reason: 'overloaded' | 'too_large'): void {
    this.#admissionRefused.inc({ reason });
  }
}
