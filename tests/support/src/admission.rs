//! Writes refused by the API server the way a webhook or a policy engine refuses them in the
//! field: a ValidatingAdmissionPolicy with its binding, scoped to one namespace, lifted by
//! [`Refusal::lift`].

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// Which writes a [`Refusal`] refuses: `operations` on `resources` of `api_group` (`""` for the
/// core group), those for which the CEL `expression` is false.
pub struct Refused<'a> {
    pub api_group: &'a str,
    pub operations: &'a [&'a str],
    pub resources: &'a str,
    pub expression: String,
    pub message: &'a str,
}

/// A policy and its binding in place; [`Refusal::lift`] deletes both.
pub struct Refusal {
    client: kube::Client,
    name: String,
}

/// Installs a policy named `name` refusing `what` in namespace `ns`.
pub async fn refuse(client: kube::Client, ns: &str, name: &str, what: Refused<'_>) -> Refusal {
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [what.api_group], "apiVersions": ["*"],
                "operations": what.operations, "resources": [what.resources],
            }]},
            "validations": [{"expression": what.expression, "message": what.message}],
        },
    }))
    .expect("a well-formed policy");
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": ns,
            }}},
        },
    }))
    .expect("a well-formed binding");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy created");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding created");
    Refusal {
        client,
        name: name.to_owned(),
    }
}

/// A policy named `name` refusing every write of the status subresource of the
/// RedlockClusters in namespace `ns`, create and update alike, with `message` (in the field a
/// webhook, a policy engine, or a writer that makes each conditional write a 409).
pub async fn refuse_status_writes(client: kube::Client, ns: &str, name: &str, message: &str) -> Refusal {
    let what = Refused {
        api_group: "redlock.dev",
        operations: &["CREATE", "UPDATE"],
        resources: "redlockclusters/status",
        expression: "false".into(),
        message,
    };
    refuse(client, ns, name, what).await
}

impl Refusal {
    /// Deletes the binding, then the policy.
    pub async fn lift(self) {
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("binding deleted");
        Api::<ValidatingAdmissionPolicy>::all(self.client)
            .delete(&self.name, &DeleteParams::default())
            .await
            .expect("policy deleted");
    }
}
