// estimateCost: a static, size-aware upper bound of what each expression of a policy costs at
// the smallest request, computed once at load (docs/cel.md, "Cost"). Every value read from
// the request counts as size 1, `params` as the policy's real settings, literals as they are;
// each operation's result size follows from its operands' sizes, so a chain that doubles a
// value doubles its estimate. A policy whose estimate exceeds REQUEST_COST_BUDGET fails to
// load (costProblem), as the apiserver refuses an over-budget CEL rule at write time; what
// grows with the request is left to the runtime meter.
import type { ASTNode, BinaryOperator } from '@marcbachmann/cel-js';
import { formatCost, REQUEST_COST_BUDGET } from './budget.ts';
import {
  compilePolicy,
  requestExpressions,
  type CompiledExpression,
  type CompiledPolicy,
  type CompileResult,
  type PolicyCode,
} from './compile.ts';
import {
  knownBound,
  knownChild,
  sizedAs,
  times,
  UNIT,
  type Bound,
  type KnownCache,
} from './estimate-bounds.ts';
import { callOutcome, COMPREHENSIONS } from './estimate-functions.ts';
import { callOf, COMPARISONS, type Call } from './syntax.ts';
import { children } from './unsupported.ts';

export { deepSize } from './estimate-bounds.ts';
export { ESTIMATED_FUNCTIONS } from './estimate-functions.ts';

interface Estimate extends Bound {
  /** Cost units to evaluate the node once, a variable read counting 1 (see estimateCost). */
  cost: number;
}

export interface ExpressionEstimate {
  /** Where it is in the policy, e.g. `spec.variables[3].expression`. */
  fieldPath: string;
  /** What one evaluation costs at most, with the variables it reads (each counted once). */
  cost: number;
  /** The largest size its result may have. */
  size: number;
}

export interface PolicyEstimate {
  /** Variables in declaration order, then match conditions, validations and their messages. */
  expressions: ExpressionEstimate[];
  /** All of a request's expressions together: each variable they read counts once. */
  total: number;
}

/** Checked types whose values have size 1 (they hold no string the policy can read back). */
const SCALAR_TYPES = new Set([
  'int',
  'uint',
  'double',
  'bool',
  'null',
  'type',
  'google.protobuf.Timestamp',
  'google.protobuf.Duration',
  'Quantity',
]);

/** Constants that name a library (`cel.bind`, `strings.quote`, `optional.of`), not data. */
const NAMESPACES = new Set(['cel', 'strings', 'optional']);

const isScalarType = (node: ASTNode): boolean => {
  const type = (node as { checkedType?: { name?: unknown } }).checkedType?.name;
  return typeof type === 'string' && SCALAR_TYPES.has(type);
};

/** What estimating one expression needs: the policy's variables so far, and what it reads. */
interface Context {
  params: Bound;
  known: KnownCache;
  variables: ReadonlyMap<string, Bound>;
  /** Names of the variables the expression reads, filled in by the walk. */
  reads: Set<string>;
}

type Locals = ReadonlyMap<string, Bound>;

const withLocal = (locals: Locals, name: string, bound: Bound): Locals =>
  new Map(locals).set(name, bound);

/** Operators with two operands; a chain of them nests to the left without a depth limit. */
type BinaryNode = Extract<ASTNode, { op: BinaryOperator | '&&' | '||' }>;
const BINARY = new Set<string>(['+', '-', '*', '/', '%', ...COMPARISONS, 'in', '&&', '||']);
const isBinary = (node: ASTNode): node is BinaryNode => BINARY.has(node.op);

function walk(node: ASTNode, locals: Locals, context: Context): Estimate {
  if (isBinary(node)) return binaryChain(node, locals, context);
  if (node.op === '!_' || node.op === '-_') {
    // `!!!!x` nests without a depth limit too: count the operators instead of recursing.
    let operand: ASTNode = node;
    let operators = 0;
    for (; operand.op === '!_' || operand.op === '-_'; operators++) operand = operand.args;
    return { ...UNIT, cost: operators + walk(operand, locals, context).cost };
  }
  return typed(node, estimateNode(node, locals, context));
}

/** Values of a checked scalar type have size 1, whatever their operands' sizes. */
function typed(node: ASTNode, estimate: Estimate): Estimate {
  if (!isScalarType(node)) return estimate;
  return { ...UNIT, cost: estimate.cost, ...(estimate.known && { known: estimate.known }) };
}

