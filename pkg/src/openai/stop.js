// OpenAI's `stop` sequences over streamed text: text is let through as soon as it cannot be the
// start of a stop sequence; at a stop sequence the text before it is the last, and the sequence
// itself is never sent.

export class StopMatcher {
  /** @param {string[]} stops */
  constructor(stops) {
    this.stops = stops;
    this.held = '';
    this.stopped = false;
    /** The sequence that stopped the text. @type {string | null} */
    this.matched = null;
  }

  /**
   * Takes the next piece of text; returns what may be sent now.
   * @param {string} piece
   * @returns {string}
   */
  push(piece) {
    if (this.stopped) return '';
    const text = this.held + piece;
    let cut = -1;
    for (const s of this.stops) {
      const at = text.indexOf(s);
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
        this.matched = s;
      }
    }
    if (cut >= 0) {
      this.stopped = true;
      this.held = '';
      return text.slice(0, cut);
    }
    // Hold back the longest end of the text that some stop sequence starts with.
    let keep = 0;
    for (const s of this.stops) {
      for (let k = Math.min(s.length - 1, text.length); k > keep; k--) {
        if (text.endsWith(s.slice(0, k))) {
          keep = k;
          break;
        }
      }
    }
    this.held = text.slice(text.length - keep);
    return text.slice(0, text.length - keep);
  }

  /** The text still held when generation ends without a stop sequence. */
  flush() {
    const rest = this.stopped ? '' : this.held;
    this.held = '';
    return rest;
  }
}
