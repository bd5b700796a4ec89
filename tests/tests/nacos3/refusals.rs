//! Every served Nacos 3 endpoint that takes parameters, called once with
//! a bad parameter (the answer names the field, or says why the value is
//! refused) and once about a resource that does not exist (the answer
//! says so, or, where Nacos answers an absent resource with success, an
//! empty answer). The successes are in `http.rs`, `gray.rs` and
//! `rbac.rs`; the endpoints without parameters are called by
//! `endpoints.rs`, and this test checks that every served row of
//! `docs/nacos3.md` is one or the other.

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use understudy_server::config::Settings;
use understudy_tests::Server;

/// One case a line: method, path, query (`-` for none), the status
/// wanted, optionally `header:NAME=VALUE` and `body:JSON`, and the rest
/// of the line, which the answer's body must contain. Each endpoint has
/// two lines: its bad parameter, then its missing resource. The server
/// holds namespaces `ns-x` and `empty-ns`, the persistent instance
/// 10.0.0.1:80 of `svc`, the config `d`/`g` (content `x`), the user
/// `taken` and the MCP server `m` (version 1).
const CASES: &str = r##"
# the client plane
POST /nacos/v3/client/ns/instance serviceName=svc&ip=10.0.0.1&port=-1 400 Param 'port' is illegal
POST /nacos/v3/client/ns/instance serviceName=fresh&ip=10.0.0.1&port=80&heartBeat=true 200 "code":21003

DELETE /nacos/v3/client/ns/instance serviceName=svc&ip=10.0.0.1 400 'port'
DELETE /nacos/v3/client/ns/instance serviceName=nope&ip=10.0.0.1&port=80 200 "data":"ok"

GET /nacos/v3/client/ns/instance/list - 400 'serviceName'
GET /nacos/v3/client/ns/instance/list serviceName=nope 200 "data":[]

GET /nacos/v3/client/cs/config dataId=d 400 'groupName'
GET /nacos/v3/client/cs/config dataId=nope&groupName=g 200 "code":20004

# admin naming
POST /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.1&port=99999 400 Param 'port' is illegal
POST /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.2&port=80&ephemeral=true 400 persistent

GET /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.1&port=x 400 invalid port
GET /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.9&port=80 404 "code":20004

PUT /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.1&port=80&weight=abc 400 invalid weight
PUT /nacos/v3/admin/ns/instance serviceName=nope&ip=10.0.0.1&port=80 400 "code":21008

DELETE /nacos/v3/admin/ns/instance serviceName=svc&ip=10.0.0.1 400 'port'
DELETE /nacos/v3/admin/ns/instance serviceName=nope&ip=10.0.0.1&port=80 200 "data":"ok"

GET /nacos/v3/admin/ns/instance/list - 400 'serviceName'
GET /nacos/v3/admin/ns/instance/list serviceName=nope 404 "code":30000

PUT /nacos/v3/admin/ns/instance/partial serviceName=svc&ip=10.0.0.1&port=80&weight=x 400 invalid weight
PUT /nacos/v3/admin/ns/instance/partial serviceName=svc&ip=10.0.0.9&port=80&weight=2 404 "code":20004

PUT /nacos/v3/admin/ns/instance/metadata/batch serviceName=svc&metadata=notjson 400 invalid metadata
PUT /nacos/v3/admin/ns/instance/metadata/batch serviceName=nope&metadata=%7B%22a%22%3A%22b%22%7D 200 "updated":[]

DELETE /nacos/v3/admin/ns/instance/metadata/batch serviceName=svc&metadata=notjson 400 invalid metadata
DELETE /nacos/v3/admin/ns/instance/metadata/batch serviceName=nope&metadata=%7B%22a%22%3A%22b%22%7D 200 "updated":[]

POST /nacos/v3/admin/ns/service serviceName=s2&protectThreshold=x 400 invalid protectThreshold
POST /nacos/v3/admin/ns/service serviceName=svc 400 already exists

GET /nacos/v3/admin/ns/service - 400 'serviceName'
GET /nacos/v3/admin/ns/service serviceName=nope 400 "code":21008

PUT /nacos/v3/admin/ns/service serviceName=svc&protectThreshold=x 400 invalid protectThreshold
PUT /nacos/v3/admin/ns/service serviceName=nope 400 "code":21008

