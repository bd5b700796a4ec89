//! Nacos 3's HTTP API and what came with it, in one test binary (each
//! binary of this crate links the whole server, so fewer build faster):
//! - `http`: the client and admin planes over real HTTP, history,
//!   export and import, clients, the compatibility switch;
//! - `endpoints`: every row of `docs/nacos3.md` against the server;
//! - `gray`: beta and tag releases as two listening gRPC clients see them;
//! - `rbac`: users, roles and permissions per namespace;
//! - `refusals`: a bad parameter and a missing resource at every endpoint.

mod endpoints;
mod gray;
mod http;
mod rbac;
mod refusals;
