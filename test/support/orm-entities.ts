/**
 * The business tables of the adapter tests (`effects`, made by `prepareAdapter`, and `accounts`)
 * as TypeORM and MikroORM entities, declared without decorators so that nothing depends on
 * decorator metadata. Prisma's models for the same tables are in prisma/schema.prisma.
 */
import { EntitySchema as MikroEntitySchema } from '@mikro-orm/core';
import { EntitySchema } from 'typeorm';

export interface EffectRow {
  id: number;
  tenant: string;
  intent: string;
  payload: unknown;
}

export interface AccountRow {
  id: number;
  balance: number;
}

const typeormEffect = new EntitySchema<EffectRow>({
  name: 'Effect',
  tableName: 'effects',
  columns: {
    id: { type: 'int', primary: true, generated: 'increment' },
    tenant: { type: 'text' },
    intent: { type: 'text' },
    payload: { type: 'jsonb', nullable: true },
  },
});

const typeormAccount = new EntitySchema<AccountRow>({
  name: 'Account',
  tableName: 'accounts',
  columns: {
    id: { type: 'int', primary: true },
    balance: { type: 'int' },
  },
});

class MikroEffect implements EffectRow {
  id!: number;
  tenant!: string;
  intent!: string;
  payload: unknown;
}

class MikroAccount implements AccountRow {
  id!: number;
  balance!: number;
}

const mikroEffect = new MikroEntitySchema<MikroEffect>({
  class: MikroEffect,
  tableName: 'effects',
  properties: {
    id: { type: 'number', primary: true, autoincrement: true },
    tenant: { type: 'string' },
    intent: { type: 'string' },
    payload: { type: 'json', nullable: true },
  },
});

const mikroAccount = new MikroEntitySchema<MikroAccount>({
  class: MikroAccount,
  tableName: 'accounts',
  properties: {
    id: { type: 'number', primary: true, autoincrement: false },
    balance: { type: 'number' },
  },
});

export const ormEntities = {
  typeorm: { Effect: typeormEffect, Account: typeormAccount, all: [typeormEffect, typeormAccount] },
  mikroOrm: { Effect: MikroEffect, Account: MikroAccount, all: [mikroEffect, mikroAccount] },
};
