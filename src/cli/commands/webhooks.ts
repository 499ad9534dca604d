import { isIdemError } from '../../core/errors.js';
import { discardReceipt } from '../../webhooks/discard.js';
import { listParkedEntities, skipEntityGap } from '../../webhooks/entities.js';
import { integerOption, parseSubcommand, usageError } from '../args.js';
import { checkMigrated, openDatabase } from '../database.js';

const usage = `usage:
  idem webhooks parked [--scope S] [--tenant T] [--limit 100] [--json] [--schema idem]
      list sequence entities parked on a gap: the version they wait for, what waits behind it, why
  idem webhooks skip --scope S --key K [--through V] [--reason TEXT] [--tenant T] [--schema idem]
      skip the missing versions of one entity (never applied: their effects are lost unless made by
      hand) and resume it; by default through the version just below the lowest one waiting
  idem webhooks discard --source S --delivery-id D [--reason TEXT] [--tenant T] [--schema idem]
      make one pending or waiting receipt a dead letter (never handled; redrive brings it back),
      e.g. a version far ahead that would keep its entity parked; unparks the entity when nothing
      else waits behind its gap
  --tenant: the tenant of the receipts (default: the default tenant; parked: every tenant)`;

/** `idem webhooks <parked|skip|discard>`: operator tools for order-aware webhook processing. */
export async function run(argv: string[]): Promise<number> {
  const args = parseSubcommand('webhooks', usage, argv, ['parked', 'skip', 'discard'], {
    schema: { type: 'string', default: 'idem' },
    scope: { type: 'string' },
    key: { type: 'string' },
    source: { type: 'string' },
    'delivery-id': { type: 'string' },
    tenant: { type: 'string' },
    through: { type: 'string' },
    reason: { type: 'string' },
    limit: { type: 'string', default: '100' },
    json: { type: 'boolean', default: false },
  });
  if (args.exitCode !== undefined) return args.exitCode;
  const { values, subcommand: command } = args;
  const limit = integerOption('limit', values.limit, 1);
  if (typeof limit === 'string') return usageError('webhooks', limit);
  if (command === 'skip' && (!values.scope || !values.key)) {
    // Skipping is an operator's decision about one entity: name it.
    return usageError('webhooks', 'skip needs --scope and --key');
  }
  if (command === 'discard' && (!values.source || !values['delivery-id'])) {
    // Discarding is an operator's decision about one delivery: name it.
    return usageError('webhooks', 'discard needs --source and --delivery-id');
  }
  const db = await openDatabase();
  try {
    await checkMigrated(db, values.schema);
    if (command === 'parked') {
      const parked = await listParkedEntities(db.sql, {
        schema: values.schema,
        scope: values.scope,
        limit,
        tenant: values.tenant,
      });
      if (values.json) {
        console.log(JSON.stringify(parked, null, 2));
        return 0;
      }
      for (const e of parked) {
        console.log(
          `${e.tenant === '' ? '' : `[${e.tenant}] `}${e.scope}/${e.key}  applied=${e.appliedVersion ?? '-'}  missing=${e.missingVersion ?? '-'}  ` +
            `waiting=${e.waiting} (lowest ${e.lowestWaitingVersion ?? '-'})  parked=${new Date(e.parkedAt).toISOString()}\n    ${e.reason}`,
        );
      }
      console.log(`${parked.length} parked entit${parked.length === 1 ? 'y' : 'ies'}`);
      return 0;
    }
    if (command === 'discard') {
      const discarded = await discardReceipt(db.sql, {
        schema: values.schema,
        source: values.source!,
        deliveryId: values['delivery-id']!,
        reason: values.reason,
        tenant: values.tenant,
      });
      const entity = discarded.entity ? ` (entity ${discarded.entity.scope}/${discarded.entity.key})` : '';
      console.log(
        `discarded ${values.source}/${values['delivery-id']}${entity}: ${discarded.from} → dead` +
          (discarded.unparked ? '; its entity had nothing else waiting and is no longer parked' : ''),
      );
      return 0;
    }
    const result = await skipEntityGap(db.sql, {
      schema: values.schema,
      scope: values.scope!,
      key: values.key!,
      through: values.through,
      reason: values.reason,
      tenant: values.tenant,
    });
    console.log(
      `skipped versions ${result.from}–${result.through} of ${values.scope}/${values.key}; ` +
        `${result.woken} waiting receipt(s) due again`,
    );
    return 0;
  } catch (error) {
    if (isIdemError(error)) {
      console.error(`idem webhooks ${command}: ${error.message}`);
      return 1;
    }
    throw error;
  } finally {
    await db.close();
  }
}
