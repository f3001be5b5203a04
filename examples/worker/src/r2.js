// A KnotByteSource over an R2 object: one ranged GET per read (`end` inclusive), each counted
// into the isolate's current meter (meter.js) as production counts it: a subrequest when issued.
import { currentMeter } from './meter.js';

export class R2KnotSource {
  /**
   * @param {R2Bucket} bucket
   * @param {string} key
   */
  constructor(bucket, key) {
    this.bucket = bucket;
    this.key = key;
    this.reads = 0;
    this.bytes = 0;
  }

  /**
   * @param {number} start
   * @param {number} end inclusive
   * @returns {Promise<Uint8Array>}
   */
  async rangeGet(start, end) {
    const meter = currentMeter();
    meter?.r2Read();
    const object = await this.bucket.get(this.key, { range: { offset: start, length: end - start + 1 } });
    if (object === null) {
      const e = new Error(`R2 object '${this.key}' not found in the bucket bound as MODELS`);
      // Retrying cannot make it appear.
      e.permanent = true;
      throw e;
    }
    const bytes = new Uint8Array(await object.arrayBuffer());
    this.reads++;
    this.bytes += bytes.byteLength;
    meter?.r2Received(bytes.byteLength);
    return bytes;
  }
}
