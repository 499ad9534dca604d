import type { ChannelModel } from 'amqplib';
import type { AmqpChannelModel } from './amqp-types.js';

/** Connects from a URL (loading amqplib on first use) or calls the factory. */
export async function connectAmqp(
  connection: string | (() => Promise<AmqpChannelModel>),
): Promise<ChannelModel> {
  // The factory returns amqplib's ChannelModel; its public type is only the shape idem names.
  if (typeof connection === 'function') return (await connection()) as ChannelModel;
  const amqp = await import('amqplib');
  return amqp.connect(connection);
}
