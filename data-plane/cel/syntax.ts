// What the cost analyses read alike from cel-js's AST: cost.ts's structural bound,
// estimate.ts's estimate and meter.ts's runtime charges.
import type { ASTNode } from '@marcbachmann/cel-js';

/** The comparison operators: they read at most the smaller operand, and give a bool. */
export const COMPARISONS: ReadonlySet<string> = new Set(['==', '!=', '<', '<=', '>', '>=']);

/** A function or method call, taken apart. */
export interface Call {
  name: string;
  /** `x` of `x.f(y)`; undefined for `f(y)`. */
  receiver: ASTNode | undefined;
  args: ASTNode[];
  /** The receiver, if any, then the arguments. */
  operands: ASTNode[];
}

/** The call `node` makes, or undefined when it is not a call. */
export function callOf(node: ASTNode): Call | undefined {
  if (node.op === 'call') {
    const [name, args] = node.args;
    return { name, receiver: undefined, args, operands: args };
  }
  if (node.op === 'rcall') {
    const [name, receiver, args] = node.args;
    return { name, receiver, args, operands: [receiver, ...args] };
  }
  return undefined;
}
