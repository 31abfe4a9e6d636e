/**
 * Command-line parsing on node:util parseArgs (strict: an unknown flag or a
 * flag without its value is a usage error). Global flags may come before or
 * after the command: `stepkey --json runs` and `stepkey runs --json` agree.
 */
import { parseArgs } from 'node:util';
import { UsageError } from './errors.js';

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** Placeholder of a string option's value in help text: `--limit N`. */
  value?: string;
  description: string;
}

export interface PositionalSpec {
  name: string;
  description: string;
}

export interface CommandSpec {
  name: string;
  /** Paragraphs shown by `stepkey <command> --help`. */
  description: string;
  /** Required positional arguments, in order. */
  positionals: readonly PositionalSpec[];
  options: Readonly<Record<string, OptionSpec>>;
}

export const globalOptions: Readonly<Record<string, OptionSpec>> = {
  database: { type: 'string', value: 'URL', description: 'Postgres URL (default: $DATABASE_URL)' },
  app: {
    type: 'string',
    value: 'PATH',
    description: 'module exporting workflows, effects, schedules, queues, limits, migrations; default ./stepkey.config.ts or .js',
  },
  json: { type: 'boolean', description: 'machine-readable output' },
  help: { type: 'boolean', short: 'h', description: 'show help' },
};

export type ParsedValues = Record<string, string | boolean | undefined>;

export interface ParsedCommand {
  values: ParsedValues;
  positionals: string[];
}

const takesValue = (flag: string) =>
  Object.entries(globalOptions).some(([name, spec]) => spec.type === 'string' && flag === `--${name}`);

/** Finds the command word: the first argument that is neither a flag nor a global flag's value. */
export function splitCommand(argv: readonly string[]): { command: string | undefined; rest: string[] } {
  for (let index = 0; index < argv.length; index += 1) {
    const arg = argv[index]!;
    if (arg === '--') break;
    if (arg.startsWith('-')) {
      if (takesValue(arg)) index += 1;
      continue;
    }
    return { command: arg, rest: [...argv.slice(0, index), ...argv.slice(index + 1)] };
  }
  return { command: undefined, rest: [...argv] };
}

export function wantsHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end === -1 ? args : args.slice(0, end)).some((arg) => arg === '--help' || arg === '-h');
}

export function parseCommand(spec: CommandSpec, args: readonly string[]): ParsedCommand {
  const options = Object.fromEntries(
    Object.entries({ ...globalOptions, ...spec.options }).map(([name, option]) => [
      name,
      option.short ? { type: option.type, short: option.short } : { type: option.type },
    ]),
  );
  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({ args: [...args], options, allowPositionals: true, strict: true });
  } catch (error) {
    // parseArgs explains at length; its first sentence says what was wrong.
    const message = error instanceof Error ? error.message : String(error);
    throw new UsageError(message.split(/(?<=\.) /)[0]!, spec.name);
  }
  const expected = spec.positionals.length;
  if (parsed.positionals.length < expected) {
    const missing = spec.positionals[parsed.positionals.length]!;
    throw new UsageError(`Missing argument <${missing.name}>: ${missing.description}.`, spec.name);
  }
  if (parsed.positionals.length > expected) {
    throw new UsageError(`Unexpected argument '${parsed.positionals[expected]}'.`, spec.name);
  }
  return { values: parsed.values as ParsedValues, positionals: parsed.positionals };
}

export function stringFlag(values: ParsedValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

export function positiveIntFlag(values: ParsedValues, name: string, command: string): number | undefined {
  const raw = stringFlag(values, name);
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(value) || value < 1) {
    throw new UsageError(`--${name} must be a whole number of at least 1, got '${raw}'.`, command);
  }
  return value;
}

export function requiredFlag(values: ParsedValues, name: string, command: string, what: string): string {
  const value = stringFlag(values, name);
  if (value === undefined || value === '') throw new UsageError(`Missing --${name}: ${what}.`, command);
  return value;
}

function optionLines(options: Readonly<Record<string, OptionSpec>>): string[] {
  const labels = Object.entries(options).map(([name, option]) => {
    const flag = `${option.short ? `-${option.short}, ` : ''}--${name}${option.value ? ` ${option.value}` : ''}`;
    return [flag, option.description] as const;
  });
  const width = Math.max(...labels.map(([flag]) => flag.length));
  return labels.map(([flag, description]) => `  ${flag.padEnd(width)}  ${description}`);
}

export function commandHelp(spec: CommandSpec): string {
  const usage = [
    'stepkey',
    spec.name,
    ...spec.positionals.map((positional) => `<${positional.name}>`),
    ...(Object.keys(spec.options).length > 0 ? ['[options]'] : []),
  ].join(' ');
  const lines = [`Usage: ${usage}`, '', spec.description.trim(), ''];
  if (Object.keys(spec.options).length > 0) lines.push('Options:', ...optionLines(spec.options), '');
  lines.push('Global options:', ...optionLines(globalOptions), '', exitCodeHelp);
  return `${lines.join('\n')}\n`;
}

export const exitCodeHelp = [
  'Exit codes:',
  '  0  success',
  '  1  the operation failed (not found, nothing to do, check problems, database errors)',
  '  2  usage error (unknown command or flag, missing argument, no database URL or app module)',
].join('\n');
