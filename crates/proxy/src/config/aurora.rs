//! Aurora's names for things: which instances a reader route discovers (`readers = "aurora"`), and the
//! host name of each. A cluster endpoint `name.cluster-XYZ.region.rds.amazonaws.com` (or the reader endpoint
//! `name.cluster-ro-XYZ...`, or a custom one `name.cluster-custom-XYZ...`) has its instances at
//! `<server_id>.XYZ.region.rds.amazonaws.com`, on the same port; a route whose host is an address, a CNAME
//! or a domain of its own says where instances are with `instance_domain`. Pure functions, tested here.

/// The longest label a host name may have (RFC 1035); Aurora's instance identifiers are at most 63 too.
const MAX_LABEL: usize = 63;

/// The prefixes of the second label of an Aurora cluster endpoint, longest first.
const CLUSTER_PREFIXES: &[&str] = &["cluster-custom-", "cluster-ro-", "cluster-"];

/// Where the instances of a cluster are: `explicit` (a route's `instance_domain`), else the domain the
/// cluster endpoint `host` implies. `None` if neither says (an address, a CNAME, a custom domain).
pub fn instance_domain(explicit: Option<&str>, host: &str) -> Option<String> {
    if let Some(domain) = explicit.map(|d| d.trim().trim_matches('.')).filter(|d| !d.is_empty()) {
        return Some(domain.to_ascii_lowercase());
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let mut labels = host.splitn(3, '.');
    let (_name, second, rest) = (labels.next()?, labels.next()?, labels.next()?);
    if !rest.contains(".rds.amazonaws.") {
        return None;
    }
    let id = CLUSTER_PREFIXES.iter().find_map(|p| second.strip_prefix(p)).filter(|id| !id.is_empty())?;
    Some(format!("{id}.{rest}"))
}

/// The instance endpoint of `server_id` in `domain`, if `server_id` can be a host name's first label (what
/// the topology says is not trusted to make a host name of anything else).
pub fn instance_host(server_id: &str, domain: &str) -> Option<String> {
    let fits = !server_id.is_empty()
        && server_id.len() <= MAX_LABEL
        && server_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !server_id.starts_with('-')
        && !server_id.ends_with('-');
    fits.then(|| format!("{}.{domain}", server_id.to_ascii_lowercase()))
}

/// Every route with `readers = "aurora"` knows where its instances are: from its cluster endpoint (its own
/// host, else `database_host`, else `database_url`'s) or its `instance_domain`.
pub(super) fn validate(config: &super::Config) -> Result<(), super::ConfigError> {
    for spec in config.databases.iter().filter(|r| r.discovers_readers()) {
        let fallback = match config.database_host.as_str() {
            "" => config.database_url.login.host.as_str(),
            host => host,
        };
        let host = spec.host.as_deref().unwrap_or(fallback);
        if instance_domain(spec.instance_domain.as_deref(), host).is_none() {
            return Err(super::ConfigError::Entry(super::routes::EntryError {
                entry: format!("database {}", spec.name),
                key: Some("instance_domain".to_owned()),
                kind: super::routes::EntryErrorKind::Invalid,
                reason: format!(
                    "readers = \"aurora\" names instances <server_id>.<domain>, and the host {host:?} is not an \
                     Aurora cluster endpoint (name.cluster-XYZ.region.rds.amazonaws.com): set instance_domain"
                ),
            }));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_endpoint_implies_its_instances_domain() {
        let rest = "abc123xyz.eu-west-1.rds.amazonaws.com";
        for host in
            [format!("prod.cluster-{rest}"), format!("prod.cluster-ro-{rest}"), format!("Prod.Cluster-Custom-{rest}.")]
        {
            assert_eq!(instance_domain(None, &host).as_deref(), Some(rest), "{host}");
        }
        let china = "prod.cluster-abc.cn-north-1.rds.amazonaws.com.cn";
        assert_eq!(instance_domain(None, china).as_deref(), Some("abc.cn-north-1.rds.amazonaws.com.cn"));
    }

    #[test]
    fn other_hosts_need_instance_domain() {
        for host in ["127.0.0.1", "db.example.com", "prod.abc.eu-west-1.rds.amazonaws.com", "cluster-abc", ""] {
            assert_eq!(instance_domain(None, host), None, "{host}");
        }
        assert_eq!(instance_domain(Some(".Aurora-Standin.test."), "127.0.0.1").as_deref(), Some("aurora-standin.test"));
        assert_eq!(instance_domain(Some(" "), "db.example.com"), None);
    }

    #[test]
    fn only_a_host_label_makes_an_instance_host() {
        assert_eq!(instance_host("Reader-1", "d.test").as_deref(), Some("reader-1.d.test"));
        for bad in ["", "-a", "a-", "a.b", "a b", "a/b", "é", &"a".repeat(64)] {
            assert_eq!(instance_host(bad, "d.test"), None, "{bad:?}");
        }
    }
}
