/** `idem drill` arguments → `DrillOptions`. */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { InvalidArgumentError } from '../core/errors.js';
import { drillNames, isDrillName, type DrillName } from './drill-names.js';
import { parseHeaderLine } from './headers.js';
import { drillDefaults, type DrillOptions } from './options.js';

export const drillUsage = `usage: idem drill --url URL [options]

Runs black-box conformance drills against an Idempotency-Key endpoint and exits non-zero when one fails.

  --url URL                  the endpoint under test (required)
  --method M                 HTTP method (default ${drillDefaults.method})
  --body JSON                request body sent by every drill
  --body-file F              request body read from a file
  --alt-body JSON            a different valid payload for the key-reuse drill
                             (default: the body with its first number plus 1)
  --header 'Name: value'     a header on every request; repeat for more
  --second-credential 'Name: value'
                             another tenant's credential: runs the cross-tenant drill
  --concurrency N            identical requests sent at once (default ${drillDefaults.concurrency})
  --key-header NAME          key header name (default ${drillDefaults.keyHeader})
  --replay-header NAME       replay marker header (default ${drillDefaults.replayHeader})
  --require-key              the server requires keys: check missing/malformed keys are refused
  --count-url URL            GET before and after each drill to count effects (a number, an
                             array, or JSON with count/total or a data/items/results array)
  --count-path PATH          where the count is in that JSON, e.g. meta.total or data.length
  --only NAME[,NAME]         run only these drills: ${drillNames.join(', ')}
  --timeout MS               per-request timeout and in-progress retry budget (default ${drillDefaults.timeoutMs})
  --json FILE                write the report as JSON ('-' for stdout)
  --quiet                    no progress on stderr
`;

export interface DrillCommand {
  help: boolean;
  options: DrillOptions;
  jsonPath: string | null;
  quiet: boolean;
}

/** Parses argv; throws `InvalidArgumentError` with a message for a person. */
export async function parseDrillArgs(argv: string[]): Promise<DrillCommand> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        url: { type: 'string' },
        method: { type: 'string' },
        body: { type: 'string' },
        'body-file': { type: 'string' },
        'alt-body': { type: 'string' },
        header: { type: 'string', multiple: true, short: 'H' },
        'second-credential': { type: 'string' },
        concurrency: { type: 'string' },
        'key-header': { type: 'string' },
        'replay-header': { type: 'string' },
        'require-key': { type: 'boolean' },
        'count-url': { type: 'string' },
        'count-path': { type: 'string' },
        only: { type: 'string' },
        timeout: { type: 'string' },
        json: { type: 'string' },
        quiet: { type: 'boolean', short: 'q' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    throw new InvalidArgumentError(error instanceof Error ? error.message : String(error));
  }
  if (values.help) return { help: true, options: { url: '' }, jsonPath: null, quiet: false };
  if (!values.url) throw new InvalidArgumentError('--url is required');
  if (values.body !== undefined && values['body-file'] !== undefined) {
    throw new InvalidArgumentError('give --body or --body-file, not both');
  }
  let body: Uint8Array | string | undefined = values.body;
  if (values['body-file'] !== undefined) {
    try {
      body = await readFile(values['body-file']);
    } catch (error) {
      throw new InvalidArgumentError(`cannot read --body-file: ${(error as Error).message}`);
    }
  }
  const only: DrillName[] = [];
  for (const name of (values.only ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    if (!isDrillName(name))
      throw new InvalidArgumentError(`unknown drill '${name}' (drills: ${drillNames.join(', ')})`);
    only.push(name);
  }
  const options: DrillOptions = {
    url: values.url,
    headers: (values.header ?? []).map(parseHeaderLine),
    only,
  };
  if (values.method !== undefined) options.method = values.method;
  if (body !== undefined) options.body = body;
  if (values['alt-body'] !== undefined) options.altBody = values['alt-body'];
  if (values['second-credential'] !== undefined)
    options.secondCredential = parseHeaderLine(values['second-credential']);
  if (values.concurrency !== undefined) options.concurrency = integer('--concurrency', values.concurrency);
  if (values['key-header'] !== undefined) options.keyHeader = values['key-header'];
  if (values['replay-header'] !== undefined) options.replayHeader = values['replay-header'];
  if (values['require-key']) options.requireKey = true;
  if (values['count-url'] !== undefined) options.countUrl = values['count-url'];
  if (values['count-path'] !== undefined) options.countPath = values['count-path'];
  if (values.timeout !== undefined) options.timeoutMs = integer('--timeout', values.timeout);
  return { help: false, options, jsonPath: values.json ?? null, quiet: values.quiet ?? false };
}

function integer(flag: string, value: string): number {
  if (!/^\d+$/.test(value)) throw new InvalidArgumentError(`${flag} must be a whole number, not '${value}'`);
  return Number(value);
}
