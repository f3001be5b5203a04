// The station scripts' entry (wrangler.station.toml): the Durable Object classes of a split model
// and nothing else. A station script is deployed with no public URL (workers_dev and
// preview_urls off, no routes), and should one be reached anyway, this fetch answers 404 to
// everything: it never serves the OpenAI routes, /stats or a station's /step. The coordinator
// reaches a station through its Durable Object binding, whose calls go to the class's own fetch
// (stations.js), never to this handler, so the stations answer only the coordinator.
export { HeadStation, LayerStation } from './stations.js';

export default {
  async fetch(request) {
    const { pathname } = new URL(request.url);
    return Response.json({
      error: {
        message: `Unknown route: ${request.method} ${pathname}: this script serves only its Durable Object bindings (a station of a split model)`,
        type: 'invalid_request_error',
        param: null,
        code: 'unknown_url',
      },
    }, { status: 404 });
  },
};
