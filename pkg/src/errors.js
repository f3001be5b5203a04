// The stable codes every failure of the package carries (`err.code`; docs/errors.md lists them)
// and the HTTP status a server answers each with: the one code → status table. The codes of
// failures raised in Rust come from crates/host/src/error.rs; a test keeps this table equal to
// that list (wasm `errorCodes()`) and to docs/errors.md.

/** @type {Readonly<Record<string, number>>} */
export const ERROR_STATUS = Object.freeze({
  invalid_argument: 400,
  invalid_option: 400,
  invalid_text: 400,
  token_out_of_range: 400,
  empty_prompt: 400,
  context_length_exceeded: 400,
  no_context: 400,
  unsupported_schema: 422,
  chat_template: 400,
  aborted: 499,
  busy: 409,
  disposed: 500,
  read_failed: 502,
  invalid_model: 500,
  over_budget: 500,
  too_large: 500,
  station_failed: 502,
  no_candidates: 500,
  not_found: 404,
  disabled: 501,
  internal: 500,
});

/**
 * The HTTP status for a failure: its `code`'s, or 500 for one without a known code (a bug, or
 * something thrown by code outside the package).
 * @param {unknown} error an error, or a code
 * @returns {number}
 */
export function errorStatus(error) {
  const code = typeof error === 'string' ? error : /** @type {any} */ (error)?.code;
  return (typeof code === 'string' && Object.hasOwn(ERROR_STATUS, code)) ? ERROR_STATUS[code] : 500;
}

/**
 * An error the package raises itself while converting arguments, with its code.
 * @param {string} code
 * @param {string} message
 * @param {ErrorConstructor} [Kind] TypeError (the default) or RangeError
 */
export function coded(code, message, Kind = TypeError) {
  const err = new Kind(message);
  /** @type {any} */ (err).code = code;
  return err;
}
