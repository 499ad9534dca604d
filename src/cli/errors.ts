/**
 * What the `idem` command prints when a command fails: one line that names the setting at fault
 * and the fix, never a stack trace. Errors it does not recognise print their message.
 */

/** A failure the command has already put into words. */
export class CliError extends Error {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, options);
    this.name = 'CliError';
  }
}

interface ErrorFields {
  code?: string;
  errno?: number;
  address?: string;
  port?: number;
  hostname?: string;
  errors?: unknown[];
}

/** The one line for `error`, raised while running `idem <command>`. */
export function describeError(error: unknown, command: string): string {
  if (!(error instanceof Error)) return String(error);
  if (error instanceof CliError) return error.message;
  const fields = error as Error & ErrorFields;
  const inner = (fields.errors?.[0] ?? {}) as ErrorFields; // AggregateError: one per address tried
  const code = fields.code ?? inner.code;
  const missing = /Cannot find package '([^']+)'/.exec(error.message);
  if (code === 'ERR_MODULE_NOT_FOUND' && missing) {
    const name = packageName(missing[1]!);
    return `idem ${command} needs the package ${name}, which is not installed: npm install ${name}`;
  }
  switch (code) {
    case '42P01': // undefined_table
    case '3F000': {
      // invalid_schema_name
      const schema = /(?:relation|schema) "([^".]+)/.exec(error.message)?.[1] ?? 'idem';
      return missingTables(schema);
    }
    case '28P01':
    case '28000':
      return `PostgreSQL refused DATABASE_URL's user or password: ${error.message}`;
    case '3D000': {
      const database = /database "([^"]+)"/.exec(error.message)?.[1] ?? 'it';
      return `${error.message}: create it (createdb ${database}) or fix DATABASE_URL`;
    }
    case 'ECONNREFUSED': {
      const where = fields.address ?? inner.address;
      const port = fields.port ?? inner.port;
      const at = where ? ` at ${where}${port ? `:${port}` : ''}` : '';
      // The demo also connects to its broker and provider: a refusal on another port than
      // DATABASE_URL's is not PostgreSQL's (a RabbitMQ restart used to be reported as one).
      if (port !== undefined && port !== databasePort()) {
        return `cannot connect to ${where ?? 'a server'}:${port}: connection refused; is the server running?`;
      }
      return `cannot connect to PostgreSQL${at} (DATABASE_URL): connection refused; is the server running?`;
    }
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return `DATABASE_URL's host '${fields.hostname ?? inner.hostname ?? '?'}' cannot be resolved`;
    case 'EADDRINUSE': {
      const where = `${fields.address ?? '?'}:${fields.port ?? '?'}`;
      const fix = command === 'demo' ? 'set PORT and PROVIDER_PORT to free ports' : 'choose another --port';
      return `${where} is already in use: ${fix}, or stop what listens there`;
    }
  }
  if (/timeout expired|Connection terminated due to connection timeout/i.test(error.message)) {
    return `cannot connect to PostgreSQL (DATABASE_URL): ${error.message}`;
  }
  if (error.message) return error.message.split('\n')[0]!;
  const first = fields.errors?.[0];
  return first instanceof Error && first.message ? first.message : error.name;
}

/** The message for a schema without idem's tables. */
export function missingTables(schema: string): string {
  return `idem's tables are missing in schema ${schema}: run idem migrate${schema === 'idem' ? '' : ` --schema ${schema}`}`;
}

/** `@scope/name/sub` → `@scope/name`; `name/sub` → `name`. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
}

/** DATABASE_URL's port (PostgreSQL's 5432 when it names none or cannot be read). */
function databasePort(): number {
  try {
    return Number(new URL(process.env.DATABASE_URL ?? '').port || 5432);
  } catch {
    return 5432;
  }
}
