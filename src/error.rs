//! The one error type of the operator. Its variant names the failure in metrics and logs.

/// Everything that can make a reconcile or the operator's start fail.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the Kubernetes API failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[source] kube::Error),

    /// The RedlockCluster CRD is not installed in the cluster the operator talks to.
    #[error(
        "the RedlockCluster CRD (redlockclusters.{group}) is not installed: run `kubectl apply -f crds/redlockcluster.yaml` (or `redlock-operator crd | kubectl apply -f -`) and start the operator again",
        group = crate::crd::GROUP
    )]
    CrdNotInstalled,

    /// The installed CRD's schema lacks fields this operator writes: the API server would
    /// drop them from every write, and the operator would plan from a record that forgets
    /// what it wrote (`crd::schema_check`).
    // The missing paths, only for the message.
    #[error(
        "the installed RedlockCluster CRD (redlockclusters.{group}) is older than this operator: its schema lacks {fields}, which the API server would drop from every write; run `kubectl apply -f crds/redlockcluster.yaml` (or `redlock-operator crd | kubectl apply -f -`; `helm upgrade` never upgrades CRDs) and start the operator again",
        group = crate::crd::GROUP,
        fields = summarize(.0)
    )]
    CrdOutdated(Vec<String>),

    /// No kube client could be built (no in-cluster config and no usable KUBECONFIG).
    #[error("cannot configure a Kubernetes client: {0}")]
    ClientConfig(#[source] kube::Error),

    /// A RedlockCluster without a namespace reached the reconciler (cannot happen for a
    /// namespaced kind, but the API types allow it).
    // The cluster's name, only for the message.
    #[error("RedlockCluster {0} has no namespace")]
    MissingNamespace(String),

    /// `spec.tls.secretName` is missing or has no `ca.crt`: the operator cannot verify its
    /// instances (and their pods cannot start). Nothing is released until it is fixed.
    // A sentence for the user, also published as the TLSSecretInvalid event: nothing matches on
    // its parts, so it stays a String.
    #[error("TLS: {0}")]
    TlsSecret(String),

    /// A password the running instances may still use is gone from its Secret, or was changed
    /// there: nothing is probed or released until the original is back, and no new one is made.
    #[error("credentials: {0}")]
    Credentials(#[from] crate::children::secrets::CredentialsProblem),

    /// The status document could not be serialized.
    #[error("cannot serialize status: {0}")]
    Serialize(#[from] serde_json::Error),

    /// Leader election flags that cannot work together.
    // A sentence naming the flags, shown once at start-up: nothing matches on it.
    #[error("leader election: {0}")]
    LeaseConfig(String),

    /// A child object's name is taken by an object another owner controls (another cluster,
    /// an earlier incarnation of this one awaiting garbage collection, a user's own object):
    /// the operator never overwrites it.
    #[error("{kind} {name} exists and is {owner}: not overwritten; rename or remove it")]
    OwnedByOther {
        kind: String,
        name: String,
        owner: String,
    },

    /// The leader lease is not (or no longer certainly) held: nothing may be written.
    #[error("not the leader (lease lost or not renewed within the renew deadline)")]
    NotLeader,

    /// The HTTP server for health and metrics could not bind or serve.
    #[error("HTTP server on {addr} failed: {source}")]
    Http {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        Error::Kube(e)
    }
}

impl Error {
    /// Short stable label for metrics (`reason` of `redlock_reconcile_errors_total`).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubeApi",
            Error::CrdNotInstalled => "CrdNotInstalled",
            Error::CrdOutdated(_) => "CrdOutdated",
            Error::ClientConfig(_) => "ClientConfig",
            Error::MissingNamespace(_) => "MissingNamespace",
            Error::TlsSecret(_) => "TlsSecret",
            Error::Credentials(_) => "Credentials",
            Error::Serialize(_) => "Serialize",
            Error::LeaseConfig(_) => "LeaseConfig",
            Error::OwnedByOther { .. } => "OwnershipConflict",
            Error::NotLeader => "NotLeader",
            Error::Http { .. } => "Http",
        }
    }
}

/// The first few missing paths and how many more: the error stays one readable line.
fn summarize(missing: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = missing[..missing.len().min(SHOWN)].join(", ");
    if missing.len() > SHOWN {
        text.push_str(&format!(" and {} more", missing.len() - SHOWN));
    }
    text
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_missing_message_tells_how_to_install() {
        let msg = Error::CrdNotInstalled.to_string();
        assert!(msg.contains("redlockclusters.redlock.dev"), "{msg}");
        assert!(msg.contains("kubectl apply -f crds/redlockcluster.yaml"), "{msg}");
        assert!(!msg.contains('\n'), "must be one line: {msg}");
    }

    #[test]
    fn crd_outdated_message_names_the_fields_and_the_fix() {
        let one = Error::CrdOutdated(vec!["v1alpha1: status.members[].unstopped".into()]);
        let msg = one.to_string();
        assert!(
            msg.contains("lacks v1alpha1: status.members[].unstopped, which"),
            "{msg}"
        );
        assert!(msg.contains("kubectl apply -f crds/redlockcluster.yaml"), "{msg}");
        assert!(!msg.contains('\n'), "must be one line: {msg}");
        let many = Error::CrdOutdated((0..8).map(|i| format!("v1alpha1: spec.f{i}")).collect());
        let msg = many.to_string();
        assert!(msg.contains("spec.f4 and 3 more"), "{msg}");
        assert!(!msg.contains("spec.f5"), "{msg}");
    }
}
