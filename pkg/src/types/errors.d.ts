// Error codes (docs/errors.md) and the code → HTTP status table (src/errors.js).

/** Every code a failure of the package carries (`err.code`). */
export type KnotErrorCode =
  | 'invalid_argument'
  | 'invalid_option'
  | 'invalid_text'
  | 'token_out_of_range'
  | 'empty_prompt'
  | 'context_length_exceeded'
  | 'no_context'
  | 'unsupported_schema'
  | 'chat_template'
  | 'aborted'
  | 'busy'
  | 'disposed'
  | 'read_failed'
  | 'invalid_model'
  | 'over_budget'
  | 'too_large'
  | 'station_failed'
  | 'no_candidates'
  | 'not_found'
  | 'disabled'
  | 'internal';

/** What a failure of the package looks like (an aborted call's is also named `AbortError`). */
export interface KnotError extends Error {
  code: KnotErrorCode;
  /** The option an `invalid_option` failure is about (`temperature`, `moa.k`, `coltrane`). */
  param?: string;
}

/** The HTTP status a server answers each code with. */
export declare const ERROR_STATUS: Readonly<Record<KnotErrorCode, number>>;

/** The HTTP status for a failure (or a code): its code's, else 500. */
export declare function errorStatus(error: unknown): number;
