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
import type { SenderStatements } from './statements.js';

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
    const { rows } = await this.sql.query(this.statements.insertEndpoint, [
      endpoint.id ?? randomUUID(),
      endpoint.url,
      endpoint.secrets,
      endpoint.eventTypes ?? null,
      new Date(this.clock.now()),
      this.tenant,
    ]);
    return decode(rows[0]!);
  }

  async get(id: string): Promise<WebhookEndpoint | null> {
    const { rows } = await this.sql.query(this.statements.getEndpoint, [id, this.tenant]);
    return rows[0] ? decode(rows[0]) : null;
  }

  async list(): Promise<WebhookEndpoint[]> {
    const { rows } = await this.sql.query(this.statements.listEndpoints, [this.tenant]);
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
    const { rows } = await this.sql.query(this.statements.updateEndpoint, [
      id,
      change.url ?? null,
      change.secrets ?? null,
      change.eventTypes ?? null,
      change.eventTypes !== undefined,
      this.tenant,
    ]);
    return rows[0] ? decode(rows[0]) : undefined;
  }

  /** Stops deliveries to the endpoint; its pending deliveries are cancelled (redrive after `enable`). */
  async disable(id: string, reason: string): Promise<boolean> {
    const { rowCount } = await this.sql.query(this.statements.disableEndpoint, [
      id,
      reason,
      new Date(this.clock.now()),
      this.tenant,
    ]);
    await this.sql.query(this.statements.cancelEndpointDeliveries, [
      id,
      `endpoint disabled: ${reason}`,
      this.tenant,
    ]);
    return rowCount === 1;
  }

  async enable(id: string): Promise<WebhookEndpoint | undefined> {
    const { rows } = await this.sql.query(this.statements.enableEndpoint, [id, this.tenant]);
    return rows[0] ? decode(rows[0]) : undefined;
  }

  /** Removes the endpoint with its deliveries and their attempts. */
  async remove(id: string): Promise<boolean> {
    const { rowCount } = await this.sql.query(this.statements.deleteEndpoint, [id, this.tenant]);
    return rowCount === 1;
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

export function decode(row: Record<string, unknown>): WebhookEndpoint {
  return {
    tenant: row.tenant_id as string,
    id: row.id as string,
    url: row.url as string,
    secrets: row.secrets as string[],
    eventTypes: (row.event_types as string[] | null) ?? null,
    enabled: row.enabled as boolean,
    disabledReason: (row.disabled_reason as string | null) ?? null,
    disabledAt: toMillis(row.disabled_at),
    createdAt: toMillis(row.created_at)!,
  };
}
