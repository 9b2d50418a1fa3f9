//! The JSON that RDS, Aurora and the Secrets Manager rotation templates keep in a database secret.
//!
//! Parsed by hand over `serde_json::Value` rather than with a derived `Deserialize`: serde's messages quote
//! the offending value ("invalid type: string \"hunter2\""), and a secret's values must never reach a log.

use pgmux_secret::Secret;
use serde_json::{Map, Value};

use crate::AwsError;

/// An RDS/Aurora database secret: `{"engine", "host", "port", "username", "password", "dbname"}`.
///
/// `port` may be a number or a numeric string (both occur in the wild); unknown keys (`masterarn`,
/// `dbClusterIdentifier`, ...) are ignored. Secrets created for RDS-managed master passwords carry only
/// `username` and `password`, so everything else is optional. The password is a [`Secret`], so `Debug`
/// shows it as `***`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbSecret {
    /// `postgres`, `aurora-postgresql`, ...
    pub engine: Option<String>,
    /// The database endpoint.
    pub host: Option<String>,
    /// The database port.
    pub port: Option<u16>,
    /// The database user.
    pub username: String,
    /// The user's password.
    pub password: Secret,
    /// The database name.
    pub dbname: Option<String>,
}

/// Parses a secret string in the RDS format. Errors name the missing or invalid field and never repeat a
/// value from the secret.
pub fn parse_db_secret(json: &str) -> Result<DbSecret, AwsError> {
    let value: Value = serde_json::from_str(json).map_err(|e| {
        invalid(
            "",
            // Only the position: serde_json's syntax messages do not quote input, but be certain.
            format!("the secret is not valid JSON (syntax error at line {}, column {})", e.line(), e.column()),
        )
    })?;
    let Value::Object(fields) = value else {
        return Err(invalid("", format!("the secret must be a JSON object, found {}", kind(&value))));
    };
    Ok(DbSecret {
        engine: optional_string(&fields, "engine")?,
        host: optional_string(&fields, "host")?,
        port: port(&fields)?,
        username: required_string(&fields, "username")?,
        password: Secret::new(required_string(&fields, "password")?),
        dbname: optional_string(&fields, "dbname")?,
    })
}

fn invalid(field: &'static str, problem: String) -> AwsError {
    AwsError::InvalidSecret { field, problem }
}

fn required_string(fields: &Map<String, Value>, name: &'static str) -> Result<String, AwsError> {
    match optional_string(fields, name)? {
        Some(value) => Ok(value),
        None if fields.contains_key(name) => Err(invalid(name, format!("field `{name}` is empty"))),
        None => Err(invalid(name, format!("field `{name}` is missing"))),
    }
}

/// A string field; absent, `null` and `""` are all "not given".
fn optional_string(fields: &Map<String, Value>, name: &'static str) -> Result<Option<String>, AwsError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(name, format!("field `{name}` must be a string, found {}", kind(other)))),
    }
}

