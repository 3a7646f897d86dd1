/**
 * What `rollcall lint` warns about in a policy that loads, found in the compiled expressions'
 * syntax trees (no evaluation): an expression whose value is fixed whatever the request (a
 * validation that can never deny or always denies, a match condition that excludes nothing or
 * everything), and a variable that no expression reads. Syntactic and conservative: a shape it
 * does not know is never reported. Also the deprecated `spec.mode` (modeWarning).
 */
import type { ASTNode } from '@marcbachmann/cel-js';
import { actionsOf, type PolicySpec } from '../../api/v1alpha1.ts';
import { policyExpressions, type CompiledPolicy } from '../../data-plane/cel/index.ts';

export interface LintWarning {
  /** e.g. `spec.validations[0].expression`, `spec.variables[1].name`. */
  fieldPath: string;
  message: string;
}

type Node = ASTNode;

const isNode = (v: unknown): v is Node => typeof v === 'object' && v !== null && 'op' in v;

/** Structural equality of two trees, ignoring positions and checked types. */
export function sameTree(a: unknown, b: unknown): boolean {
  if (isNode(a) && isNode(b)) return a.op === b.op && sameTree(a.args, b.args);
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((item, i) => sameTree(item, b[i]));
  if (isNode(a) || isNode(b) || Array.isArray(a) || Array.isArray(b)) return false;
  return Object.is(a, b);
}

const literal = (node: Node): { value: unknown } | undefined =>
  node.op === 'value' ? { value: node.args } : undefined;

const isSizeCall = (node: Node): boolean =>
  (node.op === 'call' && (node.args as [string, Node[]])[0] === 'size') ||
  (node.op === 'rcall' && (node.args as [string, Node, Node[]])[0] === 'size');

const isZero = (node: Node) => node.op === 'value' && (node.args === 0n || node.args === 0);

const negationOf = (a: Node, b: Node) =>
  (a.op === '!_' && sameTree(a.args, b)) || (b.op === '!_' && sameTree(b.args, a));

function compareLiterals(op: string, a: unknown, b: unknown): boolean | undefined {
  const comparable =
    (typeof a === 'bigint' && typeof b === 'bigint') ||
    (typeof a === 'string' && typeof b === 'string') ||
    (typeof a === 'boolean' && typeof b === 'boolean');
  if (!comparable) return undefined;
  const [x, y] = [a as bigint | string | boolean, b as bigint | string | boolean];
  switch (op) {
    case '==':
      return x === y;
    case '!=':
      return x !== y;
    case '<':
      return x < y;
    case '<=':
      return x <= y;
    case '>':
      return x > y;
    case '>=':
      return x >= y;
    default:
      return undefined;
  }
}

/**
 * The value a boolean expression has whatever the request, when its shape fixes it: literals,
 * `!`, `&&`/`||` (with `x || !x` and `x && !x`), a ternary, `x == x`, comparisons of literals,
 * `size(x) >= 0`, `all`/`exists` over an empty literal list or with a constant body.
 */
export function constantTruth(node: Node): boolean | undefined {
  switch (node.op) {
    case 'value':
      return typeof node.args === 'boolean' ? node.args : undefined;
    case '!_': {
      const inner = constantTruth(node.args as Node);
      return inner === undefined ? undefined : !inner;
    }
    case '||':
    case '&&': {
      const [a, b] = node.args as [Node, Node];
      const [x, y] = [constantTruth(a), constantTruth(b)];
      const absorbing = node.op === '||';
      if (x === absorbing || y === absorbing) return absorbing;
      if (x !== undefined && y !== undefined) return !absorbing;
      if (negationOf(a, b)) return absorbing;
      return undefined;
    }
    case '?:': {
      const [c, t, f] = node.args as [Node, Node, Node];
      const condition = constantTruth(c);
      if (condition !== undefined) return constantTruth(condition ? t : f);
      const [x, y] = [constantTruth(t), constantTruth(f)];
      return x !== undefined && x === y ? x : undefined;
    }
    case '==':
    case '!=':
    case '<':
    case '<=':
    case '>':
    case '>=': {
      const [a, b] = node.args as [Node, Node];
      const [x, y] = [literal(a), literal(b)];
      if (x && y) return compareLiterals(node.op, x.value, y.value);
      // Doubles are left out: NaN differs from itself.
      if (sameTree(a, b) && a.op !== 'value') {
        if (node.op === '==' || node.op === '<=' || node.op === '>=') return true;
        return false;
      }
      if (
        (node.op === '>=' && isSizeCall(a) && isZero(b)) ||
        (node.op === '<=' && isZero(a) && isSizeCall(b))
      )
        return true;
      if (
        (node.op === '<' && isSizeCall(a) && isZero(b)) ||
        (node.op === '>' && isZero(a) && isSizeCall(b))
      )
        return false;
      return undefined;
    }
    case 'rcall': {
      const [name, receiver, args] = node.args as [string, Node, Node[]];
      if (name !== 'all' && name !== 'exists') return undefined;
      const empty = receiver.op === 'list' && (receiver.args as Node[]).length === 0;
      if (empty) return name === 'all';
      const body = args[1] ? constantTruth(args[1]) : undefined;
      // all(x, true) holds for any list; exists(x, false) never does.
      if (name === 'all' && body === true) return true;
      if (name === 'exists' && body === false) return false;
      return undefined;
    }
    default:
      return undefined;
  }
}

