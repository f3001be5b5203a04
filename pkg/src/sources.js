// The KnotByteSource implementations that run everywhere (no node: imports).
export { BufferKnotSource } from './buffer.js';
export { HttpKnotSource } from './http.js';
