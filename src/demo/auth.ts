/** `Authorization: Bearer sk_test_<tenant>`, tenant `[a-z0-9_]{1,32}`; anything else is refused. */
const bearer = /^Bearer sk_test_([a-z0-9_]{1,32})$/;

export function tenantFromAuthorization(header: string | string[] | undefined): string | undefined {
  if (typeof header !== 'string') return undefined;
  return bearer.exec(header)?.[1];
}