DELETE /nacos/v3/admin/ns/service - 400 'serviceName'
DELETE /nacos/v3/admin/ns/service serviceName=nope 400 "code":21008

GET /nacos/v3/admin/ns/service/list pageNo=0 400 invalid pageNo
GET /nacos/v3/admin/ns/service/list namespaceId=empty-ns 200 "totalCount":0

GET /nacos/v3/admin/ns/service/subscribers - 400 'serviceName'
GET /nacos/v3/admin/ns/service/subscribers serviceName=nope 200 "totalCount":0

PUT /nacos/v3/admin/ns/health/instance serviceName=svc&ip=10.0.0.1&port=80 400 'healthy'
PUT /nacos/v3/admin/ns/health/instance serviceName=svc&ip=10.0.0.9&port=80&healthy=false 404 "code":21003

GET /nacos/v3/admin/ns/client - 400 'clientId'
GET /nacos/v3/admin/ns/client clientId=nope 404 clientId [ nope ] not exist

GET /nacos/v3/admin/ns/client/publish/list - 400 'clientId'
GET /nacos/v3/admin/ns/client/publish/list clientId=nope 404 "code":20004

GET /nacos/v3/admin/ns/client/subscribe/list - 400 'clientId'
GET /nacos/v3/admin/ns/client/subscribe/list clientId=nope 404 "code":20004

GET /nacos/v3/admin/ns/client/service/publisher/list - 400 'serviceName'
GET /nacos/v3/admin/ns/client/service/publisher/list serviceName=nope 200 "data":[]

GET /nacos/v3/admin/ns/client/service/subscriber/list - 400 'serviceName'
GET /nacos/v3/admin/ns/client/service/subscriber/list serviceName=nope 200 "data":[]

PUT /nacos/v3/admin/ns/ops/switches entry=pushEnabled 400 'value'
PUT /nacos/v3/admin/ns/ops/switches entry=nope&value=1 400 'nope' is not a switch

# admin config
POST /nacos/v3/admin/cs/config dataId=d&groupName=g 400 'content'
POST /nacos/v3/admin/cs/config dataId=d&groupName=g&content=y 409 header:casMd5=0000 "code"

GET /nacos/v3/admin/cs/config dataId=d 400 'groupName'
GET /nacos/v3/admin/cs/config dataId=nope&groupName=g 404 "code":20004

DELETE /nacos/v3/admin/cs/config dataId=d 400 'groupName'
DELETE /nacos/v3/admin/cs/config dataId=nope&groupName=g 200 "data":true

DELETE /nacos/v3/admin/cs/config/batch - 400 'ids'
DELETE /nacos/v3/admin/cs/config/batch ids=999999 200 "data":true

GET /nacos/v3/admin/cs/config/beta dataId=d 400 'groupName'
GET /nacos/v3/admin/cs/config/beta dataId=d&groupName=g 404 not in beta

DELETE /nacos/v3/admin/cs/config/beta dataId=d 400 'groupName'
DELETE /nacos/v3/admin/cs/config/beta dataId=nope&groupName=g 200 "data":true

GET /nacos/v3/admin/cs/config/list pageNo=0 400 invalid pageNo
GET /nacos/v3/admin/cs/config/list namespaceId=empty-ns 200 "totalCount":0

GET /nacos/v3/admin/cs/config/listener dataId=d 400 'groupName'
GET /nacos/v3/admin/cs/config/listener dataId=nope&groupName=g 200 "listenersStatus":{}

GET /nacos/v3/admin/cs/listener - 400 'ip'
GET /nacos/v3/admin/cs/listener ip=10.9.9.9 200 "listenersStatus":{}

GET /nacos/v3/admin/cs/config/export ids=abc 400 invalid ids
GET /nacos/v3/admin/cs/config/export ids=999999 200 .metadata.yml

POST /nacos/v3/admin/cs/config/clone targetNamespaceId=ns-x 400 'namespaceId'
POST /nacos/v3/admin/cs/config/clone namespaceId=nope&policy=ABORT 200 body:[{"configId":"1"}] "code":22001