/**
 * `a + b + c ...` (any binary operators): the parser nests them to the left, as deep as the
 * expression is long (maxDepth does not count them), so the chain is folded in a loop.
 */
function binaryChain(node: BinaryNode, locals: Locals, context: Context): Estimate {
  const chain: BinaryNode[] = [];
  let leftmost: ASTNode = node;
  for (; isBinary(leftmost); leftmost = leftmost.args[0]) chain.push(leftmost);
  let left = walk(leftmost, locals, context);
  for (const operation of chain.reverse()) {
    const right = walk(operation.args[1], locals, context);
    left = typed(operation, binary(operation.op, left, right));
  }
  return left;
}

function binary(op: BinaryNode['op'], a: Estimate, b: Estimate): Estimate {
  const cost = 1 + a.cost + b.cost;
  switch (op) {
    case '+': {
      // Concatenation: strings, bytes or lists; the copy costs the result's size.
      const size = a.size + b.size;
      return {
        size,
        count: a.count + b.count,
        element: Math.max(a.element, b.element),
        cost: cost + size,
      };
    }
    case '==':
    case '!=':
    case '<':
    case '<=':
    case '>':
    case '>=':
      // A comparison stops at the end of the smaller operand.
      return { ...UNIT, cost: cost + Math.min(a.size, b.size) };
    case 'in':
      // Each element compared with the item.
      return { ...UNIT, cost: cost + times(b.count, 1 + Math.min(a.size, b.element)) };
    default:
      // && || and arithmetic: scalar results.
      return { ...UNIT, cost };
  }
}

function estimateNode(node: ASTNode, locals: Locals, context: Context): Estimate {
  switch (node.op) {
    case 'value':
      return { ...knownBound(node.args), cost: 1 };
    case 'id': {
      const local = locals.get(node.args);
      if (local) return { ...local, cost: 1 };
      if (node.args === 'params') return { ...context.params, cost: 1 };
      if (node.args === 'variables') {
        // `variables` as a value (`dyn(variables).x`, `variables[k]`): any of them may be read.
        for (const name of context.variables.keys()) context.reads.add(name);
        return { ...allVariables(context.variables), cost: 1 };
      }
      // The request's values are unit-sized; other names are libraries and type names.
      return { ...UNIT, cost: 1 };
    }
    case '.':
    case '.?': {
      const [operand, field] = node.args;
      if (isVariables(operand, locals)) return readVariable(field, node.op === '.?', context);
      const o = walk(operand, locals, context);
      const cost = o.cost + 1;
      if (node.op === '.?') return { ...sizedAs(o.element + 1), cost };
      const child = o.known && knownChild(o.known.value, field);
      return { ...(child ? knownBound(child.value, context.known) : sizedAs(o.element)), cost };
    }
    case '[]':
    case '[?]': {
      const [container, key] = node.args;
      if (isVariables(container, locals) && key.op === 'value' && typeof key.args === 'string')
        return readVariable(key.args, node.op === '[?]', context);
      const c = walk(container, locals, context);
      const k = walk(key, locals, context);
      // Looking a key up hashes or compares it.
      const cost = c.cost + k.cost + 1 + k.size;
      if (node.op === '[?]') return { ...sizedAs(c.element + 1), cost };
      const child = c.known && k.known && knownChild(c.known.value, k.known.value);
      return { ...(child ? knownBound(child.value, context.known) : sizedAs(c.element)), cost };
    }
    case 'list': {
      const items = node.args.map((item) => walk(item, locals, context));
      return aggregate(items, items.length);
    }
    case 'map': {
      const items = node.args.flatMap(([k, v]) => [
        walk(k, locals, context),
        walk(v, locals, context),
      ]);
      return aggregate(items, node.args.length);
    }
    case '?:': {
      const [condition, a, b] = node.args.map((n) => walk(n, locals, context)) as [
        Estimate,
        Estimate,
        Estimate,
      ];
      // One branch runs.
      return {
        size: Math.max(a.size, b.size),
        count: Math.max(a.count, b.count),
        element: Math.max(a.element, b.element),
        cost: 1 + condition.cost + Math.max(a.cost, b.cost),
      };
    }
    case 'call':
    case 'rcall':
      return estimateCall(callOf(node)!, locals, context);
    default: {
      // Operators walk handles; anything else is scalar.
      const parts = children(node).map((n) => walk(n, locals, context));
      return { ...UNIT, cost: 1 + parts.reduce((total, p) => total + p.cost, 0) };
    }
  }
}

