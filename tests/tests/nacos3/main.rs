//! Nacos 3's HTTP API, its gRPC additions and what came with them, in one
//! test binary (each binary of this crate links the whole server, so fewer
//! build faster):
//! - `http`: the client and admin planes over real HTTP, history,
//!   export and import, clients, the compatibility switch;
//! - `endpoints`: every row of `docs/nacos3.md` against the server;
//! - `gray`: beta and tag releases as two listening gRPC clients see them;
//! - `rbac`: users, roles and permissions per namespace;
//! - `refusals`: a bad parameter and a missing resource at every endpoint;
//! - `fuzzy_watch`: Nacos 3's fuzzy watch of services and configs at the
//!   wire;
//! - `mcp`: the MCP registry over gRPC and the admin API;
//! - `a2a`: the A2A agent registry over gRPC and the admin API;
//! - `lock`: distributed locks, on one node and across nodes.

mod a2a;
mod endpoints;
mod fuzzy_watch;
mod gray;
mod http;
mod lock;
mod mcp;
mod rbac;
mod refusals;
