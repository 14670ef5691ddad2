//! [`Name`]: a user's name and the key it becomes. The one place where a name meets the
//! [name prefix](crate::Config::name_prefix): every handle (locks, synchronizers, elections,
//! the actors' addresses, `describe`) is built from a `Name` that only [`Inner::name`] makes,
//! so no way in can reach Redis with the bare name.
//!
//! [`Inner::name`]: crate::handles::state::Inner::name

use std::sync::Arc;

use crate::error::LockError;
use crate::protocol::keys;

/// A name as the user gave it, and the key every key and channel of it is built from.
#[derive(Clone)]
pub(crate) struct Name {
    /// The given name with the prefix, as Redisson's `PrefixNameMapper` maps it.
    key: Arc<str>,
    /// Where the given name starts in `key`: after the prefix.
    given_from: usize,
}

impl Name {
    /// `given` under `prefix`. A name that starts with the prefix already is used as it is
    /// (Redisson's mapper does the same), and given back without it.
    pub(super) fn new(prefix: &str, given: String) -> Self {
        Self::keyed(crate::config::map_name(prefix, given).into(), prefix)
    }

    /// The name whose key, under `prefix`, is `key` (a key made already: the directory's).
    pub(super) fn keyed(key: Arc<str>, prefix: &str) -> Self {
        Self {
            key,
            given_from: prefix.len(),
        }
    }

    /// The name as given, without the prefix.
    pub(crate) fn given(&self) -> &str {
        self.key.get(self.given_from..).unwrap_or_default()
    }

    /// The key: the name with the prefix.
    pub(crate) fn key(&self) -> &Arc<str> {
        &self.key
    }

    /// Checked on every use before anything is sent: the name as given must not be empty (a
    /// prefix alone names nothing). In a cluster the registry also checks the key's braces
    /// when it starts the name's actor.
    pub(crate) fn validate(&self) -> Result<(), LockError> {
        keys::validate_name(self.given())
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.key.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_added_once_and_given_back_without_it() {
        let n = Name::new("app1:", "orders".into());
        assert_eq!((n.given(), &**n.key()), ("orders", "app1:orders"));
        let n = Name::new("app1:", "app1:orders".into());
        assert_eq!((n.given(), &**n.key()), ("orders", "app1:orders"));
        let n = Name::new("", "orders".into());
        assert_eq!((n.given(), &**n.key()), ("orders", "orders"));
    }

    #[test]
    fn a_prefix_alone_is_no_name() {
        assert!(Name::new("app1:", String::new()).validate().is_err());
        assert!(Name::new("app1:", "app1:".into()).validate().is_err());
        assert!(Name::new("", String::new()).validate().is_err());
        assert!(Name::new("app1:", "x".into()).validate().is_ok());
    }
}
