// The policy server's Prometheus metrics.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EvaluationPath } from './admission.ts';
import type { VerdictLabel } from './verdict.ts';

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
  #ingress: () => { connections: number; inFlight: number } = () => ({
    connections: 0,
    inFlight: 0,
  });

  constructor() {
    const registers = [this.registry];
    // Includes nodejs_eventloop_lag_{min,max,mean,p50,p90,p99}_seconds (monitorEventLoopDelay,
    // sampled every 10 ms, so an idle loop reads ~0.010; reset at each scrape).
    collectDefaultMetrics({ register: this.registry });
    this.#requests = new Counter({
      name: 'rollcall_admission_requests_total',
      help: 'AdmissionReview requests answered, by policy, generation and verdict (allowed|denied|error|timeout|cost)',
      labelNames: ['policy', 'generation', 'verdict'],
      registers,
    });
    this.#latency = new Histogram({
      name: 'rollcall_admission_duration_seconds',
      help: 'Time from a request’s last body byte to its answer, by policy and evaluation path (inline|pool|none)',
      labelNames: ['policy', 'path'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.#loadDuration = new Histogram({
      name: 'rollcall_policy_load_duration_seconds',
      help: 'Time to load one policy generation (download and compile), by source (inline|url|none) and outcome',
      labelNames: ['source', 'state'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
      registers,
    });
    this.#loadFailures = new Counter({
      name: 'rollcall_policy_load_failures_total',
      help: 'Policy generations that failed to load, by policy',
      labelNames: ['policy'],
      registers,
    });
    this.#workersLost = new Counter({
      name: 'rollcall_evaluation_threads_lost_total',
      help: 'Evaluation threads terminated at a deadline (timeout) or that died (crash)',
      labelNames: ['reason'],
      registers,
    });
    this.#reportWrites = new Counter({
      name: 'rollcall_report_writes_total',
      help: 'Patches of the pod’s report annotation, by result (ok|error)',
      labelNames: ['result'],
      registers,
    });
    this.#connectionsRefused = new Counter({
      name: 'rollcall_connections_refused_total',
      help: 'Connections closed unanswered because --max-connections were open',
      registers,
    });
    this.#handshakeFailures = new Counter({
      name: 'rollcall_tls_handshake_failures_total',
      help: 'TLS handshakes that failed, by reason (timeout: not finished within --tls-handshake-timeout-seconds; error)',
      labelNames: ['reason'],
      registers,
    });
    this.#admissionRefused = new Counter({
      name: 'rollcall_admission_refused_total',
      help: 'AdmissionReview requests not evaluated, by reason (overloaded: past --max-in-flight or a policy’s half of it, answered by failurePolicy; too_large: past --max-review-bytes, HTTP 413)',
      labelNames: ['reason'],
      registers,
    });
    const ingress = () => this.#ingress();
    new Gauge({
      name: 'rollcall_open_connections',
      help: 'Connections open now, accepted or handed over, TLS handshakes included',
      registers,
      collect() {
        this.set(ingress().connections);
      },
    });
    new Gauge({
      name: 'rollcall_admission_requests_in_flight',
      help: 'AdmissionReview requests being answered now (received whole, not yet answered)',
      registers,
      collect() {
        this.set(ingress().inFlight);
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
    new Gauge({
      name: 'rollcall_evaluation_threads',
      help: 'Evaluation threads, by state (busy|idle)',
      labelNames: ['state'],
      registers: [this.registry],
      collect() {
        const { threads, busy } = stats();
        this.set({ state: 'busy' }, busy);
        this.set({ state: 'idle' }, threads - busy);
      },
    });
    new Gauge({
      name: 'rollcall_evaluation_queued_requests',
      help: 'Admission requests waiting for an evaluation thread',
      registers: [this.registry],
      collect() {
        this.set(stats().queued);
      },
    });
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

  admissionRefused(reason: 'overloaded' | 'too_large'): void {
    this.#admissionRefused.inc({ reason });
  }
}
