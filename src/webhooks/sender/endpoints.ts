/**
 * Subscriber endpoints of one tenant: add, list, change, rotate secrets, disable, enable, remove.
 * `sender.endpoints` are the sender's default tenant's; `sender.endpointsOf(tenant)` another's.
 */
import { randomUUID } from 'node:crypto';
import { toMillis, type Clock } from '../../core/clock.js';
import { InvalidArgumentError } from '../../core/errors.js';
import type { Queryable } from '../../core/sql.js';
import type { DestinationPolicy } from './destination.js';
import { parseSigningSecret } from './sign.js';
import type { EndpointRow, SenderStatements } from './statements.js';

/** An endpoint as stored. `secrets` are signing secrets: keep this object out of logs. */
export interface WebhookEndpoint {
  /** The tenant whose messages it receives (`''`: the default tenant). */
  tenant: string;
  id: string;
  url: string;
  secrets: string[];
  /** `null`: every event type. */
  eventTypes: string[] | null;
  enabled: boolean;
  disabledReason: string | null;
  /** Epoch ms. */
  disabledAt: number | null;
  /** Epoch ms. */
  createdAt: number;
}

/** A new endpoint. */
export interface NewWebhookEndpoint {
  /** Default: a random UUID. */
  id?: string;
  /** `http:` or `https:`. */
  url: string;
  /** `whsec_…` and/or `whsk_…` signing secrets; every one signs each attempt. */
  secrets: string[];
  /** Event types it subscribes to. Default: every type. */
  eventTypes?: string[] | null;
}

export class WebhookEndpoints {
  constructor(
    private readonly sql: Queryable,
    private readonly statements: SenderStatements,
    private readonly clock: Clock,
    /** The tenant these endpoints belong to. */
    readonly tenant: string,
    private readonly destinations?: DestinationPolicy,
  ) {}

  /**
   * Adds an endpoint. An `http:`/`https:` URL whose host is a refused IP literal (`127.0.0.1`,
   * `[::ffff:10.0.0.1]`, `169.254.169.254`…) is refused here with `InvalidArgumentError`, so a
   * customer registering one hears it at once; host names are checked when a delivery connects.
   */
  async create(endpoint: NewWebhookEndpoint): Promise<WebhookEndpoint> {
    validate(endpoint.url, endpoint.secrets, this.destinations);
    const row = await this.statements.insertEndpoint(this.sql, {
      tenant: this.tenant,
      id: endpoint.id ?? randomUUID(),
      url: endpoint.url,
      secrets: endpoint.secrets,
      eventTypes: endpoint.eventTypes ?? null,
      now: new Date(this.clock.now()),
    });
    return decode(row!);
  }

  async get(id: string): Promise<WebhookEndpoint | null> {
    const row = await this.statements.getEndpoint(this.sql, { tenant: this.tenant, id });
    return row ? decode(row) : null;
  }

  async list(): Promise<WebhookEndpoint[]> {
    const rows = await this.statements.listEndpoints(this.sql, { tenant: this.tenant });
    return rows.map(decode);
  }

  /**
   * Changes the URL, the secrets (rotation: pass `[newSecret, oldSecret]`, later `[newSecret]`) or
   * the subscribed types (`null` for every type).
   */
  async update(
    id: string,
    change: { url?: string; secrets?: string[]; eventTypes?: string[] | null },
  ): Promise<WebhookEndpoint | undefined> {
    if (change.url !== undefined || change.secrets !== undefined) {
      validate(
        change.url ?? 'https://placeholder.invalid/',
        change.secrets ?? ['whsec_AAAA'],
        this.destinations,
      );
    }
    const row = await this.statements.updateEndpoint(this.sql, {
      tenant: this.tenant,
      id,
      url: change.url ?? null,
      secrets: change.secrets ?? null,
      eventTypes: change.eventTypes ?? null,
      setEventTypes: change.eventTypes !== undefined,
    });
    return row ? decode(row) : undefined;
  }

  /** Stops deliveries to the endpoint; its pending deliveries are cancelled (redrive after `enable`). */
  async disable(id: string, reason: string): Promise<boolean> {
    const endpoint = { tenant: this.tenant, id };
    const disabled = await this.statements.disableEndpoint(this.sql, {
      ...endpoint,
      reason,
      now: new Date(this.clock.now()),
    });
    await this.statements.cancelEndpointDeliveries(this.sql, {
      ...endpoint,
      error: `endpoint disabled: ${reason}`,
    });
    return disabled === 1;
  }

  async enable(id: string): Promise<WebhookEndpoint | undefined> {
    const row = await this.statements.enableEndpoint(this.sql, { tenant: this.tenant, id });
    return row ? decode(row) : undefined;
  }

  /** Removes the endpoint with its deliveries and their attempts. */
  async remove(id: string): Promise<boolean> {
    return (await this.statements.deleteEndpoint(this.sql, { tenant: this.tenant, id })) === 1;
  }
}

function validate(url: string, secrets: string[], destinations: DestinationPolicy | undefined): void {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new InvalidArgumentError('an endpoint url must be an absolute URL');
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
    throw new InvalidArgumentError('an endpoint url must be http: or https:');
  }
  const refused = destinations?.literalRefusal(parsed);
  if (refused) throw new InvalidArgumentError(`an endpoint url may not point there: ${refused.message}`);
  if (secrets.length === 0) throw new InvalidArgumentError('an endpoint needs at least one signing secret');
  for (const secret of secrets) parseSigningSecret(secret);
}

export function decode(row: EndpointRow): WebhookEndpoint {
  return {
    tenant: row.tenant_id,
    id: row.id,
    url: row.url,
    secrets: row.secrets,
    eventTypes: row.event_types ?? null,
    enabled: row.enabled,
    disabledReason: row.disabled_reason ?? null,
    disabledAt: toMillis(row.disabled_at),
    createdAt: toMillis(row.created_at)!,
  };
}
