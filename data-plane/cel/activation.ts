// The CEL activation of one request: the values VAP's variables take. Each is converted to
// CEL values (JSON integers as int64) only when an expression first reads it, and `variables`
// are evaluated on first use and cached. A class with getters, not per-request closures: this
// runs for every admission request.
import type { AdmissionInput } from './evaluate.ts';
import type { CompiledPolicy, LazyVariables, VariableSource } from './compile.ts';
import { toCelValue } from './json-values.ts';

type Result = { value: unknown } | { error: unknown };

/** The top-level values an expression may read, each converted on first read. */
type Slot = 'object' | 'oldObject' | 'request' | 'params' | 'namespaceObject';

/** Where each slot's JSON comes from (module-level, so no closures per request). */
const sourceOf: Record<Slot, (request: Record<string, unknown>, input: AdmissionInput) => unknown> =
  {
    object: (request) => request.object,
    oldObject: (request) => request.oldObject,
    // As in Kubernetes, the AdmissionRequest without the objects (they are object, oldObject).
    request: ({ object: _object, oldObject: _oldObject, ...rest }) => rest,
    params: (_request, input) => input.params,
    namespaceObject: (_request, input) => input.namespaceObject,
  };

export class Activation implements VariableSource {
  readonly #policy: CompiledPolicy;
  readonly #input: AdmissionInput;
  readonly #request: Record<string, unknown>;
  /** Converted slots; never undefined once converted (an absent value is null). */
  readonly #converted: Partial<Record<Slot, unknown>> = {};
  #variables: LazyVariables | undefined;
  #results: Map<string, Result> | undefined;

  constructor(policy: CompiledPolicy, input: AdmissionInput) {
    this.#policy = policy;
    this.#input = input;
    this.#request = (input.request ?? {}) as Record<string, unknown>;
  }

  #value(slot: Slot): unknown {
    const converted = this.#converted[slot];
    if (converted !== undefined) return converted;
    return (this.#converted[slot] = toCelValue(sourceOf[slot](this.#request, this.#input)) ?? null);
  }

  get object(): unknown {
    return this.#value('object');
  }

  get oldObject(): unknown {
    return this.#value('oldObject');
  }

  get request(): unknown {
    return this.#value('request');
  }

  get params(): unknown {
    return this.#value('params');
  }

  get namespaceObject(): unknown {
    return this.#value('namespaceObject');
  }

  get variables(): LazyVariables {
    return (this.#variables ??= new this.#policy.Variables(this));
  }

  /** The value of `variables.<name>`, evaluated once; a failure fails every use. */
  variable(name: string): unknown {
    this.#results ??= new Map();
    let result = this.#results.get(name);
    if (!result) {
      const expression = this.#policy.variables.find((v) => v.name === name)?.expression;
      try {
        result = { value: expression ? expression.program(this) : undefined };
      } catch (error) {
        result = { error };
      }
      this.#results.set(name, result);
    }
    if ('error' in result) throw result.error;
    return result.value;
  }
}
