//! What the operator checks it may do at start, beyond what it cannot run without (safety
//! review 3, N10): `patch pods/status`, the readiness gate `redlock.dev/serving` of every pod it
//! builds. Without it (a new operator under a ClusterRole from before the gate: Helm upgrades
//! the chart's RBAC only with the chart) every gate write is refused, and each new or replaced
//! member stays not Ready: out of its Service, although the operator released it. Locks stay
//! safe (the ACL decides who gets in), but clients lose members one replacement at a time, so
//! the refusal is said once at start (an error in the log) and on every cluster (condition
//! `ChildrenApplied` False, its Warning `ChildApplyFailed`) for as long as this process runs.

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// Why the readiness gates cannot be written, if so: a `SelfSubjectAccessReview` of `patch
/// pods/status` in `namespace` (all namespaces when `None`) that was denied, or could not be
/// made (reported as such: unknown is not allowed).
pub(crate) async fn gate_writes_refused(client: &Client, namespace: Option<&str>) -> Option<String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("patch".into()),
                resource: Some("pods".into()),
                subresource: Some("status".into()),
                namespace: namespace.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await;
    refusal(
        answer
            .as_ref()
            .map(|r| r.status.as_ref().map(|s| (s.allowed, s.reason.as_deref()))),
    )
}

/// The sentence for a review's answer (`allowed`, `reason`), or for a review not made.
fn refusal(answer: Result<Option<(bool, Option<&str>)>, &kube::Error>) -> Option<String> {
    let why = match answer {
        Ok(Some((true, _))) => return None,
        Ok(Some((false, reason))) => format!(
            "denied{}",
            reason
                .filter(|r| !r.is_empty())
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        Ok(None) => "the access review came back without an answer".to_owned(),
        Err(e) => format!("the access review failed: {e}"),
    };
    Some(format!(
        "the operator may not patch pods/status ({why}): the readiness gate redlock.dev/serving of new or replaced pods cannot be opened, so they stay not Ready and out of their Services; give the operator the chart's ClusterRole (helm upgrade, or apply its pods/status rule) and restart it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_allowed_review_lets_the_gates_be_written() {
        assert_eq!(refusal(Ok(Some((true, None)))), None);
        let denied = refusal(Ok(Some((false, Some("no RBAC policy matched"))))).unwrap();
        assert!(
            denied.contains("may not patch pods/status (denied: no RBAC policy matched)"),
            "{denied}"
        );
        assert!(denied.contains("stay not Ready"), "{denied}");
        let unanswered = refusal(Ok(None)).unwrap();
        assert!(unanswered.contains("without an answer"), "{unanswered}");
    }
}
