//! Reading a configuration: the TOML file, then the `PGMUX_<KEY>` environment over it, then the checks.
//! Every other way of reading one (PgBouncer's ini) starts from [`Config::base`] and ends in
//! [`Config::finish`], so the environment and the checks apply to it the same way.

use std::collections::BTreeMap;
use std::path::Path;

use super::value::{self, Raw};
use super::{Config, ConfigError, KEYS, Profile, Source, ValueError, routes};

impl Config {
    /// Reads the optional TOML file, then the environment (`PGMUX_<KEY>` overrides `<key>`), then checks.
    pub fn load<I>(path: Option<&Path>, env: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        Self::load_for(Profile::Sidecar, path, env)
    }

    /// Like [`load`](Self::load), with the defaults of `profile`.
    pub fn load_for<I>(profile: Profile, path: Option<&Path>, env: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let text = match path {
            Some(p) => std::fs::read_to_string(p)
                .map_err(|e| ConfigError::Read { path: p.display().to_string(), reason: e.to_string() })?,
            None => String::new(),
        };
        Self::from_parts(profile, &text, env)
    }

    /// Parses TOML text alone (no environment) and checks the result.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        Self::from_parts(Profile::Sidecar, text, std::iter::empty())
    }

    pub(super) fn from_parts<I>(profile: Profile, text: &str, env: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Toml(e.to_string()))?;
        let mut cfg = Config::base(profile);
        let mut sources: BTreeMap<&'static str, Source> = BTreeMap::new();
        for (key, value) in &table {
            match key.as_str() {
                "databases" => {
                    cfg.databases = routes::routes_from_toml(value)?;
                    continue;
                }
                "users" => {
                    cfg.users = routes::users_from_toml(value)?;
                    continue;
                }
                _ => {}
            }
            let known = cfg.set(key, &Raw::Toml(value)).map_err(|reason| ConfigError::Invalid {
                key: key.clone(),
                origin: Source::File,
                reason: reason.into(),
            })?;
            if !known {
                return Err(ConfigError::UnknownKey(key.clone()));
            }
            if let Some(info) = KEYS.iter().find(|k| k.name == key) {
                sources.insert(info.name, Source::File);
            }
        }
        cfg.finish(sources, env)
    }

    /// The key table's defaults, then `profile`'s own: where every way of reading a file starts.
    pub(crate) fn base(profile: Profile) -> Config {
        let mut cfg = Config::defaults();
        for (key, value) in profile.defaults() {
            cfg.set(key, &value::Raw::Default(value))
                .unwrap_or_else(|e| unreachable!("profile default of {key} is invalid: {e}"));
        }
        cfg.profile = profile;
        cfg
    }

    /// Sets `key` from text written as an environment variable writes it (another file format's reader,
    /// PgBouncer's ini); `Ok(false)` if pgmux has no such key.
    pub(crate) fn set_text(&mut self, key: &str, text: &str) -> Result<bool, ValueError> {
        self.set(key, &Raw::Env(text))
    }

    /// The last steps of every way of loading: the environment over what the file set (`sources` says which
    /// keys it set), then the checks.
    pub(crate) fn finish<I>(self, mut sources: BTreeMap<&'static str, Source>, env: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let mut cfg = self;
        let env: BTreeMap<String, String> = env.into_iter().collect();
        for info in KEYS {
            let var = info.env_var();
            if let Some(value) = env.get(&var) {
                cfg.set(info.name, &Raw::Env(value)).map_err(|reason| ConfigError::Invalid {
                    key: info.name.to_owned(),
                    origin: Source::Env(var.clone()),
                    reason: reason.into(),
                })?;
                sources.insert(info.name, Source::Env(var));
            }
        }
        if let Some(list) = env.get(routes::DATABASES_VAR) {
            cfg.databases = routes::routes_from_env(list)?;
        }
        if let Some(list) = env.get(routes::USERS_VAR) {
            cfg.users = routes::users_from_env(list)?;
        }
        cfg.resolve_sslmode();
        cfg.validate(&sources)?;
        Ok(cfg)
    }
}
