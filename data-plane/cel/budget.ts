// The cost budgets of a policy's evaluation, shared by the static estimate at load
// (estimate.ts) and the runtime meter (meter.ts), and how a cost reads in a message.

/**
 * Cost units one request may spend on one policy, all expressions together (match conditions,
 * variables once each, validations, message expressions): Kubernetes' RuntimeCELCostBudget.
 * The static estimate refuses a policy over it at load; the runtime meter stops an evaluation
 * past it.
 */
export const REQUEST_COST_BUDGET = 10_000_000;

/** `2^31` near a power of two, `10^7` for a power of ten, else `1.7e9` (plain below 10,000). */
export function formatCost(cost: number): string {
  if (!Number.isFinite(cost)) return 'unbounded';
  if (cost < 10_000) return String(Math.round(cost));
  const log2 = Math.round(Math.log2(cost));
  if (Math.abs(cost - 2 ** log2) <= cost * 0.01) return `2^${log2}`;
  const log10 = Math.round(Math.log10(cost));
  if (Math.abs(cost - 10 ** log10) <= cost * 0.01) return `10^${log10}`;
  return cost.toExponential(1).replace('+', '');
}
