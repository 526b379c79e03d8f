//! The local permissions a caller may be granted (DDR-21): the vocabulary
//! shared by the rules that grant them and the item types whose commands
//! need them.

use std::fmt;

/// A local permission. `admin` implies all the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    /// List and show work items.
    Read,
    /// Create and update work items.
    Submit,
    /// Retry failed or cancelled items.
    Retry,
    /// Ask for a merge.
    Merge,
    /// Everything.
    Admin,
}

impl Permission {
    /// Every permission, in the order of [`Permission::NAMES`].
    pub const ALL: [Permission; 5] = [
        Permission::Read,
        Permission::Submit,
        Permission::Retry,
        Permission::Merge,
        Permission::Admin,
    ];
    /// The names used in the config file.
    pub const NAMES: [&'static str; 5] = ["read", "submit", "retry", "merge", "admin"];

    /// The permission a config name stands for.
    pub fn parse(name: &str) -> Option<Permission> {
        let index = Permission::NAMES.iter().position(|known| *known == name)?;
        Some(Permission::ALL[index])
    }

    /// Its name in the config file.
    pub fn as_str(self) -> &'static str {
        Permission::NAMES[self.index()]
    }

    /// Its position in [`Permission::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_names_round_trip() {
        for (index, permission) in Permission::ALL.into_iter().enumerate() {
            assert_eq!(permission.index(), index);
            assert_eq!(Permission::parse(permission.as_str()), Some(permission));
        }
        assert_eq!(Permission::parse("Admin"), None);
        assert_eq!(Permission::parse("deploy"), None);
    }
}
