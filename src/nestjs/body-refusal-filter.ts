/**
 * Nest parses request bodies before any interceptor runs: on Express with body-parser, on Fastify
 * with its content-type parsers. A body they refuse (not JSON, too large, a media type without a
 * parser) never reaches `@Idempotent()`, and Nest answers it with its own JSON error. This filter
 * answers those refusals of a keyed request with the contract's problem documents instead (400
 * `body-malformed`, 413 `body-too-large`, 415 `media-type-unsupported`), like idem/express and
 * idem/fastify do; nothing was claimed or stored. Every other exception goes to Nest's
 * `BaseExceptionFilter`, as if this filter were not there.
 *
 * Register it globally: `{ provide: APP_FILTER, useExisting: IdempotencyBodyFilter }` in a module,
 * or `app.useGlobalFilters(app.get(IdempotencyBodyFilter))`. With a global filter of your own
 * that extends `BaseExceptionFilter`, extend this one instead.
 */
import { Catch, Inject, Injectable, type ArgumentsHost } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { HttpIdempotency } from '../http/engine.js';
import { rawHeaderValues } from '../http/node-response-capture.js';
import type { CapturedResponse } from '../http/options.js';
import { IDEM_MODULE_OPTIONS, type IdemModuleOptions } from './options.js';
import { rawRequestOf, sendComplete } from './platform.js';

export class IdempotencyBodyFilter extends BaseExceptionFilter {
  private readonly engine: HttpIdempotency<unknown>;

  constructor(options: IdemModuleOptions<unknown>) {
    super();
    this.engine = new HttpIdempotency<unknown>(options);
  }

  override catch(exception: unknown, host: ArgumentsHost): void {
    const problem = this.problemFor(exception, host);
    if (problem) return sendComplete(host.switchToHttp().getResponse<unknown>(), problem);
    super.catch(exception, host);
  }

  /** The problem document for a body refusal of a covered request with a key, or null. */
  problemFor(exception: unknown, host: ArgumentsHost): CapturedResponse | null {
    if (host.getType() !== 'http') return null;
    const raw = rawRequestOf(host.switchToHttp().getRequest<unknown>());
    if (!this.engine.covers(raw.method ?? '')) return null;
    if (rawHeaderValues(raw.rawHeaders, this.engine.options.keyHeader).length === 0) return null;
    return bodyRefusal(this.engine, exception);
  }
}

Catch()(IdempotencyBodyFilter);
Injectable()(IdempotencyBodyFilter);
Inject(IDEM_MODULE_OPTIONS)(IdempotencyBodyFilter, undefined, 0);

/**
 * body-parser's error types (Express) and Fastify's content-type parser codes. Nest 12 wraps them
 * in an `HttpException` whose `cause` is the original; earlier versions pass them as they are.
 */
function bodyRefusal(engine: HttpIdempotency<unknown>, exception: unknown): CapturedResponse | null {
  for (let error = exception, depth = 0; depth < 3 && typeof error === 'object' && error; depth++) {
    const { type, code, cause } = error as { type?: unknown; code?: unknown; cause?: unknown };
    const problem = refusalProblem(engine, type ?? code);
    if (problem) return problem;
    error = cause;
  }
  return null;
}

function refusalProblem(engine: HttpIdempotency<unknown>, code: unknown): CapturedResponse | null {
  switch (code) {
    case 'entity.too.large':
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return engine.problem(
        'body-too-large',
        'the request body is larger than this route accepts; nothing was stored',
      );
    case 'entity.parse.failed':
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return engine.bodyMalformed('the request body is not valid JSON');
    case 'request.size.invalid':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return engine.bodyMalformed('the request body does not match its Content-Length');
    case 'encoding.unsupported':
    case 'charset.unsupported':
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return engine.problem(
        'media-type-unsupported',
        "this route cannot read the request body's Content-Type or encoding; nothing was stored",
      );
    default:
      return null;
  }
}
