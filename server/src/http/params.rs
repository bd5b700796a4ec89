//! Request parameters as Nacos reads them: the query string and an
//! `application/x-www-form-urlencoded` body, merged (query first, first
//! value wins, like Spring's `getParameter`). Decoding is strict: a
//! parameter that is not valid UTF-8 is refused by name rather than
//! silently mangled. Typed getters apply Nacos' defaults and name the
//! field in every error.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use percent_encoding::percent_decode;
use understudy_core::{ClusterName, InstanceSpec, Metadata, ServiceKey};

use super::error::ApiError;

/// The merged parameters of one request.
#[derive(Debug, Default, Clone)]
pub(crate) struct Params {
    pairs: Vec<(String, String)>,
}

impl<S: Send + Sync> FromRequest<S> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let mut pairs = Vec::new();
        if let Some(query) = req.uri().query() {
            decode_into(query.as_bytes(), &mut pairs)?;
        }
        let is_form = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        let body = Bytes::from_request(req, state)
            .await
            .map_err(ApiError::from_body)?;
        if is_form {
            decode_into(&body, &mut pairs)?;
        }
        Ok(Self { pairs })
    }
}

fn decode_into(raw: &[u8], pairs: &mut Vec<(String, String)>) -> Result<(), ApiError> {
    for part in raw.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        let (name, value) = match part.iter().position(|b| *b == b'=') {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => (part, &b""[..]),
        };
        let name = decode(name)
            .map_err(|_| ApiError::invalid("parameter", "a parameter name is not valid UTF-8"))?;
        let value = decode(value).map_err(|_| {
            ApiError::invalid_owned(
                name.clone(),
                "value is not valid UTF-8 after percent-decoding",
            )
        })?;
        pairs.push((name, value));
    }
    Ok(())
}

fn decode(raw: &[u8]) -> Result<String, std::str::Utf8Error> {
    let plus_as_space: Vec<u8> = raw
        .iter()
        .map(|b| if *b == b'+' { b' ' } else { *b })
        .collect();
    percent_decode(&plus_as_space)
        .decode_utf8()
        .map(|s| s.into_owned())
}

/// How the service name is read: v1 rewrites a plain name to
/// `groupName@@name`; v2 takes the name and the group apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    V1,
    V2,
}

impl Params {
    /// Decodes a raw query string and form body as one request's
    /// parameters, the way [`FromRequest`] does (the fuzz targets feed it
    /// bytes without building a request).
    pub(crate) fn decode(query: &[u8], form: &[u8]) -> Result<Self, ApiError> {
        let mut pairs = Vec::new();
        decode_into(query, &mut pairs)?;
        decode_into(form, &mut pairs)?;
        Ok(Self { pairs })
    }

    /// Adds a parameter read elsewhere (a multipart field); earlier ones
    /// of the same name still win.
    pub(crate) fn push(&mut self, name: String, value: String) {
        self.pairs.push((name, value));
    }

