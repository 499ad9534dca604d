/**
 * The message of an error, for a receipt's or a delivery's stored error and for events. It never
 * holds a secret or a signature: idem's own typed errors name headers, never their values.
 */
export function errorMessage(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return text.length > 2000 ? `${text.slice(0, 2000)}…` : text;
}