GET /nacos/v3/admin/cs/history/list dataId=d 400 'groupName'
GET /nacos/v3/admin/cs/history/list dataId=nope&groupName=g 200 "totalCount":0

GET /nacos/v3/admin/cs/history dataId=d&groupName=g 400 'nid'
GET /nacos/v3/admin/cs/history dataId=d&groupName=g&nid=999999 404 "code":20004

GET /nacos/v3/admin/cs/history/previous dataId=d&groupName=g 400 'id'
GET /nacos/v3/admin/cs/history/previous dataId=d&groupName=g&id=999999 404 "code":20004

GET /nacos/v3/admin/cs/history/configs - 400 'namespaceId'
GET /nacos/v3/admin/cs/history/configs namespaceId=empty-ns 200 "data":[]

# admin core
GET /nacos/v3/admin/core/namespace - 400 'namespaceId'
GET /nacos/v3/admin/core/namespace namespaceId=nope 404 "code":22001

POST /nacos/v3/admin/core/namespace namespaceId=bad%20id&namespaceName=x 400 invalid namespaceId
POST /nacos/v3/admin/core/namespace namespaceId=ns-x&namespaceName=x 400 "code":22002

PUT /nacos/v3/admin/core/namespace namespaceId=ns-x 400 'namespaceName'
PUT /nacos/v3/admin/core/namespace namespaceId=nope&namespaceName=x 400 "code":22001

DELETE /nacos/v3/admin/core/namespace - 400 'namespaceId'
DELETE /nacos/v3/admin/core/namespace namespaceId=nope 400 "code":22001

GET /nacos/v3/admin/core/namespace/check - 400 'namespaceId'
GET /nacos/v3/admin/core/namespace/check namespaceId=nope 200 "data":0

GET /nacos/v3/admin/core/cluster/node/list state=SIDEWAYS 400 invalid state
GET /nacos/v3/admin/core/cluster/node/list address=10.9.9.9 200 "data":[]

# the MCP registry
GET /nacos/v3/admin/ai/mcp - 400 'mcpName'
GET /nacos/v3/admin/ai/mcp mcpName=nope 404 "code":50000

POST /nacos/v3/admin/ai/mcp serverSpecification=notjson 400 invalid serverSpecification
POST /nacos/v3/admin/ai/mcp serverSpecification=%7B%22name%22%3A%22m%22%2C%22version%22%3A%222%22%7D 409 has existed

PUT /nacos/v3/admin/ai/mcp serverSpecification=%7B%22name%22%3A%22m%22%7D 400 versionDetail.version
PUT /nacos/v3/admin/ai/mcp serverSpecification=%7B%22name%22%3A%22nope%22%2C%22version%22%3A%221%22%7D 404 "code":50000

DELETE /nacos/v3/admin/ai/mcp - 400 'mcpName'
DELETE /nacos/v3/admin/ai/mcp mcpName=m&version=9 404 "code":50001

GET /nacos/v3/admin/ai/mcp/list search=fuzzy 400 invalid search
GET /nacos/v3/admin/ai/mcp/list mcpName=nope 200 "totalCount":0

# the A2A registry
GET /nacos/v3/admin/ai/a2a - 400 'agentName'
GET /nacos/v3/admin/ai/a2a agentName=nope 404 "code":50100

POST /nacos/v3/admin/ai/a2a agentCard=notjson 400 invalid agentCard
POST /nacos/v3/admin/ai/a2a agentCard=%7B%22name%22%3A%22a%22%2C%22version%22%3A%221%22%2C%22protocolVersion%22%3A%220.3.0%22%2C%22preferredTransport%22%3A%22JSONRPC%22%2C%22url%22%3A%22http%3A%2F%2Fa%22%7D 409 already exist

PUT /nacos/v3/admin/ai/a2a agentCard=%7B%22name%22%3A%22a%22%7D 400 agentCard.version
PUT /nacos/v3/admin/ai/a2a agentCard=%7B%22name%22%3A%22nope%22%2C%22version%22%3A%221%22%2C%22protocolVersion%22%3A%220.3.0%22%2C%22preferredTransport%22%3A%22JSONRPC%22%2C%22url%22%3A%22http%3A%2F%2Fa%22%7D 404 "code":50100

