//! Databases the console has `DISABLE`d: a new client of one is refused (55000, as PostgreSQL refuses a
//! database that does not allow connections) until `ENABLE`; clients already in stay and keep working, as
//! in PgBouncer. Looked up once per login; empty, it costs one uncontended read lock.

use parking_lot::RwLock;

/// The names of the disabled databases, as clients name them.
#[derive(Debug, Default)]
pub(crate) struct Disabled(RwLock<Vec<String>>);

impl Disabled {
    /// Refuses new clients of `database` from now on.
    pub(crate) fn disable(&self, database: &str) {
        let mut names = self.0.write();
        if !names.iter().any(|n| n == database) {
            names.push(database.to_owned());
        }
    }

    /// Lets new clients of `database` in again; whether it was disabled.
    pub(crate) fn enable(&self, database: &str) -> bool {
        let mut names = self.0.write();
        let before = names.len();
        names.retain(|n| n != database);
        names.len() != before
    }

    pub(crate) fn is(&self, database: &str) -> bool {
        self.0.read().iter().any(|n| n == database)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_is_disabled_until_enabled_and_only_it() {
        let disabled = Disabled::default();
        assert!(!disabled.is("app"));
        disabled.disable("app");
        disabled.disable("app");
        assert!(disabled.is("app") && !disabled.is("reports"));
        assert!(disabled.enable("app"), "it was disabled");
        assert!(!disabled.is("app"));
        assert!(!disabled.enable("app"), "enabling twice says it was not");
    }
}
