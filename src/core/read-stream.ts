import type { Readable } from 'node:stream';

/**
 * Reads a Node stream (a request body) to its end, refusing it as soon as it passes `limit`
 * bytes: `tooLarge()` is thrown and the rest of the stream is drained and discarded, never
 * destroyed, so the connection stays up for the 413 and the sender reads it (a torn-down
 * connection leaves it a reset, which a webhook provider retries for days). Shared by the HTTP
 * integrations and the webhook receivers, as `readWebStream` is; each throws its own error.
 */
export function readNodeStream(stream: Readable, limit: number, tooLarge: () => Error): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
    };
    const onData = (chunk: Buffer | string) => {
      const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      size += buffer.length;
      if (size > limit) {
        cleanup();
        stream.resume();
        reject(tooLarge());
        return;
      }
      chunks.push(buffer);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onError = (error: Error) => {
      cleanup();
      reject(error);
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
  });
}

/**
 * Reads a web `ReadableStream` (a fetch `Request` body: Hono, and any fetch runtime) to its end,
 * refusing it as soon as it passes `limit` bytes: the stream is cancelled and `tooLarge()` thrown.
 * Shared by the HTTP integrations (which parse the body) and the webhook receivers (which verify
 * its exact bytes); each throws its own error.
 */
export async function readWebStream(
  stream: ReadableStream<Uint8Array> | null,
  limit: number,
  tooLarge: () => Error,
): Promise<Uint8Array> {
  if (!stream) return new Uint8Array(0);
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge();
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return chunks[0]!;
  const body = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    body.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return body;
}
