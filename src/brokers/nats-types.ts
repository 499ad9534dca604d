/**
 * The NATS objects that idem's public API names, declared here by their shape: idem's type
 * declarations then compile in an app without the `@nats-io/*` packages, such as one that uses
 * RabbitMQ or no broker at all. The NATS client's own objects satisfy these types as they are.
 */

/** A connection from `@nats-io/transport-node`'s `connect()` (its `NatsConnection`). */
export interface NatsConnectionLike {
  drain(): Promise<void>;
  close(): Promise<void>;
  isClosed(): boolean;
}

/** A JetStream message as a consumer receives it (`@nats-io/jetstream`'s `JsMsg`). */
export interface JetStreamMessage {
  readonly subject: string;
  readonly seq: number;
  readonly redelivered: boolean;
  readonly data: Uint8Array;
  readonly info: { readonly stream: string; readonly streamSequence: number; readonly deliveryCount: number };
  readonly headers?: { get(name: string): string } | undefined;
  json<T = unknown>(): T;
  string(): string;
  ack(): void;
  /** Acks and waits for the server to confirm it. */
  ackAck(): Promise<boolean>;
  nak(millis?: number): void;
  working(): void;
  term(reason?: string): void;
}
