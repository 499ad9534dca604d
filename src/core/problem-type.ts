/**
 * Default prefix of problem `type` URIs, for every problem idem answers (the HTTP integrations'
 * and the webhook receivers'): `urn:idem:problem:key-missing`, `urn:idem:problem:webhook-too-large`,
 * … Not dereferenceable on purpose (idem owns no web address); set the HTTP integration's
 * `problemTypeBase` to your API documentation's address to make them links.
 */
export const defaultProblemTypeBase = 'urn:idem:problem:';

/** The media type of every problem idem answers (RFC 9457). */
export const problemMediaType = 'application/problem+json';

/**
 * The JSON text of a problem document, the one builder of the HTTP integrations' and the webhook
 * receivers' problems: `type` (`base` + `slug`), `title`, `status`, then `members` in their order
 * (`detail`, `code`, …). `members` must never hold a header's value or a secret.
 */
export function problemJson(
  slug: string,
  title: string,
  status: number,
  members: Record<string, unknown>,
  base: string = defaultProblemTypeBase,
): string {
  return JSON.stringify({ type: base + slug, title, status, ...members });
}
