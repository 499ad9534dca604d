/**
 * Where the webhook sender may connect. In a multi-tenant service, customers register their own
 * endpoint URLs; without a guard, `http://127.0.0.1:5432/`, `http://169.254.169.254/latest/meta-data/`
 * or a name that resolves to 10.0.0.7 turns the sender into a way into the internal network
 * (server-side request forgery). So by default it refuses loopback, private, link-local,
 * multicast, unspecified and other special-purpose addresses, IPv4 and IPv6 alike, including IPv4
 * carried inside IPv6 (`::ffff:127.0.0.1`, NAT64 `64:ff9b::…`, 6to4 `2002:…`), as Svix does.
 *
 * The check runs on the address the connection is actually made to: the sender's own DNS lookup
 * checks every address a name resolves to, at connect time, so a name that resolved to a public
 * address when it was registered and to 127.0.0.1 now (DNS rebinding) is refused. The sender does
 * not follow redirects, so a 3xx cannot lead it elsewhere either.
 *
 * `allowedDestinations` lets tests and internal deployments through: CIDR blocks, single addresses
 * or host names.
 */
import {
  lookup as dnsLookup,
  type LookupAddress,
  type LookupAllOptions,
  type LookupOneOptions,
} from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { IdemError, InvalidArgumentError, isIdemError } from '../../core/errors.js';

/** Why an address is refused. */
export type RefusedKind = 'unspecified' | 'loopback' | 'private' | 'link-local' | 'multicast' | 'reserved';

/** IANA special-purpose blocks the sender refuses, by kind (IPv4 and IPv6). */
const refusedBlocks: [RefusedKind, string[]][] = [
  ['unspecified', ['0.0.0.0/8', '::/128']],
  ['loopback', ['127.0.0.0/8', '::1/128']],
  // RFC 1918, shared address space (carrier-grade NAT, RFC 6598), unique local IPv6.
  ['private', ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', 'fc00::/7']],
  // 169.254.169.254 is the cloud metadata service.
  ['link-local', ['169.254.0.0/16', 'fe80::/10']],
  ['multicast', ['224.0.0.0/4', 'ff00::/8']],
  [
    'reserved',
    [
      '192.0.0.0/24', // IETF protocol assignments
      '192.0.2.0/24', // documentation
      '198.18.0.0/15', // benchmarking
      '198.51.100.0/24', // documentation
      '203.0.113.0/24', // documentation
      '240.0.0.0/4', // reserved, and 255.255.255.255 broadcast
      '::/96', // IPv4-compatible (deprecated)
      '100::/64', // discard-only
      '2001::/32', // Teredo
      '2001:2::/48', // benchmarking
      '2001:db8::/32', // documentation
      '3fff::/20', // documentation
      '64:ff9b:1::/48', // local-use NAT64
      'fec0::/10', // site-local (deprecated)
    ],
  ],
];

const lists = refusedBlocks.map(([kind, blocks]) => {
  const list = new BlockList();
  for (const block of blocks) addBlock(list, block);
  return [kind, list] as const;
});

function addBlock(list: BlockList, block: string): void {
  const [address = '', prefix] = block.split('/');
  const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
  if (prefix === undefined) list.addAddress(address, type);
  else list.addSubnet(address, Number(prefix), type);
}

/**
 * The kind of a special-purpose address, or null for a public one. IPv4 inside IPv6 is judged as
 * the IPv4 address it carries (`::ffff:10.0.0.1` is private; BlockList matches IPv4-mapped
 * addresses against IPv4 blocks itself, NAT64 and 6to4 are unpacked here).
 */
export function refusedKind(address: string): RefusedKind | null {
  const family = isIP(address);
  if (family === 0) return 'reserved';
  const type = family === 6 ? 'ipv6' : 'ipv4';
  for (const [kind, list] of lists) if (list.check(address, type)) return kind;
  if (family === 6) {
    const carried = embeddedIpv4(address);
    if (carried) return refusedKind(carried);
  }
  return null;
}

/** The IPv4 address inside a NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`) address, if it is one. */
function embeddedIpv4(address: string): string | null {
  const words = ipv6Words(address);
  if (!words) return null;
  const v4 = (high: number, low: number) => `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
  if (words[0] === 0x64 && words[1] === 0xff9b && words.slice(2, 6).every((w) => w === 0)) {
    return v4(words[6]!, words[7]!);
  }
  if (words[0] === 0x2002) return v4(words[1]!, words[2]!);
  return null;
}

/** The eight 16-bit words of an IPv6 address (with an optional dotted IPv4 tail), or null. */
function ipv6Words(address: string): number[] | null {
  let text = address.toLowerCase().replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const left = head ? head.split(':') : [];
  const right = tail === undefined ? [] : tail ? tail.split(':') : [];
  const missing = 8 - left.length - right.length;
  if (tail === undefined ? missing !== 0 : missing < 0) return null;
  const words = [...left, ...Array<string>(tail === undefined ? 0 : missing).fill('0'), ...right].map((w) =>
    parseInt(w, 16),
  );
  return words.length === 8 && words.every((w) => w >= 0 && w <= 0xffff) ? words : null;
}

/** Thrown (and recorded as the delivery's error) when a destination is refused. */
export class DestinationRefusedError extends IdemError {
  constructor(
    readonly host: string,
    readonly address: string,
    readonly kind: RefusedKind,
  ) {
    const via = host === address ? address : `${host} resolves to ${address}`;
    super(
      'IDEM_WEBHOOK_DESTINATION_REFUSED',
      `destination refused: ${via}, a ${kind} address (list it in the sender's allowedDestinations to allow it)`,
    );
  }
}

