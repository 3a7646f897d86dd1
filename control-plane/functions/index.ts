// Every reconcile function rollcall runs: the watcher watches the kinds they declare and the
// worker runs their handlers. Adding one: its pure core (<name>-core.ts), its shell (<name>.ts:
// a ReconcileFunction with its key prefix, the kinds it watches and what their events map to,
// and its handler) and a line here; a kind nobody watched before also needs an entry in
// control-plane/registry.ts (its checklist says what else).
import { audit } from './audit.ts';
import { auditSummary } from './audit-summary.ts';
import { fanOut } from './fan-out.ts';
import { policy } from './policy.ts';
import { policyServer } from './policyserver.ts';
import type { ReconcileFunction } from './types.ts';
import { webhook } from './webhook.ts';

export const functions: readonly ReconcileFunction[] = [
  policyServer,
  policy,
  webhook,
  fanOut,
  audit,
  auditSummary,
];