DELETE /nacos/v3/admin/ai/a2a - 400 'agentName'
DELETE /nacos/v3/admin/ai/a2a agentName=nope 200 "data":"ok"

GET /nacos/v3/admin/ai/a2a/list search=fuzzy 400 invalid search
GET /nacos/v3/admin/ai/a2a/list agentName=nope 200 "totalCount":0

GET /nacos/v3/admin/ai/a2a/version/list - 400 'agentName'
GET /nacos/v3/admin/ai/a2a/version/list agentName=nope 404 "code":50100

# auth
POST /nacos/v3/auth/user username=fresh 400 'password'

POST /nacos/v3/auth/user username=taken&password=p 400 user 'taken' already exist!

PUT /nacos/v3/auth/user username=taken 400 'newPassword'
PUT /nacos/v3/auth/user username=nobody&newPassword=p 404 user 'nobody' not found

DELETE /nacos/v3/auth/user - 400 'username'
DELETE /nacos/v3/auth/user username=nobody 200 delete user ok!

GET /nacos/v3/auth/user/list pageNo=x 400 invalid pageNo
GET /nacos/v3/auth/user/list username=nobody 200 "totalCount":0

GET /nacos/v3/auth/user/search search=fuzzy 200 "data":[
GET /nacos/v3/auth/user/search username=nobody 200 "data":[]

POST /nacos/v3/auth/role role=r 400 'username'
POST /nacos/v3/auth/role role=r&username=nobody 404 "code":20004

DELETE /nacos/v3/auth/role username=x 400 'role'
DELETE /nacos/v3/auth/role role=nope&username=nobody 200 delete role of user nobody ok!

GET /nacos/v3/auth/role/list search=fuzzy 400 invalid search
GET /nacos/v3/auth/role/list role=nope 200 "totalCount":0

GET /nacos/v3/auth/role/search role= 200 "data":[]
GET /nacos/v3/auth/role/search role=nope 200 "data":[]

POST /nacos/v3/auth/permission role=r&resource=x&action=z 400 invalid action
POST /nacos/v3/auth/permission role=nope&resource=x&action=r 404 role 'nope' not found

GET /nacos/v3/auth/permission role=r&resource=x&action=z 400 invalid action
GET /nacos/v3/auth/permission role=nope&resource=x&action=r 200 "data":false

DELETE /nacos/v3/auth/permission role=r&resource=x 400 'action'
DELETE /nacos/v3/auth/permission role=nope&resource=x&action=r 200 delete permission ok!

GET /nacos/v3/auth/permission/list pageSize=0 400 invalid pageSize
GET /nacos/v3/auth/permission/list role=nope 200 "totalCount":0
"##;

/// A case, as read from [`CASES`].
struct Case<'a> {
    method: Method,
    path: &'a str,
    query: &'a str,
    status: StatusCode,
    header: Option<(&'a str, &'a str)>,
    body: Option<&'a str>,
    says: &'a str,
}

/// The first word of `text` and what follows it.
fn word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    (&text[..end], text[end..].trim_start())
}

