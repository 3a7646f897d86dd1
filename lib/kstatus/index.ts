export * from './types.ts';
export { computeStatus, aggregateStatus } from './compute.ts';
export { KIND_RULES, SCHEDULE_WINDOW_MS, groupKindKey } from './kinds.ts';
export type { KindRule } from './kinds.ts';
export * from './conditions.ts';
