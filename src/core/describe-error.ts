/**
 * A short, single-line description of an error, for `last_error` columns, dead-letter headers and
 * logs. Used by the outbox's dispatcher and publishers and by the inbox's broker consumers.
 */
export function describeError(error: unknown, max = 1000): string {
  let text: string;
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    text = `${error.name}${typeof code === 'string' ? ` ${code}` : ''}: ${error.message}`;
  } else {
    text = String(error);
  }
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
