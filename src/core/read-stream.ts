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
