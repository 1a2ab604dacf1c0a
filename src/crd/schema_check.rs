//! Is the installed CRD at least as new as the one this operator was built with?
//!
//! Helm installs the files of a chart's `crds/` folder once and never upgrades them, so a new
//! operator image can run against an old CRD. The API server then prunes every field the old
//! schema does not know from every write, silently (server-side apply answers with a warning
//! at most): a status field the hold rule relies on (`publishedInstances`, a member's
//! `unstopped`, …) reads back as absent, and the operator would plan from a record that
//! forgets what it wrote (safety review N2). So the operator compares, at start, the schema
//! it would install with the installed one and refuses to run when a field of its own is
//! missing there. Extra fields in the installed CRD (a newer CRD, an older operator) are fine:
//! they are kept, and this operator does not write them.
//!
//! Pure: two CRDs in, the missing field paths out.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use serde_json::Value;

/// What our CRD has and the installed one lacks, as paths a user can read
/// (`v1alpha1: status.members[].unstopped`), in schema order. Empty when the installed CRD
/// keeps everything we write.
pub(crate) fn missing_from_installed(
    installed: &CustomResourceDefinition,
    ours: &CustomResourceDefinition,
) -> Vec<String> {
    let mut missing = Vec::new();
    for version in &ours.spec.versions {
        let Some(theirs) = installed.spec.versions.iter().find(|v| v.name == version.name) else {
            missing.push(format!("version {}", version.name));
            continue;
        };
        if !theirs.served {
            missing.push(format!("version {} (not served)", version.name));
        }
        let has_status =
            |v: &CustomResourceDefinitionVersion| v.subresources.as_ref().is_some_and(|s| s.status.is_some());
        if has_status(version) && !has_status(theirs) {
            // Without the subresource every status patch is a 404: nothing could be recorded.
            missing.push(format!("{}: the status subresource", version.name));
        }
        let schema = |v: &CustomResourceDefinitionVersion| {
            v.schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .map(|s| serde_json::to_value(s).expect("a JSON schema serializes"))
                .unwrap_or(Value::Null)
        };
        let mut paths = Vec::new();
        compare(&schema(version), &schema(theirs), "", &mut paths);
        missing.extend(paths.into_iter().map(|path| format!("{}: {path}", version.name)));
    }
    missing
}

/// Walks `ours` and records, under `path`, every property `theirs` would prune. A node of
/// theirs that keeps unknown fields (`x-kubernetes-preserve-unknown-fields`) prunes nothing
/// below it that it does not describe.
fn compare(ours: &Value, theirs: &Value, path: &str, missing: &mut Vec<String>) {
    let keeps_unknown = theirs
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(properties) = ours.get("properties").and_then(Value::as_object) {
        let known = theirs.get("properties").and_then(Value::as_object);
        for (name, schema) in properties {
            let child = join(path, name);
            match known.and_then(|k| k.get(name)) {
                Some(their_schema) => compare(schema, their_schema, &child, missing),
                None if keeps_unknown => {}
                None => missing.push(child),
            }
        }
    }
    // A list's elements and a map's values have a schema of their own, pruned the same way.
    // (A JSON-schema `items` that is an array of schemas never occurs in a structural CRD.)
    if let Some(items) = ours.get("items").filter(|i| i.is_object()) {
        match theirs.get("items").filter(|i| i.is_object()) {
            Some(their_items) => compare(items, their_items, &format!("{path}[]"), missing),
            None if keeps_unknown => {}
            None => missing.push(format!("{path}[]")),
        }
    }
    if let Some(values) = ours.get("additionalProperties").filter(|a| a.is_object()) {
        match theirs.get("additionalProperties") {
            Some(their_values) if their_values.is_object() => {
                compare(values, their_values, &format!("{path}{{}}"), missing)
            }
            // `additionalProperties: true` keeps any value as it is.
            Some(Value::Bool(true)) => {}
            _ if keeps_unknown => {}
            _ => missing.push(format!("{path}{{}}")),
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::crd;

    /// Our CRD with the schema node at `pointer` (a JSON pointer below the version's
    /// `openAPIV3Schema`) changed by `edit`.
    fn installed_with(pointer: &str, edit: impl FnOnce(&mut Value)) -> CustomResourceDefinition {
        let mut value = serde_json::to_value(crd()).unwrap();
        let schema = value
            .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
            .unwrap();
        edit(schema.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")));
        serde_json::from_value(value).unwrap()
    }

    fn remove(key: &'static str) -> impl FnOnce(&mut Value) {
        move |node| {
            node.as_object_mut()
                .unwrap()
                .remove(key)
                .unwrap_or_else(|| panic!("{key}"));
        }
    }

    #[test]
    fn the_crd_we_install_lacks_nothing() {
        assert_eq!(missing_from_installed(&crd(), &crd()), Vec::<String>::new());
    }

    #[test]
    fn a_status_field_an_older_crd_lacks_is_named_by_its_path() {
        let installed = installed_with(
            "/properties/status/properties/members/items/properties",
            remove("unstopped"),
        );
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: status.members[].unstopped"]
        );
        let installed = installed_with("/properties/status/properties", remove("publishedInstances"));
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: status.publishedInstances"]
        );
    }

    #[test]
    fn a_missing_object_is_one_entry_not_one_per_field_below_it() {
        let installed = installed_with("/properties/spec/properties", remove("auth"));
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: spec.auth"]
        );
    }

    #[test]
    fn a_list_or_map_without_an_element_schema_prunes_its_elements() {
        let installed = installed_with("/properties/status/properties/members", remove("items"));
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: status.members[]"]
        );
    }

    #[test]
    fn a_node_that_keeps_unknown_fields_keeps_what_it_does_not_describe() {
        let installed = installed_with("/properties/status", |status| {
            status["properties"]
                .as_object_mut()
                .unwrap()
                .remove("publishedInstances");
            status["x-kubernetes-preserve-unknown-fields"] = Value::Bool(true);
        });
        assert_eq!(missing_from_installed(&installed, &crd()), Vec::<String>::new());
        // What it does describe is pruned by its own schema, as the API server does: a list it
        // describes without an element schema loses its elements.
        let installed = installed_with("/properties/status", |status| {
            status["properties"]["members"]
                .as_object_mut()
                .unwrap()
                .remove("items");
            status["x-kubernetes-preserve-unknown-fields"] = Value::Bool(true);
        });
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: status.members[]"]
        );
    }

    #[test]
    fn a_newer_crd_with_more_fields_is_accepted() {
        let installed = installed_with("/properties/status/properties", |props| {
            props["fromTheFuture"] = serde_json::json!({"type": "string"});
        });
        assert_eq!(missing_from_installed(&installed, &crd()), Vec::<String>::new());
    }

    #[test]
    fn a_missing_version_or_status_subresource_is_named() {
        let mut installed = crd();
        installed.spec.versions[0].subresources = None;
        assert_eq!(
            missing_from_installed(&installed, &crd()),
            ["v1alpha1: the status subresource"]
        );
        installed.spec.versions[0].name = "v0".into();
        assert_eq!(missing_from_installed(&installed, &crd()), ["version v1alpha1"]);
    }
}
