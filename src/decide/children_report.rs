//! What applying a cluster's children came to, as the decision reads it (the apply itself is
//! `crate::reconcile::children`).

/// What applying the children came to.
#[derive(Debug, Default, Clone)]
pub struct ChildrenReport {
    /// Names taken by objects another owner controls.
    pub conflicts: Vec<String>,
    /// Other failures.
    pub problems: Vec<String>,
    /// The ACL Secret, the credentials and redis.conf are this cluster's own and current: only
    /// then may pods be created (a pod would otherwise mount someone else's files).
    pub config_ready: bool,
    /// Something was written, read from the API server, refused or failed: not every child
    /// was shown current by the cache (`children_memo` remembers only that outcome).
    pub unsettled: bool,
    /// Children (`<Kind> <name>`) found edited since they were applied, and put back.
    pub restored: Vec<String>,
}

impl ChildrenReport {
    /// The report of children all found current.
    pub fn current() -> Self {
        Self {
            config_ready: true,
            ..Self::default()
        }
    }

    /// Whether every child was shown current by the cache, and nothing else came of it.
    pub fn all_current(&self) -> bool {
        self.config_ready && !self.unsettled && self.conflicts.is_empty() && self.problems.is_empty()
    }
}
