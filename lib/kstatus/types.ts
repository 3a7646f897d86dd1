/**
 * kstatus' vocabulary (sigs.k8s.io/cli-utils pkg/kstatus/status).
 *
 * - InProgress: the object is converging; a Reconciling condition says why.
 * - Failed: it will not converge without a change; a Stalled condition says why.
 * - Current: the desired state is reached.
 * - Terminating: it has a deletionTimestamp.
 * - NotFound: it does not exist.
 * - Unknown: its state cannot be read (malformed status, unknown pod phase, ...).
 */
const KSTATUSES = [
  'InProgress',
  'Failed',
  'Current',
  'Terminating',
  'NotFound',
  'Unknown',
] as const;
export type KStatus = (typeof KSTATUSES)[number];

/** The abnormal-true conditions kstatus reports: at most one, always status "True". */
export interface KStatusCondition {
  type: 'Reconciling' | 'Stalled';
  status: 'True';
  reason: string;
  message: string;
}

export interface KStatusResult {
  status: KStatus;
  message: string;
  conditions: KStatusCondition[];
}

export interface ComputeOptions {
  /** The clock: a Pending, unschedulable pod younger than the schedule window is still InProgress. */
  now: Date;
}
