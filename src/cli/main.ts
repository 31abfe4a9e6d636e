#!/usr/bin/env node
/**
 * The `stepkey` command line: parses the command word and its flags, runs the
 * command, and turns every error into one line on stderr and an exit code
 * (see errors.ts for the table).
 *
 *   node --import tsx src/cli/main.ts <command> [options]
 *
 * `main(argv, io)` is the whole program without the process around it: tests
 * call it with captured writers. Only the command that runs is loaded
 * (commands/index.ts), and it loads what it needs when it needs it: help and
 * the commands that read the database load neither graphile-worker nor the
 * app module.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { commandHelp, exitCodeHelp, globalOptions, parseCommand, splitCommand, stringFlag, wantsHelp } from './args.js';
import { commands } from './commands/index.js';
import { CliContext, type CliIO } from './context.js';
import { debugText, describeError, ExitCode, UsageError } from './errors.js';

export { commands };

export function overviewHelp(): string {
  const width = Math.max(...commands.map((command) => command.name.length));
  const globals = Object.entries(globalOptions).map(
    ([name, option]) => `  --${name}${option.value ? ` ${option.value}` : ''}`.padEnd(18) + option.description,
  );
  return [
    'Usage: stepkey <command> [options]',
    '',
    'Typed workflows with step-keyed durable execution on Postgres.',
    '',
    'Commands:',
    ...commands.map((command) => `  ${command.name.padEnd(width)}  ${command.summary}`),
    '',
    'Global options:',
    ...globals,
    '',
    exitCodeHelp,
    '',
    'Run `stepkey <command> --help` for a command. STEPKEY_DEBUG=1 prints stack traces.',
    '',
  ].join('\n');
}

const processIO = (): CliIO => ({
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  cwd: process.cwd(),
});

export async function main(argv: readonly string[], io: Partial<CliIO> = {}): Promise<number> {
  const full: CliIO = { ...processIO(), ...io };
  const { command: name, rest } = splitCommand(argv);
  const json = rest.includes('--json');
  let commandName: string | undefined;
  try {
    if (name === undefined || name === 'help') {
      const topic = name === 'help' ? splitCommand(rest).command : undefined;
      const about = topic === undefined ? undefined : commands.find((command) => command.name === topic);
      if (topic !== undefined && !about) throw new UsageError(`Unknown command '${topic}'.`);
      if (about) full.stdout(commandHelp(await about.load()));
      else if (name === 'help' || wantsHelp(rest)) full.stdout(overviewHelp());
      else throw new UsageError('Missing command.');
      return ExitCode.ok;
    }
    const entry = commands.find((candidate) => candidate.name === name);
    if (!entry) throw new UsageError(`Unknown command '${name}'.`);
    commandName = entry.name;
    const command = await entry.load();
    if (wantsHelp(rest)) {
      full.stdout(commandHelp(command));
      return ExitCode.ok;
    }
    const parsed = parseCommand(command, rest);
    const context = new CliContext(
      full,
      {
        database: stringFlag(parsed.values, 'database'),
        app: stringFlag(parsed.values, 'app'),
        json: parsed.values.json === true,
      },
      command.name,
    );
    return await command.run(context, parsed);
  } catch (error) {
    const report = describeError(error, `running 'stepkey ${commandName ?? name ?? ''}'`);
    const message = report.message.replace(/\s*\n\s*/g, ' ');
    full.stderr(
      json
        ? `${JSON.stringify({ error: { code: report.code, message, exitCode: report.exitCode } })}\n`
        : `stepkey: ${message}\n`,
    );
    if (full.env.STEPKEY_DEBUG === '1') full.stderr(`${debugText(error)}\n`);
    return report.exitCode;
  }
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return pathToFileURL(realpathSync(script)).href === import.meta.url;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  // `stepkey runs | head`: a closed pipe ends the output, not with a stack trace.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
    throw error;
  });
  process.exitCode = await main(process.argv.slice(2));
}
