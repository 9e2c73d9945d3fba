//! The HTTP API's integration tests, one binary: every route over real HTTP on both stores.

mod support;

mod batches_http;
mod connections_http;
mod dashboard_http;
mod http;
mod keys_http;
mod limits_http;
mod openapi;
mod statements_http;
mod transfers_http;
mod webhooks_http;