/** Every node of a tree. */
function* nodes(root: Node): Generator<Node> {
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const item = pending.pop();
    if (Array.isArray(item)) pending.push(...item);
    else if (isNode(item)) {
      yield item;
      pending.push(item.args);
    }
  }
}

/**
 * The variable names an expression reads (`variables.x`, `variables.?x`, `variables['x']`);
 * `'*'` when it uses `variables` otherwise (then every variable may be read).
 */
export function variablesRead(root: Node): Set<string> {
  const read = new Set<string>();
  const member = new Set<Node>();
  for (const node of nodes(root)) {
    if (node.op === '.' || node.op === '.?' || node.op === '[]' || node.op === '[?]') {
      const [target, key] = node.args as [Node, unknown];
      if (isNode(target) && target.op === 'id' && target.args === 'variables') {
        const name = isNode(key) ? (key.op === 'value' ? key.args : undefined) : key;
        if (typeof name === 'string') {
          read.add(name);
          member.add(target);
        }
      }
    }
  }
  for (const node of nodes(root))
    if (node.op === 'id' && node.args === 'variables' && !member.has(node)) read.add('*');
  return read;
}

/** The warnings of a compiled policy. */
export function lintPolicy(policy: CompiledPolicy): LintWarning[] {
  const warnings: LintWarning[] = [];
  for (const { name, expression } of policy.matchConditions) {
    const truth = constantTruth(expression.program.ast);
    if (truth === true)
      warnings.push({
        fieldPath: expression.fieldPath,
        message: `match condition ${name} is always true: it leaves out no request`,
      });
    if (truth === false)
      warnings.push({
        fieldPath: expression.fieldPath,
        message: `match condition ${name} is always false: the policy never applies`,
      });
  }
  for (const v of policy.validations) {
    const truth = constantTruth(v.expression.program.ast);
    if (truth === true)
      warnings.push({
        fieldPath: v.expression.fieldPath,
        message: 'always true: this validation never denies a request',
      });
    if (truth === false)
      warnings.push({
        fieldPath: v.expression.fieldPath,
        message: 'always false: this validation denies every request it sees',
      });
  }

  const read = new Set<string>();
  for (const expression of policyExpressions(policy))
    for (const name of variablesRead(expression.program.ast)) read.add(name);
  if (!read.has('*'))
    for (const { name, expression } of policy.variables)
      if (!read.has(name))
        warnings.push({
          fieldPath: expression.fieldPath.replace(/\.expression$/, '.name'),
          message: `variable ${name} is never used`,
        });
  return warnings;
}

/**
 * The warning for a spec that writes the deprecated `mode` (`written`: the spec as written, to
 * tell a `mode` written from the schema's default), naming the validationActions to write
 * instead; undefined when it does not write one.
 */
export function modeWarning(
  written: unknown,
  spec: Pick<PolicySpec, 'mode' | 'validationActions'>,
): LintWarning | undefined {
  if (typeof written !== 'object' || written === null || !('mode' in written)) return undefined;
  const list = `[${actionsOf(spec).join(', ')}]`;
  return {
    fieldPath: 'spec.mode',
    message: spec.validationActions
      ? `mode is deprecated and ignored: validationActions ${list} says what a failed validation does; remove mode`
      : `mode is deprecated: write validationActions: ${list} instead (the same behaviour)`,
  };
}
