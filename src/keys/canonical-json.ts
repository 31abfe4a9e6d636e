/**
 * Canonical JSON: one text for one value, whatever order its object keys were
 * written in. Fingerprints hash this text.
 *
 *   objects   keys sorted (UTF-16 code unit order), no whitespace
 *   arrays    keep their order
 *   numbers   as JSON; -0 is 0; NaN, Infinity, -Infinity → {"$number":"NaN"} …
 *   bigint    → {"$bigint":"123"}
 *   Date      → {"$date":"2026-01-02T03:04:05.000Z"}; an invalid Date is an error
 *   undefined omitted as an object property; null in an array or at the top
 *   anything else (functions, symbols, Map, Set, class instances, cycles) is a
 *   `not_fingerprintable` error naming the path.
 *
 * Paths listed in `exclude` are left out first: `meta.traceId` or
 * `items.*.clientTime`, where `*` matches any key or index.
 */
import { StepkeyError } from '../errors/stepkey-error.js';

export interface CanonicalOptions {
  exclude?: readonly string[];
}

type Pattern = readonly string[];

function formatPath(path: readonly (string | number)[]): string {
  let text = '$';
  for (const part of path) text += typeof part === 'number' ? `[${part}]` : `.${part}`;
  return text;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

export function canonicalJson(value: unknown, options: CanonicalOptions = {}): string {
  const patterns: Pattern[] = (options.exclude ?? []).map((path) => {
    if (typeof path !== 'string' || path.length === 0) {
      throw new StepkeyError('invalid_options', `An excluded path must be a non-empty string, got ${String(path)}.`);
    }
    return path.split('.');
  });
  const path: (string | number)[] = [];
  const seen = new Set<object>();

  const excluded = (): boolean =>
    patterns.some(
      (pattern) =>
        pattern.length === path.length && pattern.every((part, i) => part === '*' || part === String(path[i])),
    );

  const fail = (what: string): never => {
    throw new StepkeyError('not_fingerprintable', `Cannot fingerprint ${what} at ${formatPath(path)}.`, {
      details: { path: formatPath(path) },
    });
  };

  const write = (current: unknown): string => {
    switch (typeof current) {
      case 'undefined':
        return 'null';
      case 'boolean':
        return current ? 'true' : 'false';
      case 'string':
        return JSON.stringify(current);
      case 'number':
        if (Number.isFinite(current)) return Object.is(current, -0) ? '0' : JSON.stringify(current);
        return `{"$number":"${String(current)}"}`;
      case 'bigint':
        return `{"$bigint":"${current.toString()}"}`;
      case 'object':
        break;
      default:
        return fail(`a ${typeof current}`);
    }
    if (current === null) return 'null';
    if (current instanceof Date) {
      if (Number.isNaN(current.getTime())) fail('an invalid Date');
      return `{"$date":"${current.toISOString()}"}`;
    }
    if (seen.has(current)) fail('a circular reference');
    seen.add(current);
    let text: string;
    if (Array.isArray(current)) {
      const parts: string[] = [];
      current.forEach((item, index) => {
        path.push(index);
        if (!excluded()) parts.push(write(item));
        path.pop();
      });
      text = `[${parts.join(',')}]`;
    } else if (isPlainObject(current)) {
      const parts: string[] = [];
      for (const key of Object.keys(current).sort()) {
        const item = (current as Record<string, unknown>)[key];
        if (item === undefined) continue;
        path.push(key);
        if (!excluded()) parts.push(`${JSON.stringify(key)}:${write(item)}`);
        path.pop();
      }
      text = `{${parts.join(',')}}`;
    } else {
      const name = (current as { constructor?: { name?: string } }).constructor?.name ?? 'object';
      text = fail(`a ${name} (only plain objects, arrays and primitives)`);
    }
    seen.delete(current);
    return text;
  };

  return write(value);
}