    #[cfg(test)]
    pub(crate) fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self {
            pairs: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// The raw value, blank or not.
    pub(crate) fn raw(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value if present and not blank (Nacos `optional`).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.raw(name).filter(|v| !v.trim().is_empty())
    }

    /// The first of several spellings that is present.
    pub(crate) fn get_any(&self, names: &[&str]) -> Option<&str> {
        names.iter().find_map(|n| self.get(n))
    }

    /// A required value: absent or blank is a 400 naming it.
    pub(crate) fn required(&self, name: &'static str) -> Result<&str, ApiError> {
        self.get(name).ok_or_else(|| ApiError::missing(name))
    }

    /// A Nacos boolean: `true`, `t`, `y`, `yes`, `on` (any case) are true,
    /// anything else false; absent or blank is `default`.
    pub(crate) fn flag(&self, name: &str, default: bool) -> bool {
        self.get(name).map_or(default, |v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "t" | "y" | "yes" | "on"
            )
        })
    }

    /// A parsed number, `default` when absent or blank.
    pub(crate) fn number<T: std::str::FromStr>(
        &self,
        name: &'static str,
    ) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|raw| {
                raw.trim().parse::<T>().map_err(|_| {
                    ApiError::invalid(name, format!("'{}' is not a valid number", clip(raw)))
                })
            })
            .transpose()
    }

    /// Whether `search` asks for a blur search (`blur`: `*` is any run of
    /// characters) rather than an exact one (`accurate`); absent is
    /// `default_blur`.
    pub(crate) fn blur(&self, default_blur: bool) -> Result<bool, ApiError> {
        match self.get("search") {
            None => Ok(default_blur),
            Some("blur") => Ok(true),
            Some("accurate") => Ok(false),
            Some(other) => Err(ApiError::invalid(
                "search",
                format!("'{}' is neither accurate nor blur", clip(other)),
            )),
        }
    }

    /// A required port, 0 to 65535.
    pub(crate) fn port(&self) -> Result<u16, ApiError> {
        parse_port(self.required("port")?)
    }

    /// The service key. v1 accepts `group@@name` and rewrites a plain name
    /// with `groupName`; v2 keeps the two apart.
    pub(crate) fn service_key(&self, api: Api) -> Result<ServiceKey, ApiError> {
        let name = self.required("serviceName")?;
        let namespace = self.get("namespaceId").unwrap_or("");
        let group = self.get("groupName").unwrap_or("");
        if api == Api::V2 && name.contains(understudy_core::GROUP_SEPARATOR) {
            return Err(ApiError::invalid(
                "serviceName",
                "v2 takes the plain service name and the group in groupName",
            ));
        }
        Ok(ServiceKey::parse(namespace, group, name)?)
    }

    /// The cluster of one instance (`clusterName`, or the older `cluster`).
    pub(crate) fn cluster(&self) -> Result<ClusterName, ApiError> {
        let raw = self.get_any(&["clusterName", "cluster"]).unwrap_or("");
        if let Some(refusal) = understudy_proto::nacos_rpc::cluster_param_check(raw) {
            return Err(ApiError::param_check("clusterName", refusal));
        }
        Ok(ClusterName::parse(raw)?)
    }

    /// A comma-separated cluster filter: the raw string (echoed in the
    /// answer) and the parsed names.
    pub(crate) fn cluster_filter(
        &self,
        name: &'static str,
    ) -> Result<(String, Vec<ClusterName>), ApiError> {
        let raw = self.get(name).unwrap_or("").to_owned();
        let clusters = raw
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| ClusterName::parse(c).map_err(|e| ApiError::invalid(name, e.to_string())))
            .collect::<Result<_, _>>()?;
        Ok((raw, clusters))
    }

    /// The `metadata` parameter, if present.
    pub(crate) fn metadata(&self) -> Result<Option<Metadata>, ApiError> {
        self.raw("metadata")
            .map(|raw| understudy_proto::nacos::parse_metadata(raw).map_err(ApiError::from))
            .transpose()
    }

    /// An instance as `POST /instance` describes it.
    pub(crate) fn instance_spec(&self) -> Result<InstanceSpec, ApiError> {
        let ip = self.required("ip")?.trim().to_owned();
        let port = self.port()?;
        let mut spec = InstanceSpec::new(ip, port);
        spec.cluster = self.cluster()?;
        if let Some(weight) = self.number::<f64>("weight")? {
            spec.weight = weight;
        }
        spec.enabled = match self.get("enabled") {
            Some(_) => self.flag("enabled", true),
            None => self.flag("enable", true),
        };
        spec.healthy = self.flag("healthy", true);
        spec.metadata = self.metadata()?.unwrap_or_default();
        spec.instance_id = self.get("instanceId").map(str::to_owned);
        // Validated here too, so a bad value is refused before it is queued.
        understudy_core::check_ip(&spec.ip)?;
        understudy_core::check_weight(spec.weight)?;
        Ok(spec)
    }
}

/// Parses a port, 0 to 65535.
pub(crate) fn parse_port(raw: &str) -> Result<u16, ApiError> {
    match raw.trim().parse::<i64>() {
        Ok(port) => u16::try_from(port)
            .map_err(|_| ApiError::param_check("port", understudy_proto::nacos_rpc::PORT_ILLEGAL)),
        Err(_) => Err(ApiError::invalid(
            "port",
            format!("'{}' is not a valid port", clip(raw)),
        )),
    }
}

pub(crate) use understudy_proto::clip;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nacos_booleans_are_lenient() {
        let p = Params::from_pairs(&[("a", "True"), ("b", "on"), ("c", "nope"), ("d", "")]);
        assert!(p.flag("a", false));
        assert!(p.flag("b", false));
        assert!(!p.flag("c", true));
        assert!(p.flag("d", true));
        assert!(!p.flag("missing", false));
    }

    #[test]
    fn strict_decoding_refuses_invalid_utf8() {
        let mut pairs = Vec::new();
        assert!(decode_into(b"serviceName=%FF%FE", &mut pairs).is_err());
        decode_into(b"a=1+2&b=%40", &mut pairs).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("a".to_owned(), "1 2".to_owned()),
                ("b".to_owned(), "@".to_owned())
            ]
        );
    }

    #[test]
    fn ports_out_of_range_name_the_field() {
        for bad in ["70000", "-1", "x", "1.5"] {
            assert_eq!(parse_port(bad).unwrap_err().field(), Some("port"), "{bad}");
        }
        assert_eq!(parse_port("65535").unwrap(), 65535);
    }
}
