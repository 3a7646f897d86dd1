/**
 * Safe reads from an untyped Kubernetes object. Missing fields fall back to a
 * default, like kstatus' GetIntField; a *present* field of the wrong shape where
 * kstatus decodes into a typed struct (conditions) is a MalformedObjectError, which
 * computeStatus turns into the Unknown status.
 */

export class MalformedObjectError extends Error {
  override name = 'MalformedObjectError';
}

export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The value at a dotted path, or undefined when any step is missing or not an object. */
export function field(obj: unknown, path: string): unknown {
  let current: unknown = obj;
  for (const step of path.split('.')) {
    if (!isObject(current)) return undefined;
    current = current[step];
  }
  return current;
}

export function intField(obj: unknown, path: string, fallback: number): number {
  const value = field(obj, path);
  return typeof value === 'number' && Number.isInteger(value) ? value : fallback;
}

export function stringField(obj: unknown, path: string, fallback: string): string {
  const value = field(obj, path);
  return typeof value === 'string' ? value : fallback;
}

export function boolField(obj: unknown, path: string, fallback: boolean): boolean {
  const value = field(obj, path);
  return typeof value === 'boolean' ? value : fallback;
}

/** An integer field that must be an integer when present (kstatus' NestedInt64). */
export function optionalInt(obj: unknown, path: string): number | undefined {
  const value = field(obj, path);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new MalformedObjectError(`${path} must be an integer, got ${JSON.stringify(value)}`);
  }
  return value;
}

export interface BasicCondition {
  type: string;
  status: string;
  reason: string;
  message: string;
}

/** `.status.conditions`, validated the way kstatus' typed decode would. */
export function conditionsOf(obj: unknown): BasicCondition[] {
  const raw = field(obj, 'status.conditions');
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) throw new MalformedObjectError('status.conditions must be a list');
  return raw.map((item, index) => {
    if (!isObject(item))
      throw new MalformedObjectError(`status.conditions[${index}] must be an object`);
    const read = (key: string): string => {
      const value = item[key];
      if (value === undefined || value === null) return '';
      if (typeof value !== 'string') {
        throw new MalformedObjectError(`status.conditions[${index}].${key} must be a string`);
      }
      return value;
    };
    return {
      type: read('type'),
      status: read('status'),
      reason: read('reason'),
      message: read('message'),
    };
  });
}

export function findCondition(
  conditions: readonly BasicCondition[],
  type: string,
  status?: string,
): BasicCondition | undefined {
  return conditions.find((c) => c.type === type && (status === undefined || c.status === status));
}
