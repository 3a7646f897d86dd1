// rollcall's CEL engine: policies shaped like Kubernetes' ValidatingAdmissionPolicy, compiled
// once at load time and evaluated per admission request. See docs/cel.md.
export {
  compilePolicy,
  policyExpressions,
  requestExpressions,
  REASON_CODES,
  type CompiledPolicy,
  type CompileResult,
  type MatchCondition,
  type PolicyCode,
  type Validation,
  type Variable,
} from './compile.ts';
export { costBound, type CostBound } from './cost.ts';
export {
  compileWithinBudget,
  costProblem,
  estimateCost,
  type ExpressionEstimate,
  type PolicyEstimate,
} from './estimate.ts';
export { EvaluationError } from './errors.ts';
export {
  evaluatePolicy,
  type AdmissionInput,
  type EvaluateOptions,
  type Verdict,
} from './evaluate.ts';
export { toCelValue } from './json-values.ts';
export { CostLimitExceeded } from './meter.ts';