fn port(fields: &Map<String, Value>) -> Result<Option<u16>, AwsError> {
    let bad = || invalid("port", "field `port` must be a port number (1-65535), as a number or a string".into());
    let number = match fields.get("port") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
        Some(Value::String(s)) => s.trim().parse::<u64>().map_err(|_| bad())?,
        Some(Value::Number(n)) => n.as_u64().ok_or_else(bad)?,
        Some(other) => {
            return Err(invalid("port", format!("field `port` must be a number or a string, found {}", kind(other))));
        }
    };
    match u16::try_from(number) {
        Ok(port) if port > 0 => Ok(Some(port)),
        _ => Err(bad()),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWORD: &str = "s3cr3t-Pa55\"word";

    fn field_of(err: AwsError) -> (&'static str, String) {
        let text = err.to_string();
        assert!(!text.contains("s3cr3t"), "the password leaked: {text}");
        match err {
            AwsError::InvalidSecret { field, .. } => (field, text),
            other => panic!("not InvalidSecret: {other}"),
        }
    }

    #[test]
    fn full_rds_secret() {
        let json = serde_json::json!({
            "engine": "postgres", "host": "db.cluster-x.eu-west-1.rds.amazonaws.com", "port": 5432,
            "username": "app", "password": PASSWORD, "dbname": "orders",
            "masterarn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:master", "dbClusterIdentifier": "x",
        })
        .to_string();
        let s = parse_db_secret(&json).unwrap();
        assert_eq!(s.engine.as_deref(), Some("postgres"));
        assert_eq!(s.host.as_deref(), Some("db.cluster-x.eu-west-1.rds.amazonaws.com"));
        assert_eq!(s.port, Some(5432));
        assert_eq!((s.username.as_str(), s.password.expose()), ("app", PASSWORD));
        assert_eq!(s.dbname.as_deref(), Some("orders"));
        let debug = format!("{s:?}");
        assert!(!debug.contains("s3cr3t") && debug.contains("password: Secret(***)"), "{debug}");
    }

    #[test]
    fn managed_master_password_secret_has_only_credentials() {
        let s = parse_db_secret(r#"{"username":"postgres","password":"p"}"#).unwrap();
        assert_eq!((s.engine, s.host, s.port, s.dbname), (None, None, None, None));
    }

    #[test]
    fn port_as_string_number_or_nothing() {
        let port = |v: &str| parse_db_secret(&format!(r#"{{"username":"u","password":"p","port":{v}}}"#));
        assert_eq!(port(r#""5432""#).unwrap().port, Some(5432));
        assert_eq!(port(r#"" 6432 ""#).unwrap().port, Some(6432));
        assert_eq!(port("5433").unwrap().port, Some(5433));
        assert_eq!(port("null").unwrap().port, None);
        assert_eq!(port(r#""""#).unwrap().port, None);
        for bad in ["0", "65536", "-1", "5432.5", r#""54x""#, "true", "[5432]"] {
            let (field, text) = field_of(port(bad).unwrap_err());
            assert_eq!(field, "port", "{bad}: {text}");
            assert!(text.contains("`port`"), "{text}");
        }
    }

    #[test]
    fn missing_and_mistyped_fields_are_named() {
        let (field, text) =
            field_of(parse_db_secret(&format!(r#"{{"username":"u","pasword":"{}"}}"#, "s3cr3t")).unwrap_err());
        assert_eq!(field, "password");
        assert!(text.contains("field `password` is missing"), "{text}");

        let (field, text) = field_of(parse_db_secret(r#"{"password":"s3cr3t"}"#).unwrap_err());
        assert_eq!(field, "username");
        assert!(text.contains("`username` is missing"), "{text}");

        let (field, text) = field_of(parse_db_secret(r#"{"username":"","password":"s3cr3t"}"#).unwrap_err());
        assert_eq!(field, "username");
        assert!(text.contains("`username` is empty"), "{text}");

        let (field, text) = field_of(parse_db_secret(r#"{"username":"u","password":12345678}"#).unwrap_err());
        assert_eq!(field, "password");
        assert!(text.contains("must be a string, found a number"), "{text}");

        let (field, _) = field_of(parse_db_secret(r#"{"username":"u","password":"s3cr3t","host":["h"]}"#).unwrap_err());
        assert_eq!(field, "host");
    }

    #[test]
    fn malformed_json_gives_position_only() {
        let (field, text) = field_of(parse_db_secret(r#"{"username":"u","password":"s3cr3t""#).unwrap_err());
        assert_eq!(field, "");
        assert!(text.contains("not valid JSON") && text.contains("line 1"), "{text}");

        let (_, text) = field_of(parse_db_secret(r#"{"username":"u","password":s3cr3t}"#).unwrap_err());
        assert!(text.contains("not valid JSON"), "{text}");

        let (_, text) = field_of(parse_db_secret(r#""s3cr3t""#).unwrap_err());
        assert!(text.contains("must be a JSON object, found a string"), "{text}");
    }
}
