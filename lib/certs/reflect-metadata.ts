// @peculiar/x509 registers its algorithms with tsyringe, which refuses to load unless
// `Reflect.getMetadata` exists (it is meant for TypeScript's emitted decorator metadata,
// which the library's compiled classes do not carry). These three functions are all
// tsyringe calls; a WeakMap per target is all they need. Import this before the library.
type Metadata = Map<unknown, unknown>;
const byTarget = new WeakMap<object, Metadata>();
const reflect = Reflect as unknown as Record<string, unknown>;

function own(target: object): Metadata | undefined {
  return byTarget.get(target);
}

if (typeof reflect.getMetadata !== 'function') {
  reflect.defineMetadata = (key: unknown, value: unknown, target: object): void => {
    let metadata = own(target);
    if (metadata === undefined) byTarget.set(target, (metadata = new Map()));
    metadata.set(key, value);
  };
  reflect.getOwnMetadata = (key: unknown, target: object): unknown => own(target)?.get(key);
  reflect.getMetadata = (key: unknown, target: object): unknown => {
    for (let t: object | null = target; t !== null; t = Object.getPrototypeOf(t) as object | null) {
      const metadata = own(t);
      if (metadata?.has(key)) return metadata.get(key);
    }
    return undefined;
  };
}