fn cases() -> Vec<Case<'static>> {
    let mut cases = Vec::new();
    for line in CASES.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (method, rest) = word(line);
        let (path, rest) = word(rest);
        let (query, rest) = word(rest);
        let (status, mut rest) = word(rest);
        let (mut header, mut body) = (None, None);
        loop {
            let (token, after) = word(rest);
            if let Some(pair) = token.strip_prefix("header:") {
                header = Some(pair.split_once('=').expect("header:NAME=VALUE"));
            } else if let Some(json) = token.strip_prefix("body:") {
                body = Some(json);
            } else {
                break;
            }
            rest = after;
        }
        cases.push(Case {
            method: method.parse().expect("a method"),
            path,
            query: if query == "-" { "" } else { query },
            status: StatusCode::from_bytes(status.as_bytes()).expect("a status"),
            header,
            body,
            says: rest,
        });
    }
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_names_a_bad_parameter_and_answers_a_missing_resource() -> anyhow::Result<()>
{
    let server = Server::start(Settings::default()).await?;
    let client = reqwest::Client::new();
    for (method, path, query) in [
        (
            Method::POST,
            "/nacos/v3/admin/core/namespace",
            "namespaceId=ns-x&namespaceName=X",
        ),
        (
            Method::POST,
            "/nacos/v3/admin/core/namespace",
            "namespaceId=empty-ns&namespaceName=E",
        ),
        (
            Method::POST,
            "/nacos/v3/admin/ns/instance",
            "serviceName=svc&ip=10.0.0.1&port=80&ephemeral=false",
        ),
        (
            Method::POST,
            "/nacos/v3/admin/cs/config",
            "dataId=d&groupName=g&content=x",
        ),
        (
            Method::POST,
            "/nacos/v3/auth/user",
            "username=taken&password=p",
        ),
        (
            Method::POST,
            "/nacos/v3/admin/ai/mcp",
            "serverSpecification=%7B%22name%22%3A%22m%22%2C%22protocol%22%3A%22stdio%22%2C%22version%22%3A%221%22%7D",
        ),
        (
            Method::POST,
            "/nacos/v3/admin/ai/a2a",
            "agentCard=%7B%22name%22%3A%22a%22%2C%22version%22%3A%221%22%2C%22protocolVersion%22%3A%220.3.0%22%2C%22preferredTransport%22%3A%22JSONRPC%22%2C%22url%22%3A%22http%3A%2F%2Fa%22%7D",
        ),
    ] {
        let reply = client
            .request(method, server.url(&format!("{path}?{query}")))
            .send()
            .await?;
        assert_eq!(reply.status(), StatusCode::OK, "{}", reply.text().await?);
    }
    let cases = cases();
    let mut wrong = Vec::new();
    for case in &cases {
        let mut request = client.request(
            case.method.clone(),
            server.url(&format!("{}?{}", case.path, case.query)),
        );
        if let Some((name, value)) = case.header {
            request = request.header(name, value);
        }
        if let Some(body) = case.body {
            request = request
                .header("Content-Type", "application/json")
                .body(body);
        }
        let reply = request.send().await?;
        let status = reply.status();
        let body = String::from_utf8_lossy(&reply.bytes().await?).into_owned();
        if status != case.status || !body.contains(case.says) {
            wrong.push(format!(
                "{} {}?{}: wanted {} with {:?}, got {status} {body}",
                case.method, case.path, case.query, case.status, case.says
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Two cases an endpoint, and every served endpoint of the table has
    // them, but those that take no parameter and the two whose refusals
    // are driven elsewhere.
    let mut per_endpoint: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for case in &cases {
        *per_endpoint
            .entry((case.method.to_string(), case.path))
            .or_default() += 1;
    }
    let odd: Vec<_> = per_endpoint.iter().filter(|(_, n)| **n != 2).collect();
    assert!(
        odd.is_empty(),
        "endpoints without exactly two cases: {odd:?}"
    );
    let elsewhere = [
        // No parameters.
        "/nacos/v3/admin/core/state",
        "/nacos/v3/admin/core/state/liveness",
        "/nacos/v3/admin/core/state/readiness",
        "/nacos/v3/admin/core/cluster/node/self",
        "/nacos/v3/admin/core/namespace/list",
        "/nacos/v3/admin/ns/client/list",
        "/nacos/v3/admin/ns/health/checkers",
        "/nacos/v3/admin/ns/ops/metrics",
        "/nacos/v3/admin/ns/service/selector/types",
        // GET (PUT has its cases above).
        "/nacos/v3/admin/ns/ops/switches",
        // A multipart upload: http.rs drives a bad policy, a file that is
        // no ZIP and a namespace that does not exist.
        "/nacos/v3/admin/cs/config/import",
        // Login and the initial admin: rbac.rs and http.rs.
        "/nacos/v3/auth/user/login",
        "/nacos/v3/auth/user/admin",
    ];
    let uncovered: Vec<String> = super::endpoints::rows()
        .into_iter()
        .filter(|r| r.status.starts_with("served"))
        .filter(|r| !per_endpoint.contains_key(&(r.method.to_string(), r.path.as_str())))
        .filter(|r| !elsewhere.contains(&r.path.as_str()))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        uncovered.is_empty(),
        "served endpoints without a bad-parameter and a missing-resource case: {uncovered:#?}"
    );
    server.stop().await
}
