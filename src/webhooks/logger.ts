/**
 * Where the webhook receiver, processor and sender report. Fields never hold a secret, a signature
 * or a signature header: the code only ever logs source names, delivery ids, event types, states,
 * statuses and the messages of its own typed errors (which name headers, never their values).
 */
export type LogFields = Record<string, string | number | boolean | null | undefined>;

export interface WebhookLogger {
  debug?(message: string, fields: LogFields): void;
  info?(message: string, fields: LogFields): void;
  warn?(message: string, fields: LogFields): void;
  error?(message: string, fields: LogFields): void;
}

/** The default: warnings and errors as one JSON line each on stderr; nothing else. */
export const consoleLogger: WebhookLogger = {
  warn: (message, fields) => console.warn(JSON.stringify({ level: 'warn', message, ...fields })),
  error: (message, fields) => console.error(JSON.stringify({ level: 'error', message, ...fields })),
};

/** A logger that drops everything. */
export const silentLogger: WebhookLogger = {};

/** The message of an error, for logs. */
export function errorMessage(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > 2000 ? `${text.slice(0, 2000)}…` : text;
}
