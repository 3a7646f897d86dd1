// costBound: a static analysis of a compiled policy that says whether its evaluation cost is
// linear in the request's size with a small constant, so that it may run on the policy
// server's main thread without a deadline (docs/cel.md, "Cost"). Conservative: what it cannot
// tell is not bounded, and goes to the evaluation threads.
import type { ASTNode } from '@marcbachmann/cel-js';
import { requestExpressions, type CompiledExpression, type CompiledPolicy } from './compile.ts';
import { superlinearRegex } from './regex.ts';
import { callOf, COMPARISONS } from './syntax.ts';
import { children } from './unsupported.ts';

export type CostBound = { bounded: true } | { bounded: false; reason: string };

/** The macros the CEL library expands into a comprehension (a loop over their receiver). */
const COMPREHENSIONS = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);

/**
 * Constant cost, or at most the smaller operand's size (a comparison stops at the first
 * difference, startsWith at the prefix's end): never more per call than what is compared.
 */
const CHEAP = new Set([
  'has',
  'dyn',
  'type',
  'startsWith',
  'endsWith',
  // optional values
  'of',
  'none',
  'hasValue',
  'value',
  'orValue',
  'or',
  // timestamp and duration fields
  'getDate',
  'getDayOfMonth',
  'getDayOfWeek',
  'getDayOfYear',
  'getFullYear',
  'getHours',
  'getMilliseconds',
  'getMinutes',
  'getMonth',
  'getSeconds',
  // Quantity and URL fields
  'add',
  'sub',
  'compareTo',
  'isGreaterThan',
  'isLessThan',
  'sign',
  'isInteger',
  'asInteger',
  'asApproximateFloat',
  'getScheme',
  'getHost',
  'getHostname',
  'getPort',
  'getEscapedPath',
]);

/** Cost (and result size) linear in the operands: once per request it is linear in the body. */
const LINEAR = new Set([
  'size',
  'contains',
  'lowerAscii',
  'upperAscii',
  'trim',
  'indexOf',
  'lastIndexOf',
  'substring',
  'split',
  'join',
  'charAt',
  'reverse',
  'quote',
  'replace',
  'format',
  'matches',
  'find',
  'findAll',
  'string',
  'bytes',
  'bool',
  'int',
  'uint',
  'double',
  'timestamp',
  'duration',
  'url',
  'isURL',
  'quantity',
  'isQuantity',
  'getQuery',
  'sum',
  'min',
  'max',
  'isSorted',
  'hex',
  'base64',
  'json',
  'at',
]);

/** Functions whose result is a bool or a number, whatever the size of their operands. */
const SCALAR = new Set([
  'has',
  'size',
  'contains',
  'startsWith',
  'endsWith',
  'matches',
  'indexOf',
  'lastIndexOf',
  'isSorted',
  'isURL',
  'isQuantity',
  'isInteger',
  'asInteger',
  'asApproximateFloat',
  'sign',
  'compareTo',
  'isGreaterThan',
  'isLessThan',
  'hasValue',
  'bool',
  'int',
  'uint',
  'double',
  'all',
  'exists',
  'exists_one',
]);

/** Operators that cost O(1) or at most the smaller operand's size, with a scalar result. */
const CHEAP_OPERATORS = new Set([...COMPARISONS, '&&', '||', '!_', '-_', '-', '*', '/', '%']);

/** Constants that name a library (`cel.bind`, `strings.quote`), not data. */
const NAMESPACES = new Set(['cel', 'strings', 'optional', 'google']);

const text = (node: ASTNode) => node.input.slice(node.start, node.end);
const isLiteral = (node: ASTNode) => node.op === 'value';

/** A name in scope: a comprehension's element or a `cel.bind` variable. */
interface Local {
  /** Its value's size is bounded by the current element's (or a constant). */
  element: boolean;
  /** Its value is computed by a comprehension. */
  iterates: boolean;
}

interface Scope {
  /** Inside the body of a comprehension (its predicate, transform or filter). */
  inBody: boolean;
  locals: ReadonlyMap<string, Local>;
  /** Names of `variables` whose expression has a comprehension (directly or through others). */
  iterating: ReadonlySet<string>;
}

class NotBounded extends Error {}

function fail(reason: string): never {
  throw new NotBounded(reason);
}

/** The AST nodes among a node's operands, in order (a call's: its operands). */
function operands(node: ASTNode): ASTNode[] {
  return callOf(node)?.operands ?? children(node);
}

/** Whether the size of `node`'s value is bounded by the current element's, or constant. */
function elementSized(node: ASTNode, scope: Scope): boolean {
  switch (node.op) {
    case 'value':
      return true;
    case 'id':
      return scope.locals.get(node.args)?.element ?? NAMESPACES.has(node.args);
    case '.':
    case '.?':
    case '[]':
    case '[?]':
      return elementSized(node.args[0], scope);
    case '?:':
      return elementSized(node.args[1], scope) && elementSized(node.args[2], scope);
    case 'in':
      return true;
    default: {
      if (CHEAP_OPERATORS.has(node.op)) return true;
      const call = callOf(node);
      if (call && SCALAR.has(call.name)) return true;
      return operands(node).every((child) => elementSized(child, scope));
    }
  }
}

