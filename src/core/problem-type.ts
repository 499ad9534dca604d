/**
 * Default prefix of problem `type` URIs, for every problem idem answers (the HTTP integrations'
 * and the webhook receivers'): `urn:idem:problem:key-missing`, `urn:idem:problem:webhook-too-large`,
 * … Not dereferenceable on purpose (idem owns no web address); set the HTTP integration's
 * `problemTypeBase` to your API documentation's address to make them links.
 */
export const defaultProblemTypeBase = 'urn:idem:problem:';
