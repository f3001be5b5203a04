// The model's upload to R2 (scripts/cloudflare/upload.mjs) against a fake S3 server of this file's
// own, on 127.0.0.1 (no Cloudflare account needed): it checks each request's SigV4 signature
// (region `auto`, service `s3`) and payload hash, keeps objects and multipart uploads in memory,
// records every request and can fail chosen ones. Cases: a single put then a skip, a multipart
// upload, resuming after an abort and after a failing part, a file changed under a stale state,
// an upload the server forgot, and refused credentials.
import { AwsV4Signer } from 'aws4fetch';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { UploadError, uploadModel } from '../scripts/cloudflare/upload.mjs';

const MiB = 2 ** 20;
const CREDENTIALS = { accessKeyId: 'AKIDKNOTTEST', secretAccessKey: 'sEcReT/knot+test/0123456789abcdefghijklmno' };
const BUCKET = 'models';
const KEY = 'smol/model.knot';

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const xml = (body) => `<?xml version="1.0" encoding="UTF-8"?>\n${body}`;

/**
 * A fake S3 (the subset R2's multipart upload uses), path-style. `fault(request)` may answer a
 * request instead: a status, with an S3 InternalError.
 * @param {{ maxParts?: number }} options `maxParts`: ListParts' page size (small, to truncate)
 */