export function isDestinationRefused(error: unknown): error is DestinationRefusedError {
  return isIdemError(error) && error.code === 'IDEM_WEBHOOK_DESTINATION_REFUSED';
}

export type LookupFunction = (
  hostname: string,
  options: LookupAllOptions,
  callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/** Where the sender may connect: the refused blocks minus the allow-list. */
export class DestinationPolicy {
  private readonly hosts = new Set<string>();
  private readonly allowed = new BlockList();

  /**
   * @param allow CIDR blocks (`10.0.0.0/8`, `fd00::/8`), single addresses (`127.0.0.1`, `::1`) or
   *   host names (`hooks.internal`, exact, case-insensitive) the sender may reach although they are
   *   special-purpose. `0.0.0.0/0` and `::/0` allow everything.
   */
  constructor(
    allow: readonly string[] = [],
    private readonly resolve: LookupFunction = dnsLookup,
  ) {
    for (const entry of allow) {
      const value = entry.trim().toLowerCase();
      const [address = '', prefix, extra] = value.split('/');
      const family = isIP(address);
      if (family !== 0) {
        const bits = prefix === undefined ? undefined : Number(prefix);
        if (
          extra !== undefined ||
          (bits !== undefined && !(Number.isInteger(bits) && bits >= 0 && bits <= (family === 4 ? 32 : 128)))
        ) {
          throw new InvalidArgumentError(`allowedDestinations: ${entry} is not a CIDR block`);
        }
        addBlock(this.allowed, value);
      } else if (/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/.test(value)) {
        this.hosts.add(value.replace(/\.$/, ''));
      } else {
        throw new InvalidArgumentError(
          `allowedDestinations: ${entry} is neither an address, a CIDR block nor a host name`,
        );
      }
    }
  }

  /** Whether `host` (a URL's host name) is allowed by name, whatever it resolves to. */
  allowsHost(host: string): boolean {
    return this.hosts.has(bareHost(host).replace(/\.$/, ''));
  }

  /** The refusal for connecting to `address` for `host`, or null. */
  refusal(host: string, address: string): DestinationRefusedError | null {
    if (this.allowsHost(host)) return null;
    const kind = refusedKind(address);
    if (kind === null) return null;
    const family = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (this.allowed.check(address, family)) return null;
    return new DestinationRefusedError(bareHost(host), address, kind);
  }

  /**
   * The refusal for a URL whose host is an IP literal (which connects without a lookup), or null.
   * Host names are checked when they are resolved, by `lookup`.
   */
  literalRefusal(url: URL): DestinationRefusedError | null {
    const host = bareHost(url.hostname);
    return isIP(host) === 0 ? null : this.refusal(host, host);
  }

  /**
   * A `lookup` for `net.connect` (and so `http.request`): resolves every address of the name and
   * refuses the connection if any of them is refused, so the address connected to is always one
   * that was checked.
   */
  readonly lookup = (
    hostname: string,
    options: number | LookupOneOptions | LookupAllOptions,
    callback: (
      error: NodeJS.ErrnoException | null,
      address: string | LookupAddress[],
      family?: number,
    ) => void,
  ): void => {
    const asked = typeof options === 'number' ? { family: options } : options;
    this.resolve(hostname, { ...asked, all: true }, (error, addresses) => {
      if (error) return callback(error, []);
      for (const { address } of addresses) {
        const refused = this.refusal(hostname, address);
        if (refused) return callback(refused, []);
      }
      if ((asked as LookupAllOptions).all) return callback(null, addresses);
      const first = addresses[0];
      if (!first)
        return callback(Object.assign(new Error(`no address for ${hostname}`), { code: 'ENOTFOUND' }), []);
      callback(null, first.address, first.family);
    });
  };
}

/** A URL host without IPv6 brackets, lower-case. */
function bareHost(host: string): string {
  return host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
}