const isVariables = (node: ASTNode, locals: Locals): boolean =>
  node.op === 'id' && node.args === 'variables' && !locals.has('variables');

/**
 * `variables.name` (or `variables['name']`, or optional): evaluated once per request, so its
 * cost counts once for the expression (see estimateCost), not per read.
 */
function readVariable(name: string, optional: boolean, context: Context): Estimate {
  const bound = context.variables.get(name);
  // Not declared (only an optional read type-checks): none at run time, nothing evaluated.
  if (!bound) return { ...sizedAs(1), cost: 2 };
  context.reads.add(name);
  return { ...(optional ? sizedAs(bound.size + 1) : bound), cost: 2 };
}

/** `variables` itself: a map from the names declared so far to their values. */
function allVariables(variables: ReadonlyMap<string, Bound>): Bound {
  let size = 1;
  let element = 1;
  for (const [name, bound] of variables) {
    size += name.length + bound.size;
    element = Math.max(element, name.length, bound.size);
  }
  return { size, count: variables.size, element };
}

/** A list or map literal: its items (map keys and values), allocated once. */
function aggregate(items: Estimate[], count: number): Estimate {
  const size = 1 + items.reduce((total, i) => total + i.size, 0);
  const element = items.reduce((max, i) => Math.max(max, i.size), 1);
  const cost = 1 + items.reduce((total, i) => total + i.cost, 0) + size;
  return { size, count, element, cost };
}

function estimateCall(call: Call, locals: Locals, context: Context): Estimate {
  const { name, receiver, args } = call;
  let operandNodes = call.operands;
  let receiverCost = 0;
  if (!receiver) {
    if (name === 'has' && args[0]) {
      // has(a.b) evaluates `a` and looks `b` up.
      return { ...UNIT, cost: 1 + walk(args[0], locals, context).cost };
    }
  } else {
    if (COMPREHENSIONS.has(name) && args[0]?.op === 'id')
      return comprehension(name, receiver, args[0].args, args.slice(1), locals, context);
    const namespace =
      receiver.op === 'id' && NAMESPACES.has(receiver.args) && !locals.has(receiver.args);
    if (namespace && name === 'bind' && receiver.args === 'cel' && args.length === 3) {
      const [variable, value, body] = args as [ASTNode, ASTNode, ASTNode];
      if (variable.op === 'id') return bind(variable.args, value, body, locals, context);
    }
    // A library's name (`strings` of `strings.quote(s)`) is not data: one unit, not walked.
    if (namespace) {
      receiverCost = 1;
      operandNodes = args;
    }
  }
  const operands = operandNodes.map((n) => walk(n, locals, context));
  const { work, ...bound } = callOutcome(name, operands);
  const cost =
    1 + receiverCost + operands.reduce((total, o) => total + o.cost, 0) + work + bound.size;
  return { ...bound, cost };
}

/**
 * `range.all(x, body)` and the other macros: the body runs once per element, with `x` as large
 * as an element. A map's result holds a transform per element; a filter's, some elements.
 */
function comprehension(
  name: string,
  receiver: ASTNode,
  variable: string,
  body: ASTNode[],
  locals: Locals,
  context: Context,
): Estimate {
  const range = walk(receiver, locals, context);
  const inner = withLocal(locals, variable, sizedAs(range.element));
  const parts = body.map((n) => walk(n, inner, context));
  const perElement = 1 + parts.reduce((total, p) => total + p.cost, 0);
  const cost = 1 + range.cost + times(range.count, perElement);
  if (name === 'map') {
    const transform = parts.at(-1)?.size ?? 1;
    const size = 1 + times(range.count, transform);
    return { size, count: range.count, element: transform, cost: cost + size };
  }
  if (name === 'filter') {
    const { size, count, element } = range;
    return { size, count, element, cost: cost + size };
  }
  return { ...UNIT, cost };
}