async function fakeS3({ maxParts = 1 } = {}) {
  const s3 = {
    /** @type {Map<string, { body: Buffer, meta: Record<string, string> }>} */
    objects: new Map(),
    /** @type {Map<string, { path: string, meta: Record<string, string>, parts: Map<number, { body: Buffer, etag: string }> }>} */
    uploads: new Map(),
    /** @type {{ method: string, op: string, partNumber?: number, length?: string, chunked: boolean, aborted?: boolean }[]} */
    requests: [],
    /** @type {((request: { op: string, partNumber?: number }) => number | undefined) | null} */
    fault: null,
    nextId: 1,
  };
  const error = (res, status, code, message) => {
    res.writeHead(status, { 'content-type': 'application/xml' });
    res.end(xml(`<Error><Code>${code}</Code><Message>${message}</Message></Error>`));
  };
  const server = createServer(async (req, res) => {
    const url = new URL(req.url, `http://${req.headers.host}`);
    const q = url.searchParams;
    const op = req.method === 'HEAD' ? 'HeadObject'
      : req.method === 'PUT' ? (q.has('partNumber') ? 'UploadPart' : 'PutObject')
      : req.method === 'POST' ? (q.has('uploads') ? 'CreateMultipartUpload' : 'CompleteMultipartUpload')
      : req.method === 'GET' ? (q.has('uploadId') ? 'ListParts' : 'GetObject')
      : 'AbortMultipartUpload';
    const record = {
      method: req.method, op, ...(q.has('partNumber') && { partNumber: Number(q.get('partNumber')) }),
      length: req.headers['content-length'], chunked: req.headers['transfer-encoding'] === 'chunked',
    };
    s3.requests.push(record);
    let body;
    try {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      body = Buffer.concat(chunks);
    } catch {
      record.aborted = true;
      return;
    }
    if (!req.complete) {
      record.aborted = true;
      return;
    }

    // Signed as R2 wants it: SigV4, region auto, service s3, with a payload hash.
    const auth = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/auto\/s3\/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$/
      .exec(req.headers.authorization ?? '');
    if (!auth) return error(res, 403, 'AccessDenied', 'No SigV4 authorization for auto/s3');
    const hash = req.headers['x-amz-content-sha256'];
    if (!hash) return error(res, 400, 'InvalidRequest', 'Missing x-amz-content-sha256');
    if (auth[1] !== CREDENTIALS.accessKeyId) return error(res, 403, 'InvalidAccessKeyId', 'The access key does not exist');
    const signed = auth[3].split(';');
    const headers = Object.fromEntries(signed.filter((h) => h !== 'host').map((h) => [h, req.headers[h] ?? '']));
    const expected = await new AwsV4Signer({
      method: req.method, url: url.href, headers, ...CREDENTIALS, service: 's3', region: 'auto', datetime: req.headers['x-amz-date'],
    }).signature();
    if (expected !== auth[4]) {
      return error(res, 403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
    }
    if (hash !== 'UNSIGNED-PAYLOAD' && hash !== sha256(body)) {
      return error(res, 400, 'XAmzContentSHA256Mismatch', "The provided 'x-amz-content-sha256' header does not match what was computed.");
    }

    const faulty = s3.fault?.(record);
    if (faulty) return error(res, faulty, 'InternalError', 'We encountered an internal error. Please try again.');

    const path = decodeURIComponent(url.pathname);
    const meta = Object.fromEntries(Object.entries(req.headers).filter(([h]) => h.startsWith('x-amz-meta-')));
    const upload = q.has('uploadId') ? s3.uploads.get(q.get('uploadId')) : null;
    if (q.has('uploadId') && !upload) return error(res, 404, 'NoSuchUpload', 'The specified multipart upload does not exist.');
    switch (op) {
      case 'HeadObject': {
        const object = s3.objects.get(path);
        if (!object) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, { 'content-length': object.body.length, etag: `"${sha256(object.body).slice(0, 32)}"`, ...object.meta });
        res.end();
        return;
      }
      case 'GetObject': {
        const object = s3.objects.get(path);
        if (!object) return error(res, 404, 'NoSuchKey', 'The specified key does not exist.');
        res.writeHead(206, { 'content-range': `bytes 0-0/${object.body.length}`, ...object.meta }).end(object.body.subarray(0, 1));
        return;
      }
      case 'PutObject':
        s3.objects.set(path, { body, meta });
        res.writeHead(200, { etag: `"${sha256(body).slice(0, 32)}"` }).end();
        return;
      case 'CreateMultipartUpload': {
        const id = `upload-${s3.nextId++}`;
        s3.uploads.set(id, { path, meta, parts: new Map() });
        res.writeHead(200, { 'content-type': 'application/xml' });
        res.end(xml(`<InitiateMultipartUploadResult><Bucket>${BUCKET}</Bucket><Key>${KEY}</Key><UploadId>${id}</UploadId>`
          + '</InitiateMultipartUploadResult>'));
        return;
      }
      case 'UploadPart': {
        const etag = `"${sha256(body).slice(0, 32)}"`;
        upload.parts.set(record.partNumber, { body, etag });
        res.writeHead(200, { etag }).end();
        return;
      }
      case 'ListParts': {
        const marker = Number(q.get('part-number-marker') ?? 0);
        const after = [...upload.parts].filter(([n]) => n > marker).sort(([a], [b]) => a - b);
        const page = after.slice(0, maxParts);
        const truncated = after.length > page.length;
        res.writeHead(200, { 'content-type': 'application/xml' });
        res.end(xml(`<ListPartsResult><Bucket>${BUCKET}</Bucket><Key>${KEY}</Key><UploadId>${q.get('uploadId')}</UploadId>`
          + `<PartNumberMarker>${marker}</PartNumberMarker><MaxParts>${maxParts}</MaxParts><IsTruncated>${truncated}</IsTruncated>`
          + (truncated ? `<NextPartNumberMarker>${page.at(-1)[0]}</NextPartNumberMarker>` : '')
          + page.map(([n, p]) => `<Part><PartNumber>${n}</PartNumber><LastModified>2026-01-01T00:00:00.000Z</LastModified>`
            + `<ETag>${p.etag.replaceAll('"', '&quot;')}</ETag><Size>${p.body.length}</Size></Part>`).join('')
          + '</ListPartsResult>'));
        return;
      }
      case 'CompleteMultipartUpload': {
        const listed = [...body.toString().matchAll(/<Part><PartNumber>(\d+)<\/PartNumber><ETag>([^<]*)<\/ETag><\/Part>/g)]
          .map(([, n, etag]) => ({ n: Number(n), etag: etag.replaceAll('&quot;', '"') }));
        const bodies = [];
        for (const [i, { n, etag }] of listed.entries()) {
          const part = upload.parts.get(n);
          if (!part || part.etag !== etag) return error(res, 400, 'InvalidPart', `Part ${n} is not there with that ETag`);
          if (i > 0 && listed[i - 1].n >= n) return error(res, 400, 'InvalidPartOrder', 'Parts out of order');
          if (i < listed.length - 1 && part.body.length < 5 * MiB) return error(res, 400, 'EntityTooSmall', `Part ${n} is under 5 MiB`);
          bodies.push(part.body);
        }
        s3.objects.set(upload.path, { body: Buffer.concat(bodies), meta: upload.meta });
        s3.uploads.delete(q.get('uploadId'));
        res.writeHead(200, { 'content-type': 'application/xml' });
        res.end(xml(`<CompleteMultipartUploadResult><Bucket>${BUCKET}</Bucket><Key>${KEY}</Key><ETag>"x-${listed.length}"</ETag>`
          + '</CompleteMultipartUploadResult>'));
        return;
      }
      case 'AbortMultipartUpload':
        s3.uploads.delete(q.get('uploadId'));
        res.writeHead(204).end();
        return;
    }
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  s3.endpoint = `http://127.0.0.1:${server.address().port}`;
  s3.close = () => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  };
  /** The requests of `op` since `from`. */
  s3.count = (op, from = 0) => s3.requests.slice(from).filter((r) => r.op === op).length;
  s3.object = () => s3.objects.get(`/${BUCKET}/${KEY}`);
  return s3;
}

describe('uploadModel', () => {
  let s3;
  const root = mkdtempSync(join(tmpdir(), 'knot-upload-test-'));
  let tmp;
  let stateDir;
  before(async () => {
    s3 = await fakeS3();
  });
  after(async () => {
    await s3.close();
    rmSync(root, { recursive: true, force: true });
  });
  beforeEach(() => {
    tmp = mkdtempSync(join(root, 'case-'));
    stateDir = join(tmp, 'state');
    s3.objects.clear();
    s3.uploads.clear();
    s3.requests.length = 0;
    s3.fault = null;
  });

  /** A file of `bytes` random bytes in this test's directory. */
  const file = (name, bytes) => {
    const path = join(tmp, name);
    const data = randomBytes(bytes);
    writeFileSync(path, data);
    return { path, data };
  };
  /** Multipart at test sizes: 5 MiB parts (R2's least), past 10 MiB. */
  const upload = (path, options = {}) => uploadModel({
    file: path, bucket: BUCKET, key: KEY, credentials: CREDENTIALS, endpoint: s3.endpoint, stateDir,
    singlePutBytes: 10 * MiB, partBytes: 5 * MiB, retryMs: 5, ...options,
  });
  const states = () => readdirSync(stateDir, { withFileTypes: true }).filter((e) => e.name.endsWith('.json')).map((e) => e.name);
  const BIG = 23 * MiB + 12345; // 5 parts, the last 3 MiB and a bit

  test('a small file goes in one PutObject, then is skipped', async () => {
    const { path, data } = file('small.knot', 300_000);
    const progress = [];
    const first = await upload(path, { onProgress: (p) => progress.push(p) });
    assert.deepEqual(first, { action: 'uploaded', bytes: data.length, sha256: sha256(data), parts: 1 });
    assert.deepEqual(s3.requests.map((r) => r.op), ['HeadObject', 'PutObject']);
    assert.ok(s3.object().body.equals(data));
    assert.equal(s3.object().meta['x-amz-meta-sha256'], sha256(data));
    // Streamed from the file, yet with its length (R2 wants one), not chunked.
    const put = s3.requests[1];
    assert.equal(put.length, String(data.length));
    assert.equal(put.chunked, false);
    assert.deepEqual(progress.at(-1), { phase: 'upload', bytes: data.length, total: data.length, part: 1, parts: 1 });

    const from = s3.requests.length;
    const second = await upload(path);
    assert.deepEqual(second, { action: 'skipped', bytes: data.length, sha256: sha256(data), parts: 0 });
    assert.deepEqual(s3.requests.slice(from).map((r) => r.op), ['HeadObject']);
  });

  test('an object of another content is replaced', async () => {
    const { path, data } = file('small.knot', 1000);
    s3.objects.set(`/${BUCKET}/${KEY}`, { body: Buffer.alloc(1000), meta: { 'x-amz-meta-sha256': sha256(Buffer.alloc(1000)) } });
    assert.equal((await upload(path)).action, 'uploaded');
    assert.ok(s3.object().body.equals(data));
  });

  test('a file past the single-put limit goes in parts, a failing part tried again', async () => {
    const { path, data } = file('big.knot', BIG);
    let failed = 0;
    s3.fault = (r) => (r.op === 'UploadPart' && r.partNumber === 2 && failed++ === 0 ? 503 : undefined);
    const progress = [];
    let state;
    const result = await upload(path, {
      onProgress: (p) => {
        progress.push(p);
        // Written once the upload is created, without secrets.
        if (p.phase === 'upload' && !state) state = readFileSync(join(stateDir, states()[0]), 'utf8');
      },
    });
    assert.deepEqual(result, { action: 'uploaded', bytes: BIG, sha256: sha256(data), parts: 5 });
    assert.ok(s3.object().body.equals(data), 'the object is the file');
    assert.equal(s3.object().meta['x-amz-meta-sha256'], sha256(data));
    assert.equal(s3.count('CreateMultipartUpload'), 1);
    assert.equal(s3.count('UploadPart'), 6, 'five parts, the second twice');
    assert.equal(s3.count('CompleteMultipartUpload'), 1);
    assert.equal(s3.count('PutObject'), 0);
    assert.equal(s3.uploads.size, 0);
    const uploads = progress.filter((p) => p.phase === 'upload');
    assert.deepEqual(uploads.at(-1).bytes, BIG);
    assert.deepEqual(uploads.map((p) => p.part).slice(1).sort(), [1, 2, 3, 4, 5]);
    assert.ok(!state.includes(CREDENTIALS.secretAccessKey) && !state.includes(CREDENTIALS.accessKeyId));
    assert.equal(JSON.parse(state).uploadId, 'upload-1');
    assert.equal(JSON.parse(state).file.sha256, sha256(data));
    assert.deepEqual(states(), [], 'the state is removed');
  });

  test('an upload aborted through its signal resumes where it stopped', async () => {
    const { path, data } = file('big.knot', BIG);
    const controller = new AbortController();
    let done = 0;
    await assert.rejects(upload(path, {
      signal: controller.signal,
      onProgress: (p) => { if (p.phase === 'upload' && p.part > 0 && ++done === 2) controller.abort(); },
    }), { name: 'AbortError' });
    assert.equal(states().length, 1, 'the state is kept');
    const [uploaded] = [...s3.uploads.values()];
    const there = uploaded.parts.size;
    assert.ok(there >= 2 && there < 5, `${there} parts uploaded before the abort`);

    const from = s3.requests.length;
    const result = await upload(path);
    assert.deepEqual(result, { action: 'resumed', bytes: BIG, sha256: sha256(data), parts: 5 });
    assert.equal(s3.count('UploadPart', from), 5 - there, 'only the missing parts');
    assert.equal(s3.count('ListParts', from), there, 'the listing followed, one part a page');
    assert.equal(s3.count('CreateMultipartUpload', from), 0);
    assert.ok(s3.object().body.equals(data));
    assert.deepEqual(states(), []);
  });

  test('an upload whose part keeps failing resumes, its parts checked', async () => {
    const { path, data } = file('big.knot', BIG);
    s3.fault = (r) => (r.op === 'UploadPart' && r.partNumber === 3 ? 500 : undefined);
    const error = await upload(path).catch((e) => e);
    assert.ok(error instanceof UploadError, String(error));
    assert.equal(error.code, 'network');
    assert.match(error.message, /UploadPart 3 .*HTTP 500 InternalError/);
    assert.equal(s3.requests.filter((r) => r.partNumber === 3).length, 3, 'tried three times');

    // A part of the wrong size (a previous upload's, say) is sent again.
    s3.fault = null;
    const [uploaded] = [...s3.uploads.values()];
    uploaded.parts.set(1, { body: Buffer.alloc(100), etag: '"short"' });
    const from = s3.requests.length;
    const result = await upload(path);
    assert.equal(result.action, 'resumed');
    assert.deepEqual(s3.requests.slice(from).filter((r) => r.op === 'UploadPart').map((r) => r.partNumber).sort(), [1, 3]);
    assert.ok(s3.object().body.equals(data));
  });

  test('a file changed under a stale state starts over, the old upload aborted', async () => {
    const { path } = file('big.knot', BIG);
    const controller = new AbortController();
    await assert.rejects(upload(path, {
      signal: controller.signal,
      onProgress: (p) => { if (p.phase === 'upload' && p.part > 0) controller.abort(); },
    }), { name: 'AbortError' });
    const [old] = s3.uploads.keys();

    const data = randomBytes(BIG);
    writeFileSync(path, data);
    utimesSync(path, new Date(), new Date(Date.now() + 5000));
    const from = s3.requests.length;
    const result = await upload(path);
    assert.deepEqual(result, { action: 'uploaded', bytes: BIG, sha256: sha256(data), parts: 5 });
    assert.equal(s3.count('AbortMultipartUpload', from), 1);
    assert.equal(s3.count('ListParts', from), 0);
    assert.equal(s3.count('UploadPart', from), 5);
    assert.ok(!s3.uploads.has(old));
    assert.ok(s3.object().body.equals(data));
    assert.deepEqual(states(), []);
  });

  test('an upload the server no longer knows starts over', async () => {
    const { path, data } = file('big.knot', BIG);
    const controller = new AbortController();
    await assert.rejects(upload(path, {
      signal: controller.signal,
      onProgress: (p) => { if (p.phase === 'upload' && p.part > 0) controller.abort(); },
    }), { name: 'AbortError' });
    s3.uploads.clear(); // expired
    const from = s3.requests.length;
    const result = await upload(path);
    assert.equal(result.action, 'uploaded');
    assert.deepEqual(s3.requests.slice(from).map((r) => r.op).filter((op) => op !== 'UploadPart'),
      ['HeadObject', 'ListParts', 'CreateMultipartUpload', 'CompleteMultipartUpload']);
    assert.equal(s3.count('UploadPart', from), 5);
    assert.ok(s3.object().body.equals(data));
  });

  test('a file changed while it is uploaded: a changed error', async () => {
    // In parts: seen before completing, which is not asked for.
    const big = file('big.knot', BIG);
    const rewrite = (path, bytes) => {
      writeFileSync(path, randomBytes(bytes));
      utimesSync(path, new Date(), new Date(Date.now() + 5000));
    };
    let rewritten = false;
    const error = await upload(big.path, {
      onProgress: (p) => {
        if (p.phase === 'upload' && p.part > 0 && !rewritten) {
          rewritten = true;
          rewrite(big.path, BIG);
        }
      },
    }).catch((e) => e);
    assert.ok(error instanceof UploadError, String(error));
    assert.equal(error.code, 'changed');
    assert.equal(s3.count('CompleteMultipartUpload'), 0);

    // In one put: the bytes sent are not those hashed, which the payload hash shows.
    const small = file('small.knot', 100_000);
    const put = await upload(small.path, {
      onProgress: (p) => { if (p.phase === 'hash' && p.bytes === p.total) rewrite(small.path, 100_000); },
    }).catch((e) => e);
    assert.equal(put.code, 'changed', String(put));
    assert.match(put.message, /^PutObject .*HTTP 400 XAmzContentSHA256Mismatch/);
  });

  test('no server: a network error after three tries', async () => {
    const closed = createServer();
    await new Promise((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const endpoint = `http://127.0.0.1:${closed.address().port}`;
    await new Promise((resolve) => closed.close(resolve));
    const { path } = file('small.knot', 1000);
    const error = await upload(path, { endpoint }).catch((e) => e);
    assert.ok(error instanceof UploadError, String(error));
    assert.equal(error.code, 'network');
    assert.match(error.message, /^HeadObject: no answer from http:\/\/127\.0\.0\.1:\d+ after 3 tries \(ECONNREFUSED\)/);
  });

  test('refused credentials: an auth error, without the secret', async () => {
    const { path } = file('big.knot', BIG);
    const secretAccessKey = 'wrong/secret+key/0123456789abcdefghijklmnop';
    const error = await upload(path, { credentials: { ...CREDENTIALS, secretAccessKey } }).catch((e) => e);
    assert.ok(error instanceof UploadError, String(error));
    assert.equal(error.code, 'auth');
    assert.equal(error.status, 403);
    assert.equal(error.s3Code, 'SignatureDoesNotMatch');
    assert.match(error.message, /^HeadObject models\/smol\/model\.knot: HTTP 403 SignatureDoesNotMatch/);
    assert.ok(!error.message.includes(secretAccessKey) && !error.message.includes(CREDENTIALS.secretAccessKey));
    // HEAD's 403 has no body: a GET of one byte brought the code.
    assert.deepEqual(s3.requests.map((r) => r.op), ['HeadObject', 'GetObject'], 'not tried again');

    const unknown = await upload(path, { credentials: { ...CREDENTIALS, accessKeyId: 'AKIDNOBODY' } }).catch((e) => e);
    assert.equal(unknown.code, 'auth');
    assert.equal(unknown.s3Code, 'InvalidAccessKeyId');
  });
});
