// Load-time checks the type checker cannot make: Kubernetes CEL libraries rollcall does not
// implement (a policy that uses one must fail to load naming it, not with a vague "no
// matching overload", so the scan runs before the type check; docs/cel.md lists them), and
// literals that would fail at run time: regular expressions JS cannot honour, and format
// strings applied to a literal list (cel-go checks those at compile time too).
import type { ASTNode } from '@marcbachmann/cel-js';
import { unsupportedRegex } from './regex.ts';
import { format } from './strings.ts';

/** Global functions of unsupported libraries. */
const FUNCTIONS = new Set(['ip', 'isIP', 'cidr', 'isCIDR', 'semver', 'isSemver']);
/** Namespaces (`sets.contains(...)`) and variables of unsupported libraries. */
const NAMESPACES = new Set(['sets', 'math', 'lists', 'base64', 'format', 'authorizer']);
/** Methods of unsupported libraries (cel-go's lists and optional extensions, 2-var macros). */
const METHODS = new Set([
  'transformList',
  'transformMap',
  'transformMapEntry',
  'optMap',
  'optFlatMap',
  'ofNonZeroValue',
  'slice',
  'flatten',
  'distinct',
  'sort',
  'sortBy',
  'first',
  'last',
]);
/** Macros whose two-variable form (`m.all(k, v, p)`) is unsupported. */
const TWO_VARIABLE_MACROS = new Set(['all', 'exists', 'existsOne', 'exists_one']);
/** Functions whose pattern argument, when a literal, is checked at load time. */
const REGEX_METHODS = new Set(['matches', 'find', 'findAll']);

export interface Finding {
  message: string;
  /** Offset in the source. */
  at: number;
}

const unsupported = (name: string, node: ASTNode): Finding => ({
  message: `uses '${name}', a Kubernetes CEL library rollcall does not support (see docs/cel.md)`,
  at: node.start,
});

/** Uses of unsupported libraries and unsupported literal regular expressions in `ast`. */
export function scan(ast: ASTNode): Finding[] {
  const findings: Finding[] = [];
  const visit = (node: ASTNode): void => {
    switch (node.op) {
      case 'id':
        if (NAMESPACES.has(node.args)) findings.push(unsupported(node.args, node));
        return;
      case 'call': {
        const [name, args] = node.args;
        if (FUNCTIONS.has(name)) findings.push(unsupported(name, node));
        if (name === 'matches' && args[1]) checkPattern(args[1]);
        args.forEach(visit);
        return;
      }
      case 'rcall': {
        const [name, receiver, args] = node.args;
        if (receiver.op === 'id' && NAMESPACES.has(receiver.args)) {
          const what = receiver.args === 'authorizer' ? 'authorizer' : `${receiver.args}.${name}`;
          findings.push(unsupported(what, node));
          args.forEach(visit);
          return;
        }
        if (METHODS.has(name)) findings.push(unsupported(name, node));
        if (TWO_VARIABLE_MACROS.has(name) && args.length === 3) {
          findings.push(unsupported(`${name}(key, value, ...)`, node));
        }
        if (REGEX_METHODS.has(name) && args[0]) checkPattern(args[0]);
        if (name === 'format' && args[0]) checkFormat(receiver, args[0], node);
        visit(receiver);
        args.forEach(visit);
        return;
      }
      default:
        for (const child of children(node)) visit(child);
    }
  };
  const checkPattern = (node: ASTNode): void => {
    if (node.op !== 'value' || typeof node.args !== 'string') return;
    const problem = unsupportedRegex(node.args);
    if (problem) findings.push({ message: problem, at: node.start });
  };
  const checkFormat = (template: ASTNode, list: ASTNode, call: ASTNode): void => {
    if (template.op !== 'value' || typeof template.args !== 'string' || list.op !== 'list') return;
    const values: unknown[] = [];
    for (const item of list.args) {
      if (item.op !== 'value') return;
      values.push(item.args);
    }
    try {
      format(template.args, values);
    } catch (error) {
      findings.push({ message: (error as Error).message, at: call.start });
    }
  };
  visit(ast);
  return findings;
}

/** The AST nodes among a node's operands (lists, map entries, ternaries...), in order. */
export function children(node: ASTNode): ASTNode[] {
  const out: ASTNode[] = [];
  const collect = (item: unknown): void => {
    if (Array.isArray(item)) item.forEach(collect);
    else if (item && typeof item === 'object' && 'op' in item) out.push(item as ASTNode);
  };
  collect(node.args);
  return out;
}