/** `cel.bind(name, value, body)`: the value is computed once, and `name` is as large as it. */
function bind(
  variable: string,
  value: ASTNode,
  body: ASTNode,
  locals: Locals,
  context: Context,
): Estimate {
  const bound = walk(value, locals, context);
  const { cost: valueCost, ...valueBound } = bound;
  const result = walk(body, withLocal(locals, variable, valueBound), context);
  return { ...result, cost: 2 + valueCost + result.cost };
}

/**
 * An upper bound of each expression's cost and result size at the smallest request: every
 * value read from `object`, `oldObject`, `request` or `namespaceObject` has size 1, `params`
 * is `params` itself (the policy's settings, as JSON). Cost units: 1 per node evaluated, plus
 * the size of each string, bytes, list or map an operation builds, plus what comparisons,
 * membership tests and functions read (linear in their operands); a comprehension's body
 * counts once per element of its range. An expression's cost includes the variables it reads,
 * directly or through other variables, once each (they are evaluated once per request).
 */
export function estimateCost(policy: CompiledPolicy, params: unknown): PolicyEstimate {
  const known: KnownCache = new WeakMap();
  const paramsBound = knownBound(params ?? null, known);
  const variables = new Map<string, Bound>();
  /** Each variable's own cost and the variables it reads, transitively. */
  const own = new Map<string, { cost: number; reads: ReadonlySet<string> }>();
  const expressions: ExpressionEstimate[] = [];

  const estimate = (expression: CompiledExpression) => {
    const reads = new Set<string>();
    const result = walk(expression.program.ast, new Map(), {
      params: paramsBound,
      known,
      variables,
      reads,
    });
    for (const name of [...reads]) for (const r of own.get(name)?.reads ?? []) reads.add(r);
    const { cost: _cost, ...bound } = result;
    return { cost: result.cost, bound, reads };
  };
  const inclusive = (cost: number, reads: ReadonlySet<string>) =>
    [...reads].reduce((total, name) => total + (own.get(name)?.cost ?? Infinity), cost);

  for (const { name, expression } of policy.variables) {
    const { cost, bound, reads } = estimate(expression);
    expressions.push({
      fieldPath: expression.fieldPath,
      cost: inclusive(cost, reads),
      size: bound.size,
    });
    variables.set(name, bound);
    own.set(name, { cost, reads });
  }
  let total = 0;
  const read = new Set<string>();
  for (const expression of requestExpressions(policy)) {
    const { cost, bound, reads } = estimate(expression);
    expressions.push({
      fieldPath: expression.fieldPath,
      cost: inclusive(cost, reads),
      size: bound.size,
    });
    total += cost;
    for (const name of reads) read.add(name);
  }
  return { expressions, total: inclusive(total, read) };
}

/** Where a policy's expressions are (`spec`, or `document` for a source bundle). */
function policyPath(policy: CompiledPolicy): string {
  const first = policy.validations[0]?.expression.fieldPath ?? 'spec';
  return first.replace(/\.validations\[0\]\.expression$/, '');
}

/**
 * Why `policy` with these settings may not load: the first expression, in evaluation order,
 * whose estimate exceeds the budget, as `spec.variables[23].expression: estimated cost 2^24
 * exceeds the per-request budget 10^7`; or all of a request's expressions together. Undefined
 * when it fits.
 */
export function costProblem(
  policy: CompiledPolicy,
  params: unknown,
  budget = REQUEST_COST_BUDGET,
): string | undefined {
  const { expressions, total } = estimateCost(policy, params);
  const limit = `exceeds the per-request budget ${formatCost(budget)}`;
  const over = expressions.find((e) => !(e.cost <= budget));
  if (over) return `${over.fieldPath}: estimated cost ${formatCost(over.cost)} ${limit}`;
  if (!(total <= budget))
    return `${policyPath(policy)}: estimated cost ${formatCost(total)} of all expressions together ${limit}`;
  return undefined;
}

/**
 * compilePolicy, then the cost estimate with the policy's settings: what loading a policy
 * checks. An over-budget policy fails with costProblem's message as its one error.
 */
export function compileWithinBudget(
  code: PolicyCode,
  fieldPath = 'spec',
  params: unknown = null,
): CompileResult {
  const result = compilePolicy(code, fieldPath);
  if (!result.ok) return result;
  const problem = costProblem(result.policy, params);
  return problem ? { ok: false, errors: [problem] } : result;
}
