/**
 * Stored bodies for display. They are attacker-controlled bytes: the console returns them as JSON
 * strings and the page only ever sets them as text, never as markup. Size-limited so a 10 MB body
 * cannot stall the page.
 */

/** A body as the page shows it. */
export interface BodyPreview {
  /** Size of the stored bytes. */
  bytes: number;
  /** `utf8`: `text` is the text; `hex`: `text` is a hex dump of the first bytes. */
  encoding: 'utf8' | 'hex';
  text: string;
  /** Pretty-printed JSON, when the text parses as JSON. */
  json?: string;
  truncated: boolean;
}

export const textLimit = 64 * 1024;
export const hexLimit = 2 * 1024;

// Control characters other than tab, newline and carriage return mean "binary" even in valid UTF-8.
// eslint-disable-next-line no-control-regex -- control characters are exactly what is looked for
const binaryControl = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/;

export function previewBytes(value: Uint8Array | null | undefined): BodyPreview | null {
  if (value === null || value === undefined) return null;
  const bytes = value.length;
  // Decode one character's worth beyond the limit at most: a cut multi-byte sequence at the end is
  // tolerated by `stream: true`.
  const slice = value.subarray(0, Math.min(bytes, textLimit));
  let text: string | null;
  try {
    // A fresh decoder each time: `stream` keeps state between calls.
    text = new TextDecoder('utf-8', { fatal: true }).decode(slice, { stream: bytes > textLimit });
  } catch {
    text = null;
  }
  if (text !== null && !binaryControl.test(text)) {
    return withJson({ bytes, encoding: 'utf8', text, truncated: bytes > textLimit });
  }
  return { bytes, encoding: 'hex', text: hexDump(value.subarray(0, hexLimit)), truncated: bytes > hexLimit };
}

/** Text stored in a text column (results, payloads): size-limited, JSON pretty-printed. */
export function previewText(value: string | null | undefined): BodyPreview | null {
  if (value === null || value === undefined) return null;
  const bytes = Buffer.byteLength(value);
  const truncated = value.length > textLimit;
  return withJson({
    bytes,
    encoding: 'utf8',
    text: truncated ? value.slice(0, textLimit) : value,
    truncated,
  });
}

/** Parses a JSON text column, or returns null when it is not JSON. */
export function parseJsonText(value: string | null | undefined): unknown {
  if (value === null || value === undefined) return null;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return null;
  }
}

function withJson(preview: BodyPreview): BodyPreview {
  if (preview.truncated) return preview;
  const first = preview.text.trimStart()[0];
  if (first !== '{' && first !== '[' && first !== '"') return preview;
  try {
    return { ...preview, json: JSON.stringify(JSON.parse(preview.text), null, 2) };
  } catch {
    return preview;
  }
}

/** `00000000  7b 22 61 22 …  |{"a"…|`, 16 bytes a line. */
export function hexDump(bytes: Uint8Array): string {
  const lines: string[] = [];
  for (let offset = 0; offset < bytes.length; offset += 16) {
    const row = bytes.subarray(offset, offset + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${offset.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  |${ascii}|`);
  }
  return lines.join('\n');
}
