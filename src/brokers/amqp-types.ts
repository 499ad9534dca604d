/**
 * The amqplib objects that idem's public API names, declared here by their shape: idem's type
 * declarations then compile in an app without amqplib's types (`@types/amqplib`), such as one that
 * uses NATS or no broker at all. amqplib's own objects satisfy these types as they are.
 */

/** A connected amqplib `ChannelModel`: what `amqplib.connect(url)` resolves to. */
export interface AmqpChannelModel {
  createConfirmChannel(): Promise<unknown>;
  close(): Promise<void>;
}

/** A message as amqplib hands it to a consumer (its `ConsumeMessage`). */
export interface AmqpConsumeMessage {
  content: Buffer;
  fields: {
    deliveryTag: number;
    redelivered: boolean;
    exchange: string;
    routingKey: string;
    consumerTag: string;
  };
  properties: {
    contentType: unknown;
    contentEncoding: unknown;
    headers: Record<string, unknown> | undefined;
    deliveryMode: unknown;
    priority: unknown;
    correlationId: unknown;
    replyTo: unknown;
    expiration: unknown;
    messageId: unknown;
    timestamp: unknown;
    type: unknown;
    userId: unknown;
    appId: unknown;
    clusterId: unknown;
  };
}