/** Whether `node` holds a comprehension, directly or through a variable or bound name. */
function iterates(node: ASTNode, scope: Scope): boolean {
  if (node.op === 'rcall' && COMPREHENSIONS.has(node.args[0])) return true;
  if (node.op === 'id' && scope.locals.get(node.args)?.iterates) return true;
  if (node.op === '.' && node.args[0].op === 'id' && node.args[0].args === 'variables')
    return scope.iterating.has(node.args[1]);
  return operands(node).some((child) => iterates(child, scope));
}

/** Throws NotBounded with the reason when `node` may cost more than linear. */
function check(node: ASTNode, scope: Scope): void {
  if (scope.inBody) {
    if (node.op === '.' && node.args[0].op === 'id' && node.args[0].args === 'variables') {
      if (scope.iterating.has(node.args[1]))
        fail(`'variables.${node.args[1]}' is computed by a comprehension and read inside another`);
    }
    if (node.op === 'id' && scope.locals.get(node.args)?.iterates)
      fail(`'${node.args}' is computed by a comprehension and read inside another`);
  }
  if (node.op === 'in' || node.op === '+') {
    // `x in list` scans the list; `+` may concatenate strings or lists.
    const sized = node.op === 'in' ? [node.args[1]] : node.args;
    node.args.forEach((child) => check(child, scope));
    if (scope.inBody && !sized.every((n) => elementSized(n, scope)))
      fail(`'${text(node)}' inside a comprehension reads a value not taken from its element`);
    return;
  }
  const call = callOf(node);
  if (!call) {
    children(node).forEach((child) => check(child, scope));
    return;
  }
  const { name, operands, args } = call;
  if (node.op === 'rcall' && COMPREHENSIONS.has(name)) {
    if (scope.inBody) fail(`comprehension '${text(node)}' is nested in another comprehension`);
    const [receiver, variable, ...body] = operands;
    check(receiver!, scope);
    if (variable?.op !== 'id') fail(`'${text(node)}' has no iteration variable`);
    const locals = new Map(scope.locals);
    locals.set(variable.args as string, { element: true, iterates: false });
    const inner = { ...scope, inBody: true, locals };
    for (const part of body) check(part, inner);
    // map(x, object.big) holds `big` once per element: what reads the list pays their product.
    const transform = body.at(-1);
    if (name === 'map' && transform && !elementSized(transform, inner))
      fail(`'${text(node)}' maps each element to a value not taken from it`);
    return;
  }
  if (name === 'bind' && node.op === 'rcall' && node.args[1].op === 'id') {
    const [variable, value, expression] = args;
    if (variable?.op !== 'id' || !value || !expression) fail(`'${text(node)}' is malformed`);
    check(value, scope);
    const locals = new Map(scope.locals);
    locals.set(variable.args as string, {
      element: scope.inBody && elementSized(value, scope),
      iterates: iterates(value, scope),
    });
    check(expression, { ...scope, locals });
    return;
  }
  if (name === 'matches' || name === 'find' || name === 'findAll') {
    // matches(s, re) as a function, s.matches(re) as a method.
    const pattern = node.op === 'call' ? args[1] : args[0];
    if (pattern?.op !== 'value' || typeof pattern.args !== 'string')
      fail(`'${text(node)}' takes its regular expression from data, not a literal`);
    const problem = superlinearRegex(pattern.args as string);
    if (problem) fail(problem);
  }
  // A replacement or separator as long as the text makes the result grow with their product.
  if (name === 'replace' && args[1] && !isLiteral(args[1]))
    fail(`'${text(node)}' replaces with a value from data, not a literal`);
  if (name === 'join' && args[0] && !isLiteral(args[0]))
    fail(`'${text(node)}' joins with a separator from data, not a literal`);
  if (!CHEAP.has(name) && !LINEAR.has(name))
    fail(`'${text(node)}' calls ${name}, whose cost rollcall does not know`);
  // Operands first: the innermost reason is the one to fix.
  operands.forEach((child) => check(child, scope));
  if (scope.inBody && LINEAR.has(name) && !operands.every((n) => elementSized(n, scope)))
    fail(`'${text(node)}' inside a comprehension reads a value not taken from its element`);
}

/**
 * Whether `policy`'s evaluation is bounded: linear in the request's size with a small
 * constant. Not bounded (with the first reason found, prefixed by its field path): a
 * comprehension inside another (a variable or `cel.bind` name computed by one and read inside
 * one counts); a regular expression that is not a literal, or that V8's linear-time engine
 * refuses, or that repeats an ambiguous group; inside a comprehension, a function linear in a
 * value not taken from the element (`x in object.list`), or a `map` to such a value; a
 * replacement or separator from data; a function of unknown cost.
 */
export function costBound(policy: CompiledPolicy): CostBound {
  const iterating = new Set<string>();
  const scope: Scope = { inBody: false, locals: new Map(), iterating };
  const run = (expression: CompiledExpression): string | undefined => {
    try {
      check(expression.program.ast, scope);
      return undefined;
    } catch (error) {
      if (error instanceof NotBounded) return `${expression.fieldPath}: ${error.message}`;
      throw error;
    }
  };
  // In order: a variable sees only those declared before it.
  for (const variable of policy.variables) {
    const reason = run(variable.expression);
    if (reason) return { bounded: false, reason };
    if (iterates(variable.expression.program.ast, scope)) iterating.add(variable.name);
  }
  for (const expression of requestExpressions(policy)) {
    const reason = run(expression);
    if (reason) return { bounded: false, reason };
  }
  return { bounded: true };
}
